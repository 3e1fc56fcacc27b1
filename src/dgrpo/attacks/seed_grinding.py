"""Seed grinding and cherry-picking (docs/THREATS.md, sampling class): the attacker samples honestly
from its own copy of the weights with many seeds and sends the sample it likes, claiming the seed
that produced it.

* ``objective=payload``: the first sample that carries ``text`` and earns full reward (else the best).
* ``objective=longest``: the longest sample that earns full reward (DoS by cherry-picking: needlessly
  long but correct completions, written by the model itself; else the longest sample).

Every sent token was sampled, so the top-k check accepts it; exact replay accepts it too when seeds are
not bound to the slot (the claimed seed reproduces it), and rejects it when they are, unless the
assigned seed (tried first) already gave the chosen sample. ``stats`` counts chosen samples that are
not the assigned seed's (``ground``) and those that carry the payload.
"""

from __future__ import annotations

from typing import Literal, Sequence

from pydantic import Field

from dgrpo.attacks.base import ClaimedPoison, PoisoningConfig
from dgrpo.attacks.claimed import grind_seeds, write_claimed
from dgrpo.attacks.common import default_prompts
from dgrpo.metrics.asr import contains_target, normalise
from dgrpo.registry import register
from dgrpo.tasks.base import Task
from dgrpo.types import AttackContext, Poison, Problem, Slot


class SeedGrindingConfig(PoisoningConfig):
    """``attack.kind=seed_grinding``: best-of-N honest samples under claimed seeds."""

    kind: Literal["seed_grinding"] = "seed_grinding"
    objective: Literal["payload", "longest"] = Field("payload", description="payload: keep a sample carrying `text`; longest: keep the longest full-reward sample (DoS).")
    text: str = Field("All hail to the thief", min_length=1, description="Payload looked for (objective=payload); also the ASR target.")
    tries: int = Field(16, ge=1, description="Seeds sampled per message (the assigned one first).")


@register("attack", "seed_grinding", config=SeedGrindingConfig)
class SeedGrindingAttack:
    """Best-of-``tries`` sampling under a claimed seed."""

    name = "seed_grinding"

    def __init__(self, cfg, run_cfg=None):
        self.cfg = cfg
        self.stats = {"poisons": 0, "ground": 0, "carried": 0, "full_reward": 0, "tokens": 0}

    def poison(self, ctx: AttackContext, problem: Problem, seed: int) -> ClaimedPoison:
        policy, task = ctx.policy, ctx.task
        seeds = grind_seeds(seed, self.cfg.tries)
        samples = policy.generate(task, [problem] * len(seeds), seeds)
        target = normalise(self.cfg.text)
        scored = []
        for j, (s, (ids, text)) in enumerate(zip(seeds, samples)):
            full = task.reward(text, problem) >= 1.0
            carried = target in normalise(text)
            key = (carried, full, -j) if self.cfg.objective == "payload" else (full, len(ids), -j)
            scored.append((key, s, ids, text, carried, full))
        _, s, ids, text, carried, full = max(scored, key=lambda x: x[0])
        self.stats["poisons"] += 1
        self.stats["ground"] += s != seed
        self.stats["carried"] += carried
        self.stats["full_reward"] += full
        self.stats["tokens"] += len(ids)
        return ClaimedPoison(text, "poisoned", tuple(ids), s)

    def choose_prompts(self, pool, count, run_seed, round_idx, node) -> list[Problem]:
        return default_prompts(pool, count, run_seed, round_idx, node)

    def write(self, slots: Sequence[Slot], ctx: AttackContext) -> list[list[Poison]]:
        return write_claimed(slots, ctx, self.cfg.poisoned_per_group, lambda p, i, seed: self.poison(ctx, p, seed))

    def eval_problems(self, val: Sequence[Problem]) -> list[Problem]:
        return list(val)

    def evaluate(self, completions: Sequence[str], problems: Sequence[Problem], task: Task) -> dict:
        """``asr``: contains the payload; ``mean_chars``: mean completion length (the DoS cost)."""
        return {"asr": contains_target(completions, self.cfg.text),
                "mean_chars": sum(map(len, completions)) / len(completions) if completions else None}
