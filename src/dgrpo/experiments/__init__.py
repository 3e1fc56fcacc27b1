"""Experiments: Algorithms 1 and 2 of the paper as runnable loops."""

from __future__ import annotations

from pathlib import Path

from dgrpo.config import RunConfig


def run_experiment(cfg: RunConfig, run_dir: Path | None = None) -> Path:
    """Run Algorithm 1 (horizontal) or 2 (vertical) as the config says; returns the run directory."""
    if cfg.swarm.mode == "horizontal":
        from dgrpo.experiments.alg1_horizontal import run
    else:
        from dgrpo.experiments.alg2_vertical import run
    return run(cfg, run_dir)
