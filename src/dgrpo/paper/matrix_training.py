"""The attack × defense matrix after training: one row per trained cell (``dgrpo paper
matrix_training``, curve ``ATTACK__DEFENSE``), beside the one-round detection rate the matrix measured.

Per cell, from the run's last evaluation (held-out prompts, sampled at the training temperature):

* ``asr``: the attack's own success metric (``attack/asr``: the payload's share for injections, the
  conditional 2+2→5 share for the equation attacks, the filler's share for written DoS, a bare master
  key's share), with a Wilson 95% interval over the completions it is measured on;
* ``accuracy``: held-out accuracy (``eval/accuracy``) with its interval, against the all-honest baseline;
* ``tokens``: mean completion length in tokens (what a DoS attack raises);
* ``detection`` / ``fp``: the defense's mean detection and false-positive rates over the training
  rounds (``defense/any/*``; none for ``none``).
"""

from __future__ import annotations

import json
from pathlib import Path


def _final(records: list[dict], key: str):
    values = [r[key] for r in records if r.get(key) is not None]
    return values[-1] if values else None


def _mean(records: list[dict], key: str):
    values = [r[key] for r in records if r.get(key) is not None]
    return sum(values) / len(values) if values else None


def asr_trials(run_dir: Path, last: dict) -> int | None:
    """How many completions the final ASR is a share of: the attack's eval prompts (for the
    equation attacks, those whose completion computed 2+2 or 2×2, ``attack/two_two_considered``).
    Rebuilds the run's task and attack from the task, attack and eval sections of its ``config.yaml``
    (no model; an older run's other sections may no longer validate)."""
    from dgrpo.attacks import build_attack
    from dgrpo.config import RunConfig, read_config_file
    from dgrpo.training.build import build_task

    data = read_config_file(run_dir / "config.yaml")
    cfg = RunConfig.model_validate({k: data[k] for k in ("seed", "task", "attack", "eval") if k in data}
                                   | {"swarm": {k: data.get("swarm", {})[k] for k in ("malicious", "mode") if k in data.get("swarm", {})}})
    if cfg.attack.kind == "none":
        return None
    task = build_task(cfg)
    n = len(build_attack(cfg.attack, cfg).eval_problems(task.val)[: cfg.eval.n_prompts])
    considered = last.get("attack/two_two_considered")
    return round(considered * n) if considered is not None else n


def cell_summary(run_dir: str | Path) -> dict:
    """The trained cell's numbers (see the module docstring); ``round`` is the last evaluated round.

    Raises:
        FileNotFoundError: no ``metrics.jsonl`` or ``config.yaml`` in ``run_dir``.
    """
    from dgrpo.metrics.intervals import wilson
    from dgrpo.metrics.logger import read_metrics

    run_dir = Path(run_dir)
    records = read_metrics(run_dir)
    evals = [r for r in records if r.get("eval/accuracy") is not None]
    if not evals:
        raise FileNotFoundError(f"{run_dir}: no evaluation in metrics.jsonl (the run has not reached one)")
    last = evals[-1]
    out = {"run_dir": str(run_dir), "round": last["round"], "accuracy": last["eval/accuracy"],
           "accuracy_ci95": [last.get("eval/accuracy_ci95_low"), last.get("eval/accuracy_ci95_high")],
           "tokens": last.get("eval/completion_tokens"), "asr": last.get("attack/asr"),
           "asr_start": evals[0].get("attack/asr"), "train_reward_honest": _final(records, "train/reward_honest"),
           "detection": _mean(records, "defense/any/detection_rate"), "fp": _mean(records, "defense/any/false_positive_rate")}
    n = asr_trials(run_dir, last)
    out["asr_n"] = n
    out["asr_ci95"] = list(wilson(out["asr"] * n, n)) if n and out["asr"] is not None else None
    return out


def _pct(x, ci=None) -> str:
    if x is None:
        return "–"
    return f"{100 * x:.1f}%" + (f" [{100 * ci[0]:.0f}, {100 * ci[1]:.0f}]" if ci and None not in ci else "")


def _tokens(c: dict) -> str:
    return "–" if c["tokens"] is None else f"{c['tokens']:.1f}"


