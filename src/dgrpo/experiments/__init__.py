"""Experiments: Algorithms 1 and 2 of the paper as runnable loops."""

from __future__ import annotations

from pathlib import Path

from dgrpo.config import RunConfig


def run_experiment(cfg: RunConfig, run_dir: Path | None = None) -> Path:
    """Run Algorithm 1 (horizontal) or 2 (vertical) as the config says — or the federated, ensemble or
    hardening experiment when its section is set; returns the run directory."""
    if cfg.federated is not None:
        from dgrpo.experiments.federated import run
    elif cfg.ensemble is not None:
        from dgrpo.experiments.ensemble import run
    elif cfg.hardening is not None:
        from dgrpo.experiments.harden import run
    elif cfg.swarm.mode == "horizontal":
        from dgrpo.experiments.alg1_horizontal import run
    else:
        from dgrpo.experiments.alg2_vertical import run
    return run(cfg, run_dir)
