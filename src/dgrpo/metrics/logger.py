"""Per-round metrics: one JSON object per line in ``metrics.jsonl`` (and optionally TensorBoard).

Keys are namespaced: ``train/``, ``eval/``, ``attack/``, ``defense/``, ``swarm/``, ``time/``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Sequence

from dgrpo.errors import MetricsFileError


class MetricsLogger:
    """Appends round records to ``run_dir/metrics.jsonl``; mirrors them to the trackers asked for
    (:mod:`dgrpo.metrics.trackers`: TensorBoard, W&B, trackio), each with the resolved config.

    Args:
        tensorboard: also write TensorBoard event files (the same as ``trackers=["tensorboard"]``).
        trackers: tracker names; config: the resolved config (a JSON-able dict) the trackers record.
    """

    def __init__(self, run_dir: Path, tensorboard: bool = False, trackers: Sequence[str] = (),
                 config: dict | None = None, project: str = "dgrpo", wandb_mode: str | None = None):
        from dgrpo.metrics.trackers import open_trackers

        self.path = Path(run_dir) / "metrics.jsonl"
        names = (["tensorboard"] if tensorboard else []) + list(trackers)
        self.trackers = open_trackers(Path(run_dir), names, config, project, wandb_mode)

    @classmethod
    def for_run(cls, run_dir: Path, cfg, main: bool = True) -> "MetricsLogger":
        """The logger of a run: ``cfg.tensorboard`` and ``cfg.tracking`` (a RunConfig) pick the trackers;
        a process other than the main one (``main=False``, distributed) opens none."""
        t = cfg.tracking
        if not main:
            return cls(run_dir)
        return cls(run_dir, cfg.tensorboard, t.trackers, cfg.model_dump(mode="json"), t.project, t.wandb_mode)

    def log(self, record: dict) -> None:
        """Write one round's record (must hold ``round``)."""
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in record.items()}
        with self.path.open("a") as fh:
            fh.write(json.dumps(clean, sort_keys=True) + "\n")
        for tracker in self.trackers:
            tracker.log(clean)

    def close(self) -> None:
        for tracker in self.trackers:
            tracker.close()
        self.trackers = []


def read_records(path: str | Path, partial_last_ok: bool = False) -> list[tuple[str, dict]]:
    """(line, record) of every non-blank line of a JSON-lines log of round records, in order.

    Args:
        partial_last_ok: drop an unparsable last line that lacks its newline (a write interrupted by a
            crash; ``dgrpo resume`` runs that round again) instead of raising.

    Raises:
        FileNotFoundError: no such file.
        MetricsFileError: a line is not JSON, not an object, or has no integer ``round`` (names the line).
    """
    path = Path(path)
    lines = [line for line in path.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True) if line.strip()]
    out = []
    for lineno, line in enumerate(lines, 1):
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            rec, problem = None, "not JSON"
        else:
            ok = isinstance(rec, dict) and isinstance(rec.get("round"), int)
            problem = None if ok else "not a round record (an object with an integer 'round')"
        if problem:
            if partial_last_ok and lineno == len(lines) and not line.endswith("\n"):
                break
            raise MetricsFileError(f"{path}:{lineno}: {problem}")
        out.append((line if line.endswith("\n") else line + "\n", rec))
    return out


def read_metrics(run_dir: str | Path) -> list[dict]:
    """All round records of a run directory's ``metrics.jsonl``, in order.

    Raises:
        FileNotFoundError: the run directory has no metrics.jsonl.
        MetricsFileError: a line is not JSON, not an object, or has no integer ``round`` (names the line).
    """
    return [rec for _, rec in read_records(Path(run_dir) / "metrics.jsonl")]


def series(records: list[dict], key: str) -> tuple[list[int], list[float]]:
    """(rounds, values) of one metric, skipping rounds where it is absent or null."""
    xs, ys = [], []
    for rec in records:
        if rec.get(key) is not None:
            xs.append(rec["round"])
            ys.append(rec[key])
    return xs, ys
