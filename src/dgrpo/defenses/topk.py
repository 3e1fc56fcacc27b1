"""Top-k support check for homogeneous swarms (paper §4.1, Table 1).

Every node holds the same weights and the swarm agreed to sample with top-k. A token outside the
receiver's own top-k at its position could not have been sampled, so the completion is rejected.
The logits come from the update's own forward pass (no extra forward); they must be float32
(PROBE.md: with float32 on both sides 0 of 1,445 honest tokens fell outside the top 10; any bf16
flagged honest tokens).
"""

from __future__ import annotations

from typing import Sequence

import torch

from dgrpo.defenses.base import ACCEPT, Verdict, register
from dgrpo.policy.scoring import completion_mask, pad_right


def outside_topk(logits: torch.Tensor, ids: torch.Tensor, mask: torch.Tensor, k: int, atol: float = 0.0) -> torch.Tensor:
    """Which tokens lie outside the top-k of their position.

    A token is inside when its logit ≥ (k-th largest logit − atol): ties at the k-th logit count as
    inside.

    Args:
        logits: (G, T, V) float32; ids: (G, T) token ids; mask: (G, T) 1 for real tokens.

    Returns:
        (G, T) bool, True where a real token is outside the top-k.
    """
    kth = logits.topk(k, dim=-1).values[..., -1]  # (G, T) k-th largest logit
    token = logits.gather(-1, ids[..., None]).squeeze(-1)  # (G, T)
    return (token < kth - atol) & mask.bool()


@register("topk")
class TopKDefense:
    """Reject a completion when any of its tokens is outside the local top-k.

    Args:
        cfg: :class:`dgrpo.defenses.config.TopKDefenseConfig`; run_cfg for the sampling k.
        policy: the receiving node's policy (for the tokenizer's eos/pad ids).
    """

    name = "topk"
    stage = "logits"

    def __init__(self, cfg, run_cfg, policy, task=None):
        self.k = cfg.k or run_cfg.sampling.top_k
        self.atol, self.action = cfg.atol, cfg.action
        self.tokenizer = policy.tokenizer

    def inspect(self, rollouts: Sequence, logits: torch.Tensor | None = None) -> list[Verdict]:
        """One verdict per rollout of a group; ``logits`` is the group's (G, T, V) float32 logits."""
        if logits is None:
            raise ValueError("the top-k check needs the group's logits")
        eos = self.tokenizer.eos_token_id
        ids = pad_right([r.completion_ids for r in rollouts], eos).to(logits.device)
        mask = completion_mask(ids, eos, [len(r.completion_ids) for r in rollouts])
        bad = outside_topk(logits[:, : ids.shape[1]], ids, mask, self.k, self.atol)
        verdicts = []
        for g, r in enumerate(rollouts):
            where = bad[g].nonzero()
            if len(where) == 0:
                verdicts.append(ACCEPT)
                continue
            t = int(where[0])
            token = self.tokenizer.decode([r.completion_ids[t]])
            verdicts.append(Verdict(False, self.name, f"token {token!r} at position {t} outside top-{self.k}", t, self.action))
        return verdicts
