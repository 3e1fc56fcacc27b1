"""Group-relative advantages (GRPO, Shao et al. 2024; paper §1.1)."""

from __future__ import annotations

from typing import Hashable, Literal, Sequence

import torch

ScaleRewards = Literal["group", "batch", "none"]


def group_advantages(
    rewards: torch.Tensor, group_ids: Sequence[Hashable], scale_rewards: ScaleRewards = "group",
    batch_std: float | None = None,
) -> torch.Tensor:
    """A_i = (r_i − mean_g(r)) / std(r), groups formed by prompt id.

    Notation: r_i is the reward of completion i and g its group (all completions of the same
    prompt). The std is the **population** std (ddof = 0), so rewards [1, 3] give A = [−1, +1].

    * ``scale_rewards="group"``: divide by the group's std (paper §1.1, GRPO).
    * ``"batch"``: divide by the std of all rewards in the batch (Hu et al., REINFORCE++), or by
      ``batch_std`` when the batch is larger than ``rewards`` (the learner passes one group at a
      time, with :func:`reward_std` of the whole batch); then the float32 centred rewards are divided.
    * ``"none"``: no division (Dr. GRPO, Liu et al. 2025).

    A group whose std is 0 (all rewards equal, or a single completion) carries no signal and gets
    A = 0, never NaN.

    Args:
        rewards: (N,) rewards.
        group_ids: N group keys (prompt ids).

    Returns:
        (N,) float advantages.

    Raises:
        ValueError: length mismatch or unknown ``scale_rewards``.
    """
    if scale_rewards not in ("group", "batch", "none"):
        raise ValueError(f"scale_rewards must be group, batch or none, got {scale_rewards!r}")
    if scale_rewards == "batch" and batch_std is not None:
        centred = group_advantages(rewards, group_ids, "none")
        return centred / batch_std if batch_std > 0 else torch.zeros_like(centred)
    rewards = rewards.double().flatten()
    if len(group_ids) != rewards.numel():
        raise ValueError(f"{rewards.numel()} rewards but {len(group_ids)} group ids")
    adv = torch.zeros_like(rewards)
    if rewards.numel() == 0:
        return adv.float()
    keys = {k: i for i, k in enumerate(dict.fromkeys(group_ids))}
    index = torch.tensor([keys[k] for k in group_ids])  # (N,) group index
    for g in range(len(keys)):
        members = index == g
        r = rewards[members]
        centred = r - r.mean()
        if scale_rewards == "group":
            std = r.std(correction=0)
            centred = centred / std if std > 0 else torch.zeros_like(centred)
        adv[members] = centred
    if scale_rewards == "batch":
        std = rewards.std(correction=0)
        adv = adv / std if std > 0 else torch.zeros_like(adv)
    return adv.float()


def reward_std(rewards: Sequence[float]) -> float:
    """Population std of rewards (as a float32 tensor holds them), 0 for none: the batch std of
    ``scale_rewards="batch"``."""
    return float(torch.tensor(list(rewards) or [0.0]).double().std(correction=0))
