"""PNG plots of the robust-FRL and hardening experiments (read only run directories)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no screen
import matplotlib.pyplot as plt  # noqa: E402

from dgrpo.metrics.logger import read_metrics, series  # noqa: E402


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_federated(run_dir: str | Path) -> list[Path]:
    """``federated.png``: deviation angle and progress of the aggregate; ``probe.png``: mean
    deviation angle per aggregator and update attack (when the probe ran)."""
    run_dir = Path(run_dir)
    records = read_metrics(run_dir)
    written = []
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.8))
    xs, ys = series(records, "fed/angle")
    a1.plot(xs, ys, marker="o")
    a1.set_ylim(-2, 182)
    a1.set_ylabel("angle(aggregate, honest mean) [deg]")
    xs, ys = series(records, "fed/progress")
    a2.plot(xs, ys, marker="o", label="progress along honest mean")
    xs, ys = series(records, "train/reward_honest")
    a2.plot(xs, ys, marker=".", label="honest reward")
    xs, ys = series(records, "eval/accuracy")
    a2.plot(xs, ys, "--", marker="s", label="eval accuracy")
    a2.legend(fontsize=8)
    for ax in (a1, a2):
        ax.set_xlabel("round")
        ax.grid(alpha=0.3)
    fig.suptitle(run_dir.name, fontsize=9)
    written.append(_save(fig, run_dir / "federated.png"))
    probe = sorted({k for r in records for k in r if k.startswith("probe/")})
    if probe:
        aggs = sorted({k.split("/")[1] for k in probe})
        attacks = sorted({k.split("/")[2] for k in probe})
        fig, ax = plt.subplots(figsize=(9, 4))
        width = 0.8 / len(attacks)
        for j, attack in enumerate(attacks):
            means = []
            for agg in aggs:
                _, ys = series(records, f"probe/{agg}/{attack}/angle")
                means.append(sum(ys) / len(ys) if ys else 0.0)
            ax.bar([i + j * width for i in range(len(aggs))], means, width, label=attack)
        ax.set_xticks([i + width * (len(attacks) - 1) / 2 for i in range(len(aggs))], aggs, rotation=20, fontsize=8)
        ax.set_ylabel("mean deviation angle [deg]")
        ax.axhline(90, color="grey", lw=0.8, ls=":")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3, axis="y")
        written.append(_save(fig, run_dir / "probe.png"))
    return written


def plot_ensemble(run_dir: str | Path) -> Path:
    """``ensemble.png``: vote ASR and accuracy over rounds next to each group's and the single swarm's."""
    run_dir = Path(run_dir)
    records = read_metrics(run_dir)
    single = read_metrics(run_dir / "single") if (run_dir / "single" / "metrics.jsonl").exists() else []
    keys = sorted({k for r in records for k in r})
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, vote_key, group_suffix, single_key, title in (
            (a1, "ensemble/asr_vote", "/asr", "attack/asr", "attack success rate"),
            (a2, "ensemble/accuracy", "/accuracy", "eval/accuracy", "validation accuracy")):
        xs, ys = series(records, vote_key)
        if xs:
            ax.plot(xs, ys, lw=2.4, marker="o", label="ensemble vote")
        for key in [k for k in keys if k.startswith("group") and k.endswith(group_suffix)]:
            xs, ys = series(records, key)
            ax.plot(xs, ys, alpha=0.6, marker=".", label=key.split("/")[0])
        xs, ys = series(single, single_key)
        if xs:
            ax.plot(xs, ys, "--", lw=2, marker="s", label="single swarm")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("round")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(run_dir.name, fontsize=9)
    return _save(fig, run_dir / "ensemble.png")


def plot_hardening(run_dir: str | Path) -> Path:
    """``hardening.png``: target-phrase rate under the malicious reward, response entropy, and the
    benign task's reward, original vs hardened."""
    run_dir = Path(run_dir)
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for name, style in (("original", "-"), ("hardened", "--")):
        attack_dir = run_dir / f"attack_{name}"
        if (attack_dir / "metrics.jsonl").exists():
            recs = read_metrics(attack_dir)
            for ax, key in ((axes[0], "attack/phrase_rate"), (axes[1], "attack/entropy")):
                xs, ys = series(recs, key)
                ax.plot(xs, ys, style, marker="o", label=name)
        benign_dir = run_dir / f"benign_{name}"
        if (benign_dir / "metrics.jsonl").exists():
            recs = read_metrics(benign_dir)
            xs, ys = series(recs, "train/reward_honest")
            axes[2].plot(xs, ys, style, alpha=0.7, label=f"{name} train reward")
            xs, ys = series(recs, "eval/accuracy")
            axes[2].plot(xs, ys, style, marker="s", label=f"{name} eval accuracy")
            xs, ys = series(recs, "eval/format_rate")
            axes[2].plot(xs, ys, style, marker="^", label=f"{name} eval format rate")
    titles = ("target-phrase rate (malicious GRPO)", "response entropy on held-out requests [nats]", "benign task")
    for ax, title in zip(axes, titles):
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("round")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    axes[0].set_ylim(-0.02, 1.02)
    axes[2].set_ylim(-0.02, 1.02)
    return _save(fig, run_dir / "hardening.png")
