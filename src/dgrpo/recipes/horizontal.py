"""Algorithm 1 (horizontal dRL): every node writes G/m completions of the same B global prompts.

One round for the nodes this process hosts (:func:`one_round`, ``# Alg.1 Ln`` marks the paper's lines)::

    L3-4  the B prompts of the round, the same on every node (a shared seed)
    L5    every node writes G/m completions of each; a malicious node writes its attack's instead
    L6,8  all-gather: every node holds B groups of G completions
    L9    every honest policy learns from them: route → validate → rewards → defenses → advantages → step
          (route: what a protocol attacker sends this receiver, Swarm.route)
    then  the round's metrics, then its accounting: each peer's strikes and bans (swarm/accounting.py)

From L6 on these are Alg. 2's lines too (L7, L8), written once in recipes/swarm_round.py (``exchange``,
``learn_all``, ``close_round``).

``run`` builds the swarm and loops over the rounds (dgrpo.training: evaluation every ``eval.every``
rounds, records, checkpoints); ``resume`` continues a checkpointed run.
"""

from __future__ import annotations

from pathlib import Path

from dgrpo.config import RunConfig
from dgrpo.recipes.swarm_round import Clock, close_round, exchange, learn_all, resume_rounds
from dgrpo.swarm.schedule import horizontal_prompts, horizontal_slots
from dgrpo.training.build import Run, build_run
from dgrpo.training.loop import train


def one_round(run: Run, r: int) -> dict:
    """Round ``r`` of Algorithm 1; returns its record ({} in a process hosting no honest node)."""
    cfg, swarm, clock = run.cfg.swarm, run.swarm, Clock()
    prompts = horizontal_prompts(run.task.train, cfg.prompts_per_round, run.cfg.seed, r)          # Alg.1 L3-4
    slots = {k: horizontal_slots(prompts, cfg.group_size, cfg.nodes, k) for k in swarm.hosted}  # L5: gen(p_i, G/m)
    local = swarm.write(slots, r)                                                               # L5
    messages = exchange(run, local, clock)                                                      # L6, L8
    reports = learn_all(run, messages, r)  # L9, each honest policy: route, validate, rewards, defenses, advantages, step
    return close_round(run, r, reports, clock)                                                  # metrics, strikes, bans


def run(cfg: RunConfig, run_dir: Path | None = None) -> Path:
    """Train a horizontal swarm for ``cfg.rounds`` rounds; returns the run directory."""
    return train(build_run(cfg, run_dir), one_round)


def resume(cfg: RunConfig, run_dir: Path, rewrite_config: bool = False) -> Path:
    """Continue the checkpointed run in ``run_dir`` (dgrpo.training.resume)."""
    return resume_rounds(cfg, run_dir, rewrite_config, one_round)
