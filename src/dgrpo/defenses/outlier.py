"""Baseline: reward-outlier filter (paper §4 discusses why it fails).

Rejects completions whose reward is far from their group's mean. With binary rewards it blocks
exactly the rare correct completions a learning model needs — and a poisoned completion in a
group where honest nodes already succeed is no outlier at all.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence

import torch

from dgrpo.defenses.base import ACCEPT, Verdict, register


def outlier_mask(rewards: torch.Tensor, groups: Sequence, z: float) -> torch.Tensor:
    """(N,) bool: |r − mean_g| / std_g > z (population std; groups with std 0 have no outliers)."""
    out = torch.zeros(len(rewards), dtype=torch.bool)
    members = defaultdict(list)
    for i, g in enumerate(groups):
        members[g].append(i)
    for idx in members.values():
        r = rewards[idx].double()
        std = r.std(correction=0)
        if std > 0:
            out[idx] = ((r - r.mean()).abs() / std > z)
    return out


@register("reward_outlier")
class RewardOutlierDefense:
    """Reject group reward outliers (z-score above ``cfg.z``)."""

    name = "reward_outlier"
    stage = "rollouts"

    def __init__(self, cfg, run_cfg=None, policy=None, task=None):
        self.z, self.action = cfg.z, cfg.action

    def inspect(self, rollouts: Sequence, logits=None) -> list[Verdict]:
        rewards = torch.tensor([r.reward for r in rollouts])
        mask = outlier_mask(rewards, [r.prompt_id for r in rollouts], self.z)
        return [Verdict(False, self.name, f"reward {r.reward:g} is a group outlier (z > {self.z:g})", None, self.action)
                if m else ACCEPT for r, m in zip(rollouts, mask.tolist())]