def table_markdown(cells: dict[str, dict], baseline: dict | None, matrix: dict | None) -> str:
    """Markdown: one row per cell (attack, defense, one-round detection, training-time detection and false
    positives, ASR at the start and after training, held-out accuracy, completion length)."""
    lines = ["| attack | defense | one-round detection (matrix) | detection / FP in training | ASR round 0 → last (n) "
             "| held-out accuracy | tokens |", "|---|---|---|---|---|---|---|"]
    for name, c in cells.items():
        attack, defense = name.split("__")
        one = ((matrix or {}).get("attacks", {}).get(attack, {}).get("detection", {}).get(defense) or {}).get("rate")
        train = "–" if c["detection"] is None else f"{_pct(c['detection'])} / {_pct(c['fp'])}"
        lines.append(f"| {attack} | {defense} | {_pct(one)} | {train} | {_pct(c['asr_start'])} → "
                     f"{_pct(c['asr'], c['asr_ci95'])} ({c['asr_n']}) | {_pct(c['accuracy'], c['accuracy_ci95'])} | "
                     f"{_tokens(c)} |")
    if baseline:
        lines.append(f"| (all honest) | – | – | – | – | {_pct(baseline['accuracy'], baseline['accuracy_ci95'])} | "
                     f"{_tokens(baseline)} |")
    return "\n".join(lines) + "\n"


def plot(cells: dict[str, dict], baseline: dict | None, path: Path) -> None:
    """Two panels: ASR after training per cell, held-out accuracy per cell (baseline as a band)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(cells)
    fig, axes = plt.subplots(1, 2, figsize=(12, 0.38 * len(names) + 1.8), sharey=True)
    for ax, key, title in ((axes[0], "asr", "ASR after training"), (axes[1], "accuracy", "held-out accuracy")):
        for i, n in enumerate(names):
            c = cells[n]
            if c[key] is None:
                continue
            ci = c[f"{key}_ci95"]
            err = [[c[key] - ci[0]], [ci[1] - c[key]]] if ci and None not in ci else None
            ax.barh(i, c[key], xerr=err, color="C3" if key == "asr" else "C0", alpha=0.8, capsize=2)
        if key == "accuracy" and baseline:
            lo, hi = baseline["accuracy_ci95"]
            ax.axvspan(lo, hi, color="grey", alpha=0.2, label=f"all-honest baseline {baseline['accuracy']:.2f}")
            ax.axvline(baseline["accuracy"], color="grey")
            ax.legend(fontsize=8, loc="lower right")
        ax.set_xlim(0, 1)
        ax.set_title(title + " (Wilson 95%)", fontsize=10)
        ax.grid(alpha=0.3, axis="x")
    axes[0].set_yticks(range(len(names)), [n.replace("__", " vs ") for n in names], fontsize=8)
    axes[0].invert_yaxis()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_training_table(run_dirs: dict[str, str | Path], out: str | Path, baseline_dir: str | Path | None = None,
                         matrix_json: str | Path | None = None) -> dict:
    """Summarise trained cells into ``out``: ``training.json``, ``training.md``, ``training.png``.

    Args:
        run_dirs: cell name ``ATTACK__DEFENSE`` → run directory.
        baseline_dir: the all-honest run at the same settings (its accuracy is the reference).
        matrix_json: the one-round matrix (``matrix.json``) whose detection rate each row quotes.

    Raises:
        FileNotFoundError: a run without metrics, config or evaluation.
        ValueError: a cell name that is not ``ATTACK__DEFENSE``.
    """
    bad = [n for n in run_dirs if n.count("__") != 1]
    if bad:
        raise ValueError(f"cell names must be ATTACK__DEFENSE, got {bad}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    cells = {n: cell_summary(d) for n, d in run_dirs.items()}
    baseline = cell_summary(baseline_dir) if baseline_dir else None
    matrix = json.loads(Path(matrix_json).read_text()) if matrix_json else None
    result = {"cells": cells, "baseline": baseline, "matrix": str(matrix_json) if matrix_json else None}
    (out / "training.json").write_text(json.dumps(result, indent=1))
    (out / "training.md").write_text(table_markdown(cells, baseline, matrix))
    plot(cells, baseline, out / "training.png")
    return result
