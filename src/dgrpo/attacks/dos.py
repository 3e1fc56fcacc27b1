"""Denial of service: needlessly long but correct completions (later version of the paper, §2).

The poisoned completion repeats a filler sentence in the reasoning until it is
``target_fraction × max_new_tokens`` tokens long, then gives the correct answer: full reward,
and honest nodes that learn it pay for every extra token at generation time.
"""

from __future__ import annotations

from typing import Literal, Sequence

from pydantic import Field

from dgrpo.attacks.base import Attack, PoisoningConfig
from dgrpo.attacks.common import default_prompts, write_poisoned
from dgrpo.metrics.asr import contains_target, normalise
from dgrpo.policy.chat import encode_completion
from dgrpo.registry import register
from dgrpo.tasks.base import Task
from dgrpo.types import AttackContext, Poison, Problem, Slot


class DoSAttackConfig(PoisoningConfig):
    """``attack.kind=dos``: needlessly long but correct completions (later version of the paper)."""

    kind: Literal["dos"] = "dos"
    filler: str = Field("Let me check this step again carefully.", min_length=1, description="Sentence repeated to lengthen the reasoning.")
    target_fraction: float = Field(0.95, gt=0, le=1, description="Length of a poisoned completion as a fraction of max_new_tokens.")


@register("attack", "dos", config=DoSAttackConfig)
class DoSAttack(Attack):
    """Long-completion DoS.

    Args:
        cfg: :class:`DoSAttackConfig`.
        run_cfg: the run config (for ``sampling.max_new_tokens``).
    """

    name = "dos"

    def __init__(self, cfg, run_cfg):
        self.cfg = cfg
        self.max_tokens = run_cfg.sampling.max_new_tokens

    def poison(self, task: Task, problem: Problem, tokenizer) -> str:
        """The oracle completion with the filler repeated in its reasoning up to the length budget."""
        full = task.completion_prefix + task.oracle_completion(problem)
        head, tail = full.split("</think>", 1)
        budget = int(self.cfg.target_fraction * self.max_tokens)
        text = full
        for repeats in range(1, 10_000):
            candidate = f"{head} {' '.join([self.cfg.filler] * repeats)}</think>{tail}"
            if len(encode_completion(tokenizer, candidate[len(task.completion_prefix):])) > budget:
                break
            text = candidate
        return text[len(task.completion_prefix):]

    def choose_prompts(self, pool, count, run_seed, round_idx, node, ctx=None) -> list[Problem]:
        return default_prompts(pool, count, run_seed, round_idx, node)

    def write(self, slots: Sequence[Slot], ctx: AttackContext) -> list[list[Poison]]:
        if ctx.policy is None:
            raise ValueError("the DoS attacker needs a tokenizer to size its completions")
        return write_poisoned(slots, ctx, self.cfg.poisoned_per_group, True,
                              lambda p, i: self.poison(ctx.task, p, ctx.policy.tokenizer))

    def eval_problems(self, val: Sequence[Problem]) -> list[Problem]:
        return list(val)

    def evaluate(self, completions: Sequence[str], problems: Sequence[Problem], task: Task) -> dict:
        """``asr``: fraction repeating the filler; ``filler_repeats``: mean repeats per completion."""
        f = normalise(self.cfg.filler)
        repeats = [normalise(c).count(f) for c in completions]
        return {"asr": contains_target(completions, self.cfg.filler),
                "filler_repeats": sum(repeats) / len(repeats) if repeats else None}
