"""Copy the small files of the runs of run_all.sh into results/robust/ and summarise them.

    PYTHONPATH=src python benchmarks/robust/collect.py [runs/robust]

Copies per run: command.txt, wall_seconds.txt, config.yaml, metrics.jsonl, summary.json,
groups.json, requests.json and *.png (and the same from sub-runs: group*/, single/, attack_*/,
benign_*/) — never weights. Writes federated.csv / federated.md / federated.png from the
federated runs.
"""

from __future__ import annotations

import csv
import json
import shutil
import statistics
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from dgrpo.metrics.logger import read_metrics, series  # noqa: E402

HERE = Path(__file__).resolve().parents[2] / "results" / "robust"  # where the results live
KEEP = ("command.txt", "wall_seconds.txt", "config.yaml", "metrics.jsonl", "summary.json", "groups.json", "requests.json")


def copy_small(src: Path, dst: Path) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.is_file() and (f.name in KEEP or f.suffix == ".png"):
            shutil.copy2(f, dst / f.name)
        elif f.is_dir() and f.name.startswith(("group", "single", "attack_", "benign_")):
            copy_small(f, dst / f.name)


def _finished(d: Path) -> bool:
    """A finished run (run_all.sh marks skipped ones with .skipped)."""
    return (d / ".done").exists() and not (d / ".skipped").exists() and (d / "metrics.jsonl").exists()


def angle_of(rec: dict) -> float | None:
    """fed/angle, with a zero aggregate under a non-zero honest mean read as 90° (no progress; runs
    logged before that rule hold None there)."""
    if rec.get("fed/angle") is None and rec.get("fed/aggregate_norm") == 0 and rec.get("fed/honest_mean_norm"):
        return 90.0
    return rec.get("fed/angle")


def _mean(xs):
    xs = [x for x in xs if x is not None]
    return statistics.fmean(xs) if xs else None


def federated_table(dirs: list[Path]) -> list[dict]:
    rows = []
    for d in dirs:
        recs = read_metrics(d)
        cfg = json.loads(json.dumps(__import__("yaml").safe_load((d / "config.yaml").read_text())))
        train = [r for r in recs if "fed/angle" in r or "train/reward_honest" in r]
        evals = [r for r in recs if r.get("eval/accuracy") is not None]
        angles = [angle_of(r) for r in train]
        rewards = [r.get("train/reward_honest") for r in train]
        half = len(rewards) // 2
        rows.append({
            "run": d.name, "aggregator": cfg["federated"]["aggregator"], "attack": cfg["federated"]["attack"],
            "mean_angle_deg": _mean(angles), "max_angle_deg": max((a for a in angles if a is not None), default=None),
            "rounds_angle_ge_90": sum(a is not None and a >= 90 for a in angles), "rounds": len(train),
            "mean_progress": _mean([r.get("fed/progress") for r in train]),
            "honest_pairwise_cos": _mean([r.get("fed/honest_pairwise_cos") for r in train]),
            "reward_first_half": _mean(rewards[:half]), "reward_second_half": _mean(rewards[half:]),
            "eval_accuracy_start": evals[0]["eval/accuracy"] if evals else None,
            "eval_accuracy_end": evals[-1]["eval/accuracy"] if evals else None,
            "wall_seconds": int((d / "wall_seconds.txt").read_text()) if (d / "wall_seconds.txt").exists() else None,
        })
    return rows


# Runs trained before commit fbf80f8 (centered clipping's default radius = median norm of the honest
# updates that moved): their probe of centered_clipping used zero updates in that median, so it is left out.
CC_BEFORE_RADIUS_FIX = {"fed_average_noattack", "fed_krum_normalized", "fed_median_normalized"}


def probe_table(dirs: list[Path]) -> dict[tuple[str, str], list[float]]:
    """Probe angles per (aggregator, attack), over every round of the given runs."""
    acc: dict[tuple[str, str], list[float]] = {}
    for d in dirs:
        for r in read_metrics(d):
            for k, v in r.items():
                if k.startswith("probe/") and v is not None:
                    _, agg, attack, _ = k.split("/")
                    if agg == "centered_clipping" and d.name in CC_BEFORE_RADIUS_FIX:
                        continue
                    acc.setdefault((agg, attack), []).append(v)
    return acc


def fmt(x, nd=3):
    return "–" if x is None else (f"{x:.{nd}f}" if isinstance(x, float) else str(x))


def write_federated(runs: Path, out: Path) -> None:
    dirs = sorted(d for d in runs.glob("fed_*") if _finished(d))
    if not dirs:
        return
    rows = federated_table(dirs)
    with (out / "federated.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    probe = probe_table(dirs)
    aggs = sorted({a for a, _ in probe})
    attacks = sorted({t for _, t in probe})
    lines = ["| run | aggregator | attack | mean angle (°) | max angle (°) | rounds ≥ 90° | progress | honest reward 1st→2nd half | eval acc start→end | wall s |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['run']} | {r['aggregator']} | {r['attack']} | {fmt(r['mean_angle_deg'], 1)} | {fmt(r['max_angle_deg'], 1)} | "
                     f"{r['rounds_angle_ge_90']}/{r['rounds']} | {fmt(r['mean_progress'], 2)} | "
                     f"{fmt(r['reward_first_half'])} → {fmt(r['reward_second_half'])} | "
                     f"{fmt(r['eval_accuracy_start'])} → {fmt(r['eval_accuracy_end'])} | {fmt(r['wall_seconds'])} |")
    n_rounds = max(len(v) for v in probe.values()) if probe else 0
    lines += ["", f"Probe: deviation angle (°) each aggregator would suffer under each update attack (1 attacker, 5 nodes), "
              f"measured on the honest updates of every round of the runs above ({n_rounds} rounds): "
              "mean [min, max], and the rounds with angle ≥ 90° (no progress or reversed). "
              f"centered_clipping is measured only on the runs after its radius fix (not {', '.join(sorted(CC_BEFORE_RADIUS_FIX))}).", "",
              "| aggregator | " + " | ".join(attacks) + " |", "|---|" + "---|" * len(attacks)]

    def cell(v):
        if not v:
            return "–"
        return f"{statistics.fmean(v):.1f} [{min(v):.0f}, {max(v):.0f}], {sum(x >= 90 for x in v)}/{len(v)} ≥ 90°"

    for a in aggs:
        lines.append(f"| {a} | " + " | ".join(cell(probe.get((a, t))) for t in attacks) + " |")
    (out / "federated.md").write_text("\n".join(lines) + "\n")

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4))
    for d in dirs:
        recs = read_metrics(d)
        pts = [(r["round"], angle_of(r)) for r in recs if angle_of(r) is not None]
        xs, ys = [p[0] for p in pts], [p[1] for p in pts]
        if xs:
            a1.plot(xs, ys, marker="o", label=d.name.removeprefix("fed_"))
        xs, ys = series(recs, "train/reward_honest")
        a2.plot(xs, ys, marker=".", alpha=0.8, label=d.name.removeprefix("fed_"))
    a1.axhline(90, color="grey", ls=":", lw=0.8)
    a1.set_ylabel("angle(aggregate, honest mean) [deg]")
    a2.set_ylabel("honest nodes' mean reward")
    for ax in (a1, a2):
        ax.set_xlabel("round")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "federated.png", dpi=120)
    plt.close(fig)


def main(runs: Path) -> None:
    for d in sorted(runs.iterdir()):
        if d.is_dir() and _finished(d):
            copy_small(d, HERE / d.name)
    write_federated(runs, HERE)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("runs/robust"))
