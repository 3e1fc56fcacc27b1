"""Seed grinding and cherry-picking (docs/THREATS.md, sampling class): the attacker samples honestly
from its own copy of the weights with many seeds and sends the sample it likes, claiming the seed
that produced it.

* ``objective=payload``: the first sample that carries ``text`` and earns full reward (else the best).
* ``objective=longest``: the longest sample that earns full reward (DoS by cherry-picking: needlessly
  long but correct completions, written by the model itself; else the longest sample).
* ``prompt_tries`` (vertical mode): prompt-choice grinding. A vertical node picks its own prompts, and
  the seeds bound to a slot are public (``completion_seed(run seed, round, node, prompt, index)``), so
  the attacker samples the poisoned slots of ``prompt_tries`` candidate prompts per prompt it sends,
  each under its bound seeds, and keeps the prompts whose samples serve ``objective`` best. With
  ``tries=1`` every sent sample is its slot's bound seed's own: top-k and exact replay with seed binding
  accept all of it. What stops it is the protocol assigning prompts (``swarm.protocol.assign_prompts``).

Every sent token was sampled, so the top-k check accepts it; exact replay accepts it too when seeds are
not bound to the slot (the claimed seed reproduces it), and rejects it when they are, unless the
assigned seed (tried first) already gave the chosen sample. ``stats`` counts chosen samples that are
not the assigned seed's (``ground``), those that carry the payload, and the prompts sent that are not
the ones the node's own schedule gives it (``off_schedule``, of ``prompts``).
"""

from __future__ import annotations

from typing import Literal, Sequence

from pydantic import Field

from dgrpo.attacks.base import Attack, ClaimedPoison, PoisoningConfig
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
    prompt_tries: int = Field(1, ge=1, description="Vertical: candidate prompts sampled per prompt sent, each under its bound seeds; the prompts whose samples serve `objective` best are sent (prompt-choice grinding; 1 = the node's scheduled prompts).")

    def success_metric(self) -> str | None:
        """None for the DoS by cherry-picking (``objective=longest``: its success is length); else ``attack/asr``."""
        return None if self.objective == "longest" else "attack/asr"

    def check(self, run) -> None:
        super().check(run)
        if self.prompt_tries > 1 and run.swarm.mode != "vertical":
            raise ValueError("attack.prompt_tries > 1 needs swarm.mode=vertical (horizontal prompts are the swarm's, "
                             "shared by every node); set attack.prompt_tries=1 or swarm.mode=vertical")


