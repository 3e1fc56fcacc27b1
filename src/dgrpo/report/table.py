"""A markdown table comparing runs (a sweep): what differs in their configs and how evaluation moved.

``dgrpo report --table RUN_DIR …`` prints it. Each row is one run: the config values that differ
between the runs, then held-out accuracy at the first and last evaluation with Wilson 95% intervals
(:mod:`dgrpo.metrics.intervals`, over ``eval/n`` completions, or ``eval.n_prompts`` when a run
predates ``eval/n``), the change, the greedy accuracy and format rate at the end, the drift from the
start (``eval/kl_to_start``) and the run's time.
"""

from __future__ import annotations

from typing import Sequence

from dgrpo.metrics.intervals import wilson
from dgrpo.report.data import RunData


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def differing(runs: Sequence[RunData], ignore: tuple[str, ...] = ("name", "out_dir")) -> list[str]:
    """Config keys (dotted) whose values are not the same in every run."""
    flats = [_flat(r.config) for r in runs]
    keys = sorted({k for f in flats for k in f} - set(ignore))
    return [k for k in keys if len({repr(f.get(k)) for f in flats}) > 1]


def _evaluations(run: RunData, key: str) -> list[dict]:
    return [r for r in run.records if r.get(key) is not None]


def _n(run: RunData, rec: dict) -> int | None:
    return rec.get("eval/n") or ((run.config.get("eval") or {}).get("n_prompts"))


def rate_with_interval(run: RunData, rec: dict, key: str) -> str:
    """``0.445 [0.36, 0.53]`` for a rate of one record (the logged interval, else Wilson over n)."""
    rate = rec[key]
    low, high = rec.get(f"{key}_ci95_low"), rec.get(f"{key}_ci95_high")
    n = _n(run, rec)
    if low is None and n:
        low, high = wilson(rate * n, n)
    return f"{rate:.3f}" + (f" [{low:.2f}, {high:.2f}]" if low is not None else "")


def sweep_table(runs: Sequence[RunData]) -> str:
    """The markdown table of ``runs`` (one row each, in the order given)."""
    keys = differing(runs) if len(runs) > 1 else []
    head = ["run", *keys, "evals (rounds)", "accuracy first", "accuracy last", "Δ", "greedy last",
            "format first → last", "KL to start", "minutes in rounds"]
    rows = []
    for run in runs:
        flat = _flat(run.config)
        evals = _evaluations(run, "eval/accuracy")
        cells = [run.name, *(str(flat.get(k, "—")) for k in keys)]
        if evals:
            first, last = evals[0], evals[-1]
            greedy = [r for r in evals if r.get("eval/greedy/accuracy") is not None]
            kl = last.get("eval/kl_to_start")
            fmt_first, fmt_last = first.get("eval/format_rate"), last.get("eval/format_rate")
            cells += [f"{len(evals)} ({', '.join(str(r['round']) for r in evals)})",
                      rate_with_interval(run, first, "eval/accuracy"), rate_with_interval(run, last, "eval/accuracy"),
                      f"{last['eval/accuracy'] - first['eval/accuracy']:+.3f}",
                      rate_with_interval(run, greedy[-1], "eval/greedy/accuracy") if greedy else "—",
                      f"{fmt_first:.2f} → {fmt_last:.2f}" if fmt_first is not None and fmt_last is not None else "—",
                      f"{kl:.4f}" if kl is not None else "—"]
        else:
            cells += ["0"] + ["—"] * 6
        seconds = sum(r.get("time/round", 0.0) or 0.0 for r in run.records)
        cells.append(f"{seconds / 60:.0f}" if seconds else "—")
        rows.append(cells)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"
