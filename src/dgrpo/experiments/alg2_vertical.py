"""Algorithm 2 (vertical dRL): every node answers B/m locally chosen prompts with all G completions."""

from __future__ import annotations

from pathlib import Path

from dgrpo.config import RunConfig
from dgrpo.experiments.loop import loop
from dgrpo.experiments.setup import Run
from dgrpo.swarm.messages import Message
from dgrpo.swarm.schedule import vertical_prompts, vertical_slots


def write_round(run: Run, round_idx: int) -> dict[int, list[Message]]:
    """Alg.2 L3-5 for the nodes this process hosts."""
    cfg, seed, pool = run.cfg.swarm, run.cfg.seed, run.task.train
    per_node = cfg.prompts_per_round // cfg.nodes
    slots = {}
    for k in run.swarm.policies:  # Alg.2 L3-4: local_P(i)
        slots[k] = vertical_slots(vertical_prompts(pool, per_node, seed, round_idx, k), cfg.group_size)  # L5: gen(p_i, G)
    for k, attack in run.swarm.attacks.items():  # attackers pick their own prompts (in-context targets)
        slots[k] = vertical_slots(attack.choose_prompts(pool, per_node, seed, round_idx, k), cfg.group_size)
    return run.swarm.write(slots, round_idx)


def run(cfg: RunConfig, run_dir: Path | None = None) -> Path:
    """Train a vertical swarm; the all-gather (L7) and update (L8) are in :func:`loop`."""
    return loop(cfg, write_round, run_dir)
