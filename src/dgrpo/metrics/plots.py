"""PNG plots of a run: reward per node, held-out accuracy with intervals, attack success, defenses."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import yaml

matplotlib.use("Agg")  # no screen
import matplotlib.pyplot as plt  # noqa: E402

from dgrpo.metrics.intervals import wilson  # noqa: E402
from dgrpo.metrics.logger import read_metrics, series  # noqa: E402


def plot_run(run_dir: str | Path) -> list[Path]:
    """Write ``reward.png`` (and ``eval.png`` / ``drift.png`` / ``asr.png`` / ``defense.png`` when those
    metrics exist).

    Returns:
        The paths written.
    """
    run_dir = Path(run_dir)
    records = read_metrics(run_dir)
    keys = sorted({k for r in records for k in r})
    written = []

    fig, ax = plt.subplots(figsize=(7, 4))
    for key in [k for k in keys if k.startswith("train/reward/node")]:
        xs, ys = series(records, key)
        ax.plot(xs, ys, alpha=0.45, lw=1, label=key.split("/")[-1])
    for key, style in (("train/reward_honest", "-"), ("eval/accuracy", "--"), ("train/format_rate", ":")):
        xs, ys = series(records, key)
        if xs:
            ax.plot(xs, ys, style, lw=2.2, marker="o" if key.startswith("eval") else None, label=key)
    xs, ys = series(records, "train/reward_honest")
    if len(ys) >= 4:  # a 4-round moving average makes the trend readable through batch noise
        smooth = [sum(ys[max(0, i - 3): i + 1]) / len(ys[max(0, i - 3): i + 1]) for i in range(len(ys))]
        ax.plot(xs, smooth, "-", color="black", lw=1.5, alpha=0.7, label="train/reward_honest (4-round mean)")
    ax.set_xlabel("round")
    ax.set_ylabel("mean reward")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    ax.set_title(run_dir.name, fontsize=9)
    fig.tight_layout()
    written.append(run_dir / "reward.png")
    fig.savefig(written[-1], dpi=120)
    plt.close(fig)

    if any(k in keys for k in EVAL_CURVES):
        written.append(plot_eval(run_dir, records))
    if any(k in keys for k in DRIFT_PANELS):
        written.append(plot_drift(run_dir, records))
    asr_keys = [k for k in keys if k.startswith("attack/") and "asr" in k]
    if asr_keys:
        written.append(_rates(run_dir, records, asr_keys, "attack success rate", "asr.png"))
    det_keys = [k for k in keys if k.startswith("defense/") and k.endswith(("detection_rate", "false_positive_rate"))]
    if det_keys:
        written.append(_rates(run_dir, records, det_keys, "rate", "defense.png"))
    return written


EVAL_CURVES = {  # key → (label, colour, line style)
    "eval/accuracy": ("accuracy, sampled", "tab:blue", "-"),
    "eval/greedy/accuracy": ("accuracy, greedy", "tab:blue", "--"),
    "eval/format_rate": ("format rate, sampled", "tab:green", "-"),
    "eval/greedy/format_rate": ("format rate, greedy", "tab:green", "--"),
}


def evaluation_caption(run_dir: Path, records: list[dict]) -> str:
    """What the evaluation measured, for a plot's subtitle: prompt count and decoding (from the run's
    ``config.yaml``; the completion count ``eval/n`` when the config is missing)."""
    try:
        config = yaml.safe_load((run_dir / "config.yaml").read_text())
    except (OSError, yaml.YAMLError):
        config = None
    return caption_of(config, records)


def caption_of(config: dict | None, records: list[dict]) -> str:
    """:func:`evaluation_caption` from a run's resolved config (a dict) and its records."""
    try:
        ev, sampling = config["eval"], config["sampling"]
        temperature = sampling["temperature"] if ev.get("temperature") is None else ev["temperature"]
        decoding = f"sampled at T={temperature:g}, top-k {sampling['top_k']}" + (" and greedy" if ev.get("greedy") else "")
        return f"{ev['n_prompts']} held-out prompts, {decoding}; shaded: Wilson 95% interval"
    except (KeyError, TypeError, ValueError):
        n = next((r["eval/n"] for r in records if r.get("eval/n")), "?")
        return f"{n} held-out completions; shaded: Wilson 95% interval"


