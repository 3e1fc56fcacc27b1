"""Recipes: each experiment of the paper and its seeds as one module that reads top to bottom.

    horizontal   Algorithm 1: global prompts, G/m completions per node          (recipes/horizontal.py)
    vertical     Algorithm 2: B/m local prompts per node, G completions each     (recipes/vertical.py)
    federated    nodes exchange policy updates and aggregate them robustly       (recipes/federated.py)
    ensemble     K disjoint swarms decided by majority vote                      (recipes/ensemble.py)
    hardening    TokenBuncher: harden, then malicious and benign fine-tuning     (recipes/hardening.py)

Each module exposes ``run(cfg, run_dir=None) -> Path``; the two swarm recipes also expose
``one_round(run, r)``, their round, and share the lines the two algorithms have in common (each honest
policy's update, the round's record, resuming) through ``recipes/swarm_round.py``. :func:`recipe` is
the one place that picks a recipe for a config.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

from dgrpo.config import RunConfig


def recipe(cfg: RunConfig) -> ModuleType:
    """The recipe module of a config: its ``federated``, ``ensemble`` or ``hardening`` section when
    set, else the swarm of ``swarm.mode``."""
    if cfg.federated is not None:
        name = "federated"
    elif cfg.ensemble is not None:
        name = "ensemble"
    elif cfg.hardening is not None:
        name = "hardening"
    else:
        name = cfg.swarm.mode  # horizontal | vertical
    return importlib.import_module(f"dgrpo.recipes.{name}")


def run(cfg: RunConfig, run_dir: Path | None = None) -> Path:
    """Run the recipe of ``cfg``; returns the run directory."""
    return recipe(cfg).run(cfg, run_dir)


def resume(run_dir: str | Path, overrides: list[str] | None = None) -> Path | None:
    """Continue the run in ``run_dir`` (``dgrpo resume``, dgrpo.training.resume); returns its directory,
    or None when every round has run (it prints ``nothing to do: …`` instead; it prints the run
    directory when it starts).

    Raises:
        FileNotFoundError, ConfigError, MetricsFileError: see
            :func:`dgrpo.training.resume.resumable_config` (raised before any model loads).
    """
    from dgrpo.training.resume import all_rounds_done, resumable_config

    run_dir = Path(run_dir)
    cfg = resumable_config(run_dir, overrides)
    if all_rounds_done(run_dir, cfg):
        print(f"nothing to do: {run_dir} has run all its {cfg.rounds} rounds (rounds=N with N > {cfg.rounds} "
              "extends it)", flush=True)
        return None
    print(f"run directory: {run_dir}", flush=True)
    return recipe(cfg).resume(cfg, run_dir, rewrite_config=bool(overrides))
