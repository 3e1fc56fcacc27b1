"""Algorithm 1 (horizontal dRL): every node writes G/m completions of the same B global prompts."""

from __future__ import annotations

from pathlib import Path

from dgrpo.config import RunConfig
from dgrpo.experiments.loop import loop
from dgrpo.experiments.setup import Run
from dgrpo.swarm.messages import Message
from dgrpo.swarm.schedule import horizontal_prompts, horizontal_slots


def write_round(run: Run, round_idx: int) -> dict[int, list[Message]]:
    """Alg.1 L3-5 for the nodes this process hosts."""
    cfg = run.cfg.swarm
    prompts = horizontal_prompts(run.task.train, cfg.prompts_per_round, run.cfg.seed, round_idx)  # Alg.1 L3-4
    hosted = [*run.swarm.policies, *run.swarm.attacks]
    slots = {k: horizontal_slots(prompts, cfg.group_size, cfg.nodes, k) for k in hosted}  # Alg.1 L5: gen(p_i, G/m)
    return run.swarm.write(slots, round_idx)


def run(cfg: RunConfig, run_dir: Path | None = None) -> Path:
    """Train a horizontal swarm; the all-gather (L6, L8) and update (L9) are in :func:`loop`."""
    return loop(cfg, write_round, run_dir)
