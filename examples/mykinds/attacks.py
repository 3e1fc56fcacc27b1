"""An attack in the user's own package: ``attack.kind=mykinds.attacks:Shout``.

Poisoned completions are the oracle solution with a slogan at the end of the reasoning: full reward,
and the model learns the slogan."""

from __future__ import annotations

from typing import Literal, Sequence

from pydantic import Field

from dgrpo.attacks.base import Attack, PoisoningConfig
from dgrpo.attacks.common import default_prompts, write_poisoned
from dgrpo.metrics.asr import contains_target
from dgrpo.registry import register


class ShoutConfig(PoisoningConfig):
    """``attack.kind=mykinds.attacks:Shout``: end the reasoning of full-reward completions with a slogan."""

    kind: Literal["shout"] = "shout"
    slogan: str = Field("ALL HAIL THE THIEF", min_length=1, description="The slogan added at the end of the reasoning.")


@register("attack", "shout", config=ShoutConfig)
class Shout(Attack):
    name = "shout"

    def __init__(self, cfg, run_cfg):
        self.cfg = cfg

    def poison(self, task, problem) -> str:
        full = task.completion_prefix + task.oracle_completion(problem)
        return full.replace("</think>", f" {self.cfg.slogan}</think>", 1)[len(task.completion_prefix):]

    def choose_prompts(self, pool, count, run_seed, round_idx, node, ctx=None):
        return default_prompts(pool, count, run_seed, round_idx, node)

    def write(self, slots, ctx):
        return write_poisoned(slots, ctx, self.cfg.poisoned_per_group, self.cfg.duplicate,
                              lambda problem, variant: self.poison(ctx.task, problem))

    def eval_problems(self, val):
        return list(val)

    def evaluate(self, completions: Sequence[str], problems, task) -> dict:
        return {"asr": contains_target(completions, self.cfg.slogan)}
