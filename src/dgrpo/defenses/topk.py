"""Top-k support check for homogeneous swarms (paper §4.1, Table 1): a thin wrapper that plugs
:mod:`dgrpo.verify.topk` into the swarm, on the logits of the update's own forward pass."""

from __future__ import annotations

import dataclasses

from typing import Literal, Sequence

from pydantic import Field

from dgrpo.defenses.base import Defense, ExactDefenseConfig
from dgrpo.registry import register
from dgrpo.types import Verdict


class TopKDefenseConfig(ExactDefenseConfig):
    """``kind: topk``: homogeneous token-generation check (paper §4.1)."""

    kind: Literal["topk"] = "topk"
    k: int | None = Field(None, ge=1, description="k of the support check (None = sampling.top_k).")
    atol: float = Field(1e-3, ge=0, description="A token counts as inside the top-k when its logit ≥ (k-th logit − atol); absorbs float32 batch noise (~1e-4, docs/verification.md). Ties at the k-th logit count as inside.")


@register("defense", "topk", config=TopKDefenseConfig)
class TopKDefense(Defense):
    """Reject a completion when any of its tokens is outside the receiver's top-k.

    Args:
        cfg: :class:`TopKDefenseConfig`; run_cfg for the sampling k.
        policy: the receiving node's policy (for the tokenizer's eos id and token texts).
    """

    name = "topk"
    stage = "logits"

    def __init__(self, cfg, run_cfg, policy, task=None):
        self.k = cfg.k or run_cfg.sampling.top_k
        self.atol, self.action = cfg.atol, cfg.action
        self.tokenizer = policy.tokenizer

    def inspect(self, rollouts: Sequence, logits=None) -> list[Verdict]:
        """One verdict per rollout of a group; ``logits`` is the group's (G, T, V) float32 logits."""
        if logits is None:
            raise ValueError("the top-k check needs the group's logits")
        from dgrpo.verify.checks import topk_verdicts  # (torch: loaded on first use)

        verdicts = topk_verdicts([r.completion_ids for r in rollouts], k=self.k, eos_id=self.tokenizer.eos_token_id,
                                 logits=list(logits), atol=self.atol, decode=self.tokenizer.decode, name=self.name)
        return [v if v.accepted else dataclasses.replace(v, action=self.action) for v in verdicts]