@register("attack", "seed_grinding", config=SeedGrindingConfig)
class SeedGrindingAttack(Attack):
    """Best-of-``tries`` sampling under a claimed seed."""

    name = "seed_grinding"

    def __init__(self, cfg, run_cfg=None):
        self.cfg = cfg
        self.stats = {"poisons": 0, "ground": 0, "carried": 0, "full_reward": 0, "tokens": 0,
                      "prompts": 0, "off_schedule": 0}
        self._sampled: dict[tuple[str, int], tuple[list[int], str]] = {}  # (prompt id, seed) → sample, this round

    def _samples(self, ctx: AttackContext, requests: Sequence[tuple[Problem, int]]) -> list[tuple[list[int], str]]:
        """The attacker's samples of (problem, seed) pairs, each generated once a round (one batch)."""
        todo = list({(p.prompt_id, s): (p, s) for p, s in requests if (p.prompt_id, s) not in self._sampled}.values())
        if todo:
            for (p, s), sample in zip(todo, ctx.policy.generate(ctx.task, [p for p, _ in todo], [s for _, s in todo])):
                self._sampled[(p.prompt_id, s)] = sample
        return [self._sampled[(p.prompt_id, s)] for p, s in requests]

    def _key(self, task: Task, problem: Problem, ids, text: str) -> tuple:
        """How much the attacker likes one sample (larger is better) and whether it carries the payload / earns full reward."""
        full = task.reward(text, problem) >= 1.0
        carried = normalise(self.cfg.text) in normalise(text)
        return ((carried, full) if self.cfg.objective == "payload" else (full, len(ids))), carried, full

    def poison(self, ctx: AttackContext, problem: Problem, seed: int) -> ClaimedPoison:
        seeds = grind_seeds(seed, self.cfg.tries)
        samples = self._samples(ctx, [(problem, s) for s in seeds])
        scored = []
        for j, (s, (ids, text)) in enumerate(zip(seeds, samples)):
            key, carried, full = self._key(ctx.task, problem, ids, text)
            scored.append(((*key, -j), s, ids, text, carried, full))
        _, s, ids, text, carried, full = max(scored, key=lambda x: x[0])
        self.stats["poisons"] += 1
        self.stats["ground"] += s != seed
        self.stats["carried"] += carried
        self.stats["full_reward"] += full
        self.stats["tokens"] += len(ids)
        return ClaimedPoison(text, "poisoned", tuple(ids), s)

    def choose_prompts(self, pool, count, run_seed, round_idx, node, ctx=None) -> list[Problem]:
        """The node's scheduled prompts (``prompt_tries=1``), or the ``count`` best of ``prompt_tries × count``
        candidates (the scheduled ones first, ties kept in that order), each scored by the sum over its
        poisoned slots' bound-seed samples of the objective (payload: samples carrying it with full
        reward, then full-reward samples; longest: tokens of the full-reward samples).

        Raises:
            ValueError: ``prompt_tries > 1`` without ``ctx`` (the weights to sample from).
        """
        from dgrpo.attacks.common import poisoned_count
        from dgrpo.policy.sampling import completion_seed
        from dgrpo.swarm.schedule import take

        self._sampled = {}
        scheduled = default_prompts(pool, count, run_seed, round_idx, node)
        chosen = scheduled
        if self.cfg.prompt_tries > 1 and count > 0:
            if ctx is None or ctx.policy is None:
                raise ValueError("prompt-choice grinding (attack.prompt_tries > 1) needs the attacker's weights")
            n = count * (self.cfg.prompt_tries - 1)
            seen = {p.prompt_id for p in scheduled}
            extra = [p for p in take(pool, min(n, len(pool)), round_idx * n, f"grind|{run_seed}|{node}") if p.prompt_id not in seen]
            candidates = scheduled + list({p.prompt_id: p for p in extra}.values())
            c = poisoned_count(Slot(candidates[0], ctx.group_size, 0), ctx, self.cfg.poisoned_per_group)
            requests = [(p, completion_seed(run_seed, round_idx, node, p.prompt_id, i)) for p in candidates for i in range(c)]
            samples = self._samples(ctx, requests)
            score = {}
            for (p, _), (ids, text) in zip(requests, samples):
                _, carried, full = self._key(ctx.task, p, ids, text)
                gain = (carried and full, full) if self.cfg.objective == "payload" else (len(ids) if full else 0,)
                score[p.prompt_id] = tuple(a + b for a, b in zip(score.get(p.prompt_id, (0,) * len(gain)), gain))
            order = sorted(range(len(candidates)), key=lambda j: tuple(-x for x in score[candidates[j].prompt_id]) + (j,))
            chosen = [candidates[j] for j in order[:count]]
        self.stats["prompts"] += len(chosen)
        self.stats["off_schedule"] += sum(p.prompt_id not in {q.prompt_id for q in scheduled} for p in chosen)
        return chosen

    def write(self, slots: Sequence[Slot], ctx: AttackContext) -> list[list[Poison]]:
        out = write_claimed(slots, ctx, self.cfg.poisoned_per_group, lambda p, i, seed: self.poison(ctx, p, seed))
        self._sampled = {}  # the weights move before the next round
        return out

    def eval_problems(self, val: Sequence[Problem]) -> list[Problem]:
        return list(val)

    def evaluate(self, completions: Sequence[str], problems: Sequence[Problem], task: Task) -> dict:
        """``asr``: contains the payload; ``mean_chars``: mean completion length (the DoS cost)."""
        return {"asr": contains_target(completions, self.cfg.text),
                "mean_chars": sum(map(len, completions)) / len(completions) if completions else None}
