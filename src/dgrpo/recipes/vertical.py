"""Algorithm 2 (vertical dRL): every node answers B/m locally chosen prompts with all G completions.

One round for the nodes this process hosts (:func:`one_round`, ``# Alg.2 Ln`` marks the paper's lines)::

    L3-4  every node picks its own B/m prompts (a malicious node: its attack's targets)
    L5    every node writes all G completions of each; a malicious node writes its attack's instead
    L7    all-gather: every node holds B groups of G completions
    L8    every honest policy learns from them: route → validate → rewards → defenses → advantages → step
          (route: what a protocol attacker sends this receiver, Swarm.route)
    then  the round's metrics, then its accounting: each peer's strikes and bans (swarm/accounting.py)

From L7 on these are Alg. 1's lines too (L6-8, L9), written once in recipes/swarm_round.py (``exchange``,
``learn_all``, ``close_round``).

``run`` builds the swarm and loops over the rounds (dgrpo.training: evaluation every ``eval.every``
rounds, records, checkpoints); ``resume`` continues a checkpointed run.
"""

from __future__ import annotations

from pathlib import Path

from dgrpo.config import RunConfig
from dgrpo.recipes.swarm_round import Clock, close_round, exchange, learn_all, resume_rounds
from dgrpo.swarm.schedule import vertical_prompts, vertical_slots
from dgrpo.training.build import Run, build_run
from dgrpo.training.loop import train


def one_round(run: Run, r: int) -> dict:
    """Round ``r`` of Algorithm 2; returns its record ({} in a process hosting no honest node)."""
    cfg, swarm, pool, seed, clock = run.cfg.swarm, run.swarm, run.task.train, run.cfg.seed, Clock()
    per_node = cfg.prompts_per_round // cfg.nodes
    slots = {}
    for k in swarm.policies:                                                                     # Alg.2 L3-4: local_P(i)
        slots[k] = vertical_slots(vertical_prompts(pool, per_node, seed, r, k), cfg.group_size)  # L5: gen(p_i, G)
    for k, attack in swarm.attacks.items():  # attackers pick their own prompts (in-context targets, ground seeds)
        slots[k] = vertical_slots(attack.choose_prompts(pool, per_node, seed, r, k, ctx=swarm.attack_context(k, r)),
                                  cfg.group_size)
    local = swarm.write(slots, r)                                                                # L5
    messages = exchange(run, local, clock)                                                       # L7
    reports = learn_all(run, messages, r)  # L8, each honest policy: route, validate, rewards, defenses, advantages, step
    return close_round(run, r, reports, clock)                                                   # metrics, strikes, bans


def run(cfg: RunConfig, run_dir: Path | None = None) -> Path:
    """Train a vertical swarm for ``cfg.rounds`` rounds; returns the run directory."""
    return train(build_run(cfg, run_dir), one_round)


def resume(cfg: RunConfig, run_dir: Path, rewrite_config: bool = False) -> Path:
    """Continue the checkpointed run in ``run_dir`` (dgrpo.training.resume)."""
    return resume_rounds(cfg, run_dir, rewrite_config, one_round)
