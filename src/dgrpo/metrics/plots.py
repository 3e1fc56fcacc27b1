"""PNG plots of a run: reward per node and validation accuracy, attack success, defenses."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no screen
import matplotlib.pyplot as plt  # noqa: E402

from dgrpo.metrics.logger import read_metrics, series  # noqa: E402


def plot_run(run_dir: str | Path) -> list[Path]:
    """Write ``reward.png`` (and ``asr.png`` / ``defense.png`` when those metrics exist).

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

    asr_keys = [k for k in keys if k.startswith("attack/") and "asr" in k]
    if asr_keys:
        written.append(_rates(run_dir, records, asr_keys, "attack success rate", "asr.png"))
    det_keys = [k for k in keys if k.startswith("defense/") and k.endswith(("detection_rate", "false_positive_rate"))]
    if det_keys:
        written.append(_rates(run_dir, records, det_keys, "rate", "defense.png"))
    return written


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
