"""Algorithm 1 (horizontal dRL): every node writes G/m completions of the same B global prompts.

One round for the nodes this process hosts (:func:`one_round`, ``# Alg.1 Ln`` marks the paper's lines)::

    L3-4  the B prompts of the round, the same on every node (a shared seed)
    L5    every node writes G/m completions of each; a malicious node writes its attack's instead
    L6,8  all-gather: every node holds B groups of G completions
    L9    every honest policy learns from them: route → validate → rewards → defenses → advantages → step
          (route: what a protocol attacker sends this receiver, Swarm.route)
    then  the round's metrics

``run`` builds the swarm and loops over the rounds (dgrpo.training: evaluation every ``eval.every``
rounds, records, checkpoints); ``resume`` continues a checkpointed run.
"""

from __future__ import annotations

import time
from pathlib import Path

from dgrpo.config import RunConfig
from dgrpo.defenses import defend, defense_counters
from dgrpo.swarm.schedule import horizontal_prompts, horizontal_slots
from dgrpo.training.build import Run, build_run
from dgrpo.training.loop import train
from dgrpo.training.records import PolicyReport, round_record
from dgrpo.training.resume import restore


def one_round(run: Run, r: int) -> dict:
    """Round ``r`` of Algorithm 1; returns its record ({} in a process hosting no honest node)."""
    cfg, swarm = run.cfg.swarm, run.swarm
    t0 = time.perf_counter()
    prompts = horizontal_prompts(run.task.train, cfg.prompts_per_round, run.cfg.seed, r)          # Alg.1 L3-4
    slots = {k: horizontal_slots(prompts, cfg.group_size, cfg.nodes, k) for k in swarm.hosted}  # L5: gen(p_i, G/m)
    local = swarm.write(slots, r)                                                               # L5
    t1 = time.perf_counter()
    messages = run.transport.all_gather(local)                                                  # L6, L8
    swarm.carriers = dict(run.transport.carriers)  # who delivered each message (accounting)
    t2 = time.perf_counter()
    reports = {}
    for owner, policy in swarm.trained.items():                                                 # L9, each honest policy:
        received = swarm.receive(policy, swarm.route(messages, owner, r), r)                        #   route, validate
        start = time.perf_counter()
        swarm.reward(received.rollouts)                                                         #   rewards
        report = PolicyReport(received.rollouts, received.invalid, reward_seconds=time.perf_counter() - start)
        learner = swarm.learners[policy]
        batch = defend(swarm.defenses[owner], learner.score(received.rollouts), report.defense_times)  # defenses
        report.update = learner.step(batch, r)                                                  #   advantages, step
        report.defense_counts = defense_counters(swarm.defenses[owner])
        if owner in swarm.policies:  # (a mirror's report is not the honest swarm's)
            reports[owner] = report
    t3 = time.perf_counter()
    times = {"generate": t1 - t0, "exchange": t2 - t1, "update": t3 - t2, "round": t3 - t0}
    return round_record(run, r, messages, reports, times) if reports else {}                    # metrics


def run(cfg: RunConfig, run_dir: Path | None = None) -> Path:
    """Train a horizontal swarm for ``cfg.rounds`` rounds; returns the run directory."""
    return train(build_run(cfg, run_dir), one_round)


def resume(cfg: RunConfig, run_dir: Path, rewrite_config: bool = False) -> Path:
    """Continue the checkpointed run in ``run_dir`` (dgrpo.training.resume)."""
    run = build_run(cfg, run_dir)
    restore(run, rewrite_config)
    return train(run, one_round)
