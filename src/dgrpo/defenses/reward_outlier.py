"""Baseline: reward-outlier filter (paper §4 discusses why it fails).

Rejects completions whose reward is far from their group's mean. With binary rewards it blocks
exactly the rare correct completions a learning model needs — and a poisoned completion in a
group where honest nodes already succeed is no outlier at all.
"""

from __future__ import annotations

from collections import defaultdict
from typing import ClassVar, Literal, Sequence

from pydantic import Field

from dgrpo.defenses.base import Defense, DefenseConfig
from dgrpo.registry import register
from dgrpo.types import ACCEPT, Verdict


def outlier_mask(rewards, groups: Sequence, z: float):
    """(N,) bool tensor: |r − mean_g| / std_g > z (population std; groups with std 0 have no outliers).

    Args:
        rewards: (N,) tensor of rewards; groups: N group keys.
    """
    import torch  # (loaded on first use: config checks import this module)

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


class RewardOutlierDefenseConfig(DefenseConfig):
    """``kind: reward_outlier``: reject completions whose reward is an outlier of its group (paper §4, expected to fail)."""

    kind: Literal["reward_outlier"] = "reward_outlier"
    z: float = Field(1.5, gt=0, description="Reject when |r − mean_group| / std_group > z.")

    group_statistics: ClassVar[bool] = True


@register("defense", "reward_outlier", config=RewardOutlierDefenseConfig)
class RewardOutlierDefense(Defense):
    """Reject group reward outliers (z-score above ``cfg.z``)."""

    name = "reward_outlier"
    stage = "rollouts"

    def __init__(self, cfg, run_cfg=None, policy=None, task=None):
        self.z, self.action = cfg.z, cfg.action

    def inspect(self, rollouts: Sequence, logits=None) -> list[Verdict]:
        import torch

        rewards = torch.tensor([r.reward for r in rollouts])
        mask = outlier_mask(rewards, [r.prompt_id for r in rollouts], self.z)
        return [Verdict(False, self.name, f"reward {r.reward:g} is a group outlier (z > {self.z:g})", None, self.action)
                if m else ACCEPT for r, m in zip(rollouts, mask.tolist())]
