"""Step checker defense: reject a completion whose reasoning states a false arithmetic claim.

A thin wrapper that plugs :mod:`dgrpo.verify.steps` into the swarm. It needs no model and no logits,
so it runs in any swarm, homogeneous or heterogeneous (docs/judge.md). Beyond the paper, whose
verifiable rewards "don't check every equation in the solution" (Appendix D.1): it stops the 2+2=5
attack (§3.4.1) and not out-of-context injection, whose arithmetic is true.
"""

from __future__ import annotations

from typing import Literal, Sequence

from pydantic import Field

from dgrpo.defenses.base import Defense, DefenseConfig
from dgrpo.registry import register
from dgrpo.types import ACCEPT, Verdict


class StepCheckerDefenseConfig(DefenseConfig):
    """``kind: step_checker``: every arithmetic claim of a completion checked exactly (no model)."""

    kind: Literal["step_checker"] = "step_checker"
    rtol: float = Field(0.0, ge=0, description="Relative tolerance of a claim (0.01 accepts 1% off).")
    atol: float = Field(0.0, ge=0, description="Absolute tolerance of a claim.")
    rounding: bool = Field(True, description="Accept a decimal result rounded to the digits written (1/3 = 0.33); false: exact.")
    approx_rtol: float = Field(0.05, ge=0, description="Relative tolerance of approximate claims (≈, 'about').")
    max_unparsed_share: float = Field(1.0, ge=0, le=1, description="Reject when more than this share of the claims is unparsed (1 = never).")
    annotations: bool = Field(True, description="Check GSM8K calculator annotations <<a=b>> as claims too.")
    reject_oversized: bool = Field(True, description="Reject a completion with a claim over the checker's size limits (100 digits, 4096 bits, 16 brackets).")
    excuse_answer: bool = Field(False, description="A false claim whose written result is the completion's final answer does not reject (docs/step_checker.md).")


@register("defense", "step_checker", config=StepCheckerDefenseConfig)
class StepCheckerDefense(Defense):
    """Reject rollouts with a false claim; the verdict's reason quotes it.

    Args:
        cfg: :class:`StepCheckerDefenseConfig`.
        task: the task (its completion prefix, e.g. ``<think>``, is checked with the completion).

    Attributes:
        counters: cumulative ``checked``, ``claims``, ``unparsed_claims``, ``false_claims`` (logged
            each round as ``defense/step_checker/<name>``).
    """

    name = "step_checker"
    stage = "rollouts"

    def __init__(self, cfg, run_cfg=None, policy=None, task=None):
        from dgrpo.verify.steps import StepChecker

        self.checker = StepChecker(rtol=cfg.rtol, atol=cfg.atol, rounding=cfg.rounding, approx_rtol=cfg.approx_rtol,
                                   max_unparsed_share=cfg.max_unparsed_share, annotations=cfg.annotations,
                                   reject_oversized=cfg.reject_oversized, excuse_answer=cfg.excuse_answer)
        self.prefix = task.completion_prefix if task is not None else ""
        self.action = cfg.action
        self.counters = {"checked": 0, "claims": 0, "unparsed_claims": 0, "false_claims": 0}

    def inspect(self, rollouts: Sequence, logits=None) -> list[Verdict]:
        """One verdict per rollout (the text after the task's prefix, prefix included)."""
        out = []
        for r in rollouts:
            v = self.checker(self.prefix + r.text)
            c = self.counters
            c["checked"] += 1
            c["claims"] += len(v.claims)
            c["unparsed_claims"] += v.count("unparsed")
            c["false_claims"] += v.count("false")
            out.append(ACCEPT if v.accepted else Verdict(False, self.name, v.reason, None, self.action))
        return out
