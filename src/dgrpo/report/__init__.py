"""Self-contained HTML reports of run directories: ``dgrpo report RUN_DIR [RUN_DIR …]``."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from dgrpo.report.data import RunData, headline, load_run, payload_spans


def write_report(run_dirs: Sequence[str | Path], out: str | Path | None = None) -> Path:
    """Write the report of one run (or the comparison of several) and return its path.

    Args:
        out: HTML file; default ``RUN_DIR/report.html`` for one run, ``./report.html`` for several.

    Raises:
        FileNotFoundError: a path is not a run directory.
    """
    from dgrpo.report.page import render  # matplotlib is imported only when rendering

    runs = [load_run(p) for p in run_dirs]
    path = Path(out) if out else (runs[0].path / "report.html" if len(runs) == 1 else Path("report.html"))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(runs), encoding="utf-8")
    return path


__all__ = ["RunData", "headline", "load_run", "payload_spans", "write_report"]
