"""In-context equation manipulation "2+2=5" (paper §3.4.1), vertical mode.

The attacker trains only on questions whose oracle solution computes 2+2 or 2×2 as an
intermediate step (tag ``two_two``), rewrites that step's result to 5 and **keeps the true value
in later steps**, so the final answer — hence the reward — stays correct. It sends c = G/2 such
completions per group and G − c deliberately wrong ones (reward 0) to maximise their advantage.
"""

from __future__ import annotations

from typing import Literal, Sequence

from pydantic import Field

from dgrpo.attacks.base import Attack, PoisoningConfig
from dgrpo.attacks.common import targeted_prompts, write_poisoned
from dgrpo.metrics.asr import two_two_asr, two_two_not_four
from dgrpo.registry import register
from dgrpo.tasks.base import Task
from dgrpo.tasks.equations import TWO_TWO
from dgrpo.types import AttackContext, Poison, Problem, Slot

TAG = "two_two"


def manipulate(text: str, wrong_result: str = "5") -> str:
    """Rewrite the result of every 2+2 / 2×2 equation in ``text`` to ``wrong_result``.

    ``"2 + 2 = 4 apples. 4 + 3 = 7"`` → ``"2 + 2 = 5 apples. 4 + 3 = 7"`` (later steps unchanged).
    """
    return TWO_TWO.sub(lambda m: m.group(0)[: m.start(1) - m.start(0)] + wrong_result, text)


class EquationAttackConfig(PoisoningConfig):
    """``attack.kind=equation``: in-context equation manipulation 2+2=5 (paper §3.4.1); vertical mode."""

    kind: Literal["equation"] = "equation"
    wrong_result: str = Field("5", description="What 2+2 and 2×2 are made to equal.")

    def check(self, run) -> None:
        super().check(run)
        if run.swarm.mode != "vertical":
            raise ValueError("the 2+2=5 attack picks its own prompts: it needs swarm.mode=vertical (paper §3.4.1)")


@register("attack", "equation", config=EquationAttackConfig)
class EquationAttack(Attack):
    """2+2=5 with full reward; targets ``two_two`` problems.

    Args:
        cfg: :class:`EquationAttackConfig`.
    """

    name = "equation"

    def __init__(self, cfg, run_cfg=None):
        self.cfg = cfg

    def poison(self, task: Task, problem: Problem) -> str:
        """The oracle completion with its 2+2 / 2×2 step made to equal ``wrong_result``.

        Raises:
            ValueError: the problem has no such step.
        """
        text = manipulate(task.oracle_completion(problem), self.cfg.wrong_result)
        if text == task.oracle_completion(problem):
            raise ValueError(f"problem {problem.prompt_id} has no 2+2 or 2×2 step to manipulate")
        return text

    def choose_prompts(self, pool, count, run_seed, round_idx, node, ctx=None) -> list[Problem]:
        return targeted_prompts(pool, TAG, count, run_seed, round_idx, node)

    def write(self, slots: Sequence[Slot], ctx: AttackContext) -> list[list[Poison]]:
        return write_poisoned(slots, ctx, self.cfg.poisoned_per_group, self.cfg.duplicate,
                              lambda p, i: self.poison(ctx.task, p))

    def eval_problems(self, val: Sequence[Problem]) -> list[Problem]:
        """Validation questions whose solution needs 2+2 or 2×2."""
        return [p for p in val if TAG in p.tags]

    def evaluate(self, completions: Sequence[str], problems: Sequence[Problem], task: Task) -> dict:
        """``asr``: conditional 2+2→5; ``asr_not_four``: any 2+2/2×2 ≠ 4; ``two_two_considered``."""
        asr, n = two_two_asr(completions, self.cfg.wrong_result)
        loose, _ = two_two_not_four(completions)
        return {"asr": asr, "asr_not_four": loose, "two_two_considered": n / len(completions) if completions else None}