def interval_series(records: list[dict], key: str, n_default: int | None = None) -> tuple[list, list, list] | None:
    """(rounds, lows, highs) of a rate's 95% interval: the logged ``{key}_ci95_low/high``, else
    Wilson's over ``eval/n`` (or ``n_default``) for records written before intervals were logged;
    None when neither exists for every point of the rate."""
    xs, lows, highs = [], [], []
    for rec in records:
        if rec.get(key) is None:
            continue
        low, high = rec.get(f"{key}_ci95_low"), rec.get(f"{key}_ci95_high")
        n = rec.get("eval/n") or n_default
        if low is None and n:
            low, high = wilson(rec[key] * n, n)
        if low is None:
            return None
        xs.append(rec["round"]), lows.append(low), highs.append(high)
    return (xs, lows, highs) if xs else None


def plot_eval(run_dir: Path, records: list[dict]) -> Path:
    """``eval.png``: held-out accuracy and format rate (sampled, greedy) per evaluation round with
    their Wilson 95% intervals (``{key}_ci95_low/high``, :mod:`dgrpo.metrics.intervals`)."""
    try:
        n_prompts = yaml.safe_load((run_dir / "config.yaml").read_text())["eval"]["n_prompts"]
    except (OSError, KeyError, TypeError, yaml.YAMLError):
        n_prompts = None
    fig, ax = plt.subplots(figsize=(7, 4))
    for key, (label, colour, style) in EVAL_CURVES.items():
        xs, ys = series(records, key)
        if not xs:
            continue
        ax.plot(xs, ys, style, color=colour, marker="o", ms=4, lw=1.8, label=label)
        band = interval_series(records, key, n_prompts)
        if band:
            ax.fill_between(band[0], band[1], band[2], color=colour, alpha=0.12 if style == "-" else 0.06, lw=0)
    ax.set_xlabel("round")
    ax.set_ylabel("rate on held-out prompts")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    ax.set_title(f"{run_dir.name}\n{evaluation_caption(run_dir, records)}", fontsize=8)
    fig.tight_layout()
    fig.savefig(run_dir / "eval.png", dpi=120)
    plt.close(fig)
    return run_dir / "eval.png"


DRIFT_PANELS = {  # key → panel title (docs/training.md, "What to watch")
    "eval/kl_to_start": "KL to the start weights (nats/token)",
    "eval/entropy": "next-token entropy (nats)",
    "eval/completion_tokens": "completion length (tokens)",
}


def drift_panels(records: list[dict]) -> list[tuple[str, list, list]]:
    """(title, rounds, values) of every :data:`DRIFT_PANELS` metric the records carry, in that order."""
    return [(title, *series(records, key)) for key, title in DRIFT_PANELS.items() if series(records, key)[0]]


def plot_drift(run_dir: Path, records: list[dict]) -> Path:
    """``drift.png``: what shows a collapse coming (docs/training.md), one panel per logged metric of
    :data:`DRIFT_PANELS` (``eval/kl_to_start``, ``eval/entropy``, ``eval/completion_tokens``,
    :mod:`dgrpo.training.evaluate`) over evaluation rounds."""
    panels = drift_panels(records)
    fig, axes = plt.subplots(1, len(panels), figsize=(3.2 * len(panels), 3), squeeze=False)
    for ax, (title, xs, ys) in zip(axes[0], panels):
        ax.plot(xs, ys, marker="o", ms=4, lw=1.8, color="tab:purple")
        ax.set_title(title, fontsize=8)
        ax.set_xlabel("round", fontsize=8)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=7)
    fig.suptitle(f"{run_dir.name}: KL and entropy on the first evaluation's completions, length of each evaluation's", fontsize=8)
    fig.tight_layout()
    fig.savefig(run_dir / "drift.png", dpi=120)
    plt.close(fig)
    return run_dir / "drift.png"


def _rates(run_dir: Path, records: list[dict], keys: list[str], ylabel: str, filename: str) -> Path:
    """One PNG of several [0, 1] metrics over rounds."""
    fig, ax = plt.subplots(figsize=(7, 4))
    for key in keys:
        xs, ys = series(records, key)
        ax.plot(xs, ys, marker="o", ms=3, label=key)
    ax.set_xlabel("round")
    ax.set_ylabel(ylabel)
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title(run_dir.name, fontsize=9)
    fig.tight_layout()
    fig.savefig(run_dir / filename, dpi=120)
    plt.close(fig)
    return run_dir / filename
