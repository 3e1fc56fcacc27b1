"""Scaled advantage of a poisoned completion against the poison ratio (paper §B.2 Fig. 8, §B.3 Fig. 10).

Notation (paper §B.2): a group holds G completions, c of them poisoned with reward r_p = 1 and the
other G − c honest with rewards r_h. With μ_r and σ_r the group's mean and std, the advantage of a
poisoned completion is Â = (r_p − μ_r)/σ_r and its *scaled* advantage — the weight of the c
repeated poisoned samples together in the group's gradient — is Â·c/G. We plot it against the
poison ratio p = c/G.

Closed form of Fig. 8 (honest rewards all 0, population std as in ``grpo.advantages``): the rewards
are c ones and G − c zeros, so μ_r = p and σ_r² = p(1 − p) (a Bernoulli(p) variance). Then

    Â = (1 − p)/√(p(1 − p)) = √((1 − p)/p),      Â·c/G = p·√((1 − p)/p) = √(p(1 − p)),

which is independent of G, peaks at p = 1/2 with value 1/2, and at p = 1/5 is still 0.4 (80% of
the peak), as §B.2 says. With the unbiased std (ddof = 1, ``torch.std``'s default, used by TRL)
σ_r² = G/(G − 1)·p(1 − p) and every value shrinks by √((G − 1)/G); the peak stays at p = 1/2.

Fig. 10 (§B.3): G = 12 and the honest rewards are drawn from N(μ_h, 0.25). The paper does not say
whether 0.25 is the std or the variance; we read it as the **std** (σ_h = 0.25), the way
``numpy.random.normal(loc, scale)`` takes it, which is the likeliest code behind the figure. The
paper does not clip, so by default neither do we (``clip=False``: rewards outside [0, 1] are kept);
``clip=True`` clips honest rewards to [0, 1], the range of the paper's binary reward. The value of
each (μ_h, c) is the mean of Â·c/G over ``n_draws`` seeded draws.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Sequence

import numpy as np

FIG8_GROUP_SIZES = (12, 16, 24, 32)  # paper Fig. 8 legend
FIG10_GROUP_SIZE = 12  # paper §B.3: "a set of 12 completions"
FIG10_MEANS = (0.0, 0.2, 0.4, 0.6)  # μ_h; the paper shows 4 settings and names 0.4 in the text
FIG10_STD = 0.25  # σ_h of N(μ_h, 0.25), read as a std (see module docstring)


def scaled_poison_advantage(honest: np.ndarray, c: int, poison_reward: float = 1.0, ddof: int = 0) -> np.ndarray:
    """Â·c/G of the poisoned completions, computed directly from the group's rewards.

    Shape:
        honest: (..., G − c) honest rewards (leading axes = independent groups) → (...,).

    Notation:
        Â = (r_p − μ_r)/σ_r over the G = c + (G − c) rewards of a group; a group with σ_r = 0 carries
        no signal and gets 0 (as ``grpo.advantages.group_advantages`` does).

    Args:
        c: poisoned completions per group (each with reward ``poison_reward``).
        ddof: 0 = population std (dgrpo's GRPO), 1 = unbiased std (TRL).
    """
    honest = np.asarray(honest, dtype=np.float64)
    if c < 0:
        raise ValueError(f"c must be ≥ 0, got {c}")
    poison = np.full(honest.shape[:-1] + (c,), float(poison_reward))
    rewards = np.concatenate([poison, honest], axis=-1)  # (..., G)
    g = rewards.shape[-1]
    if g - ddof <= 0:
        raise ValueError(f"group of {g} rewards has no std with ddof={ddof}")
    mean = rewards.mean(axis=-1)
    std = rewards.std(axis=-1, ddof=ddof)
    safe = np.where(std > 0, std, 1.0)
    adv = np.where(std > 0, (poison_reward - mean) / safe, 0.0)
    return adv * c / g


def fig8_closed_form(ratio: np.ndarray | float, group_size: int | None = None, ddof: int = 0) -> np.ndarray:
    """√(p(1 − p)) (× √((G − 1)/G) when ddof = 1): Fig. 8's curve for honest rewards 0, poisoned 1."""
    p = np.asarray(ratio, dtype=np.float64)
    value = np.sqrt(p * (1 - p))
    if ddof == 1:
        if group_size is None:
            raise ValueError("ddof=1 needs group_size")
        value = value * np.sqrt((group_size - 1) / group_size)
    elif ddof != 0:
        raise ValueError(f"ddof must be 0 or 1, got {ddof}")
    return value


def fig8_data(group_sizes: Sequence[int] = FIG8_GROUP_SIZES, ddof: int = 0) -> dict:
    """Fig. 8 numbers: for each G, c = 1..G−1, the ratio c/G, the direct Â·c/G and the closed form.

    Returns:
        ``{"curves": {G: {"c": [...], "ratio": [...], "scaled_advantage": [...], "closed_form": [...]}},
        "peak_ratio": {G: c/G at the maximum}, "settings": {...}}`` (plain lists, JSON-ready).
    """
    curves, peaks = {}, {}
    for g in group_sizes:
        cs = np.arange(1, g)
        direct = np.array([scaled_poison_advantage(np.zeros(g - c), int(c), ddof=ddof) for c in cs])
        ratio = cs / g
        curves[int(g)] = {"c": cs.tolist(), "ratio": ratio.tolist(), "scaled_advantage": direct.tolist(),
                          "closed_form": fig8_closed_form(ratio, g, ddof).tolist()}
        peaks[int(g)] = float(ratio[int(np.argmax(direct))])
    return {"curves": curves, "peak_ratio": peaks,
            "settings": {"honest_reward": 0.0, "poison_reward": 1.0, "ddof": ddof, "source": "paper §B.2, Fig. 8"}}


def fig10_data(means: Sequence[float] = FIG10_MEANS, group_size: int = FIG10_GROUP_SIZE, std: float = FIG10_STD,
               n_draws: int = 20000, seed: int = 0, clip: bool = False, ddof: int = 0) -> dict:
    """Fig. 10 numbers: mean Â·c/G over ``n_draws`` groups whose G − c honest rewards ~ N(μ_h, std).

    The same seeded standard-normal draws serve every (μ_h, c), so the curves differ only by μ_h
    and c (common random numbers), and results are reproducible for a given seed.

    Returns:
        ``{"curves": {μ_h: {"c", "ratio", "scaled_advantage", "stderr"}}, "peak_ratio": {μ_h: c/G},
        "settings": {...}}``; μ_h keys are strings like ``"0.4"`` (JSON keys).
    """
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((n_draws, group_size))  # (n_draws, G) shared noise
    cs = np.arange(1, group_size)
    curves, peaks = {}, {}
    for mu in means:
        vals, errs = [], []
        for c in cs:
            honest = mu + std * z[:, : group_size - c]  # (n_draws, G − c)
            if clip:
                honest = np.clip(honest, 0.0, 1.0)
            a = scaled_poison_advantage(honest, int(c), ddof=ddof)  # (n_draws,)
            vals.append(float(a.mean()))
            errs.append(float(a.std(ddof=1) / np.sqrt(n_draws)))
        key = f"{mu:g}"
        ratio = cs / group_size
        curves[key] = {"c": cs.tolist(), "ratio": ratio.tolist(), "scaled_advantage": vals, "stderr": errs}
        peaks[key] = float(ratio[int(np.argmax(vals))])
    return {"curves": curves, "peak_ratio": peaks,
            "settings": {"group_size": group_size, "honest_std": std, "std_or_variance": "std", "clip": clip,
                         "n_draws": n_draws, "seed": seed, "poison_reward": 1.0, "ddof": ddof,
                         "source": "paper §B.3, Fig. 10"}}


def _write(data: dict, out_dir: Path, stem: str, label: str, title: str) -> list[Path]:
    """``{stem}.json``, ``{stem}.csv`` (long format) and ``{stem}.png`` of a curves dict."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{stem}.json", out_dir / f"{stem}.csv", out_dir / f"{stem}.png"]
    paths[0].write_text(json.dumps(data, indent=1))
    with paths[1].open("w", newline="") as fh:
        w = csv.writer(fh)
        extra = [k for k in next(iter(data["curves"].values())) if k not in ("c", "ratio", "scaled_advantage")]
        w.writerow([label, "c", "ratio", "scaled_advantage", *extra])
        for key, cur in data["curves"].items():
            for i, c in enumerate(cur["c"]):
                w.writerow([key, c, cur["ratio"][i], cur["scaled_advantage"][i], *[cur[e][i] for e in extra]])
    fig, ax = plt.subplots(figsize=(6, 4))
    for key, cur in data["curves"].items():
        ax.plot(cur["ratio"], cur["scaled_advantage"], marker="o", ms=3, label=f"{label} = {key}")
    ax.axvline(0.5, color="grey", lw=0.8, ls=":")
    ax.set_xlabel("poison ratio c/G")
    ax.set_ylabel("scaled advantage Â·c/G")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(paths[2], dpi=120)
    plt.close(fig)
    return paths


def fig8(out_dir: str | Path, ddof: int = 0) -> dict:
    """Compute Fig. 8 and write ``fig8.{json,csv,png}`` to ``out_dir``; returns the data."""
    data = fig8_data(ddof=ddof)
    _write(data, Path(out_dir), "fig8", "G", "Fig. 8: honest reward 0, poisoned 1 (paper §B.2)")
    return data


def fig10(out_dir: str | Path, clip: bool = False, n_draws: int = 20000, seed: int = 0) -> dict:
    """Compute Fig. 10 and write ``fig10.{json,csv,png}`` to ``out_dir``; returns the data."""
    data = fig10_data(clip=clip, n_draws=n_draws, seed=seed)
    _write(data, Path(out_dir), "fig10", "μ_h",
           f"Fig. 10: G=12, honest ~ N(μ_h, σ=0.25){', clipped to [0,1]' if clip else ''} (paper §B.3)")
    return data
