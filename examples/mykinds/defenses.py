"""A defense in the user's own package: ``defenses=[{kind: mykinds.defenses:LengthCap, max_tokens: 16}]``."""

from __future__ import annotations

from typing import Literal, Sequence

from pydantic import Field

from dgrpo.defenses.base import Defense, DefenseConfig
from dgrpo.registry import register
from dgrpo.types import ACCEPT, Verdict


class LengthCapConfig(DefenseConfig):
    """Reject completions longer than ``max_tokens`` tokens."""

    kind: Literal["length_cap"] = "length_cap"
    max_tokens: int = Field(64, ge=1, description="Longest accepted completion, in tokens.")


@register("defense", "length_cap", config=LengthCapConfig)
class LengthCap(Defense):
    name = "length_cap"
    stage = "rollouts"

    def __init__(self, cfg, run_cfg, policy, task):
        self.limit, self.action = cfg.max_tokens, cfg.action

    def inspect(self, rollouts: Sequence, logits=None) -> list[Verdict]:
        return [ACCEPT if len(r.completion_ids) <= self.limit else
                Verdict(False, self.name, f"{len(r.completion_ids)} tokens > {self.limit}", self.limit, self.action)
                for r in rollouts]
