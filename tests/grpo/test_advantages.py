import math

import pytest
import torch

from dgrpo.grpo.advantages import group_advantages


def test_equal_rewards_give_zero_not_nan():
    adv = group_advantages(torch.tensor([1.0, 1.0, 1.0, 1.0]), ["p"] * 4)
    assert adv.tolist() == [0.0, 0.0, 0.0, 0.0]
    assert not torch.isnan(adv).any()


def test_group_of_one_is_zero():
    assert group_advantages(torch.tensor([0.7]), ["p"]).tolist() == [0.0]


def test_groups_by_prompt_id_population_std():
    # [1, 3]: mean 2, population std 1 -> [-1, +1]; [5] alone -> [0]
    adv = group_advantages(torch.tensor([1.0, 5.0, 3.0]), ["a", "b", "a"])
    assert adv.tolist() == pytest.approx([-1.0, 0.0, 1.0])


def test_scale_none_and_batch():
    rewards = torch.tensor([0.0, 1.0, 1.0, 1.0])  # one group
    assert group_advantages(rewards, ["a"] * 4, "none").tolist() == pytest.approx([-0.75, 0.25, 0.25, 0.25])
    # two groups; batch std of [0, 1, 0, 0] = sqrt(3)/4
    adv = group_advantages(torch.tensor([0.0, 1.0, 0.0, 0.0]), ["a", "a", "b", "b"], "batch")
    std = math.sqrt(3) / 4
    assert adv.tolist() == pytest.approx([-0.5 / std, 0.5 / std, 0.0, 0.0])


def test_matches_numpy_reference():
    import numpy as np

    gen = torch.Generator().manual_seed(3)
    rewards = torch.rand(24, generator=gen)
    groups = [i % 4 for i in range(24)]
    adv = group_advantages(rewards, groups)
    r = rewards.numpy()
    for g in range(4):
        idx = [i for i in range(24) if groups[i] == g]
        expected = (r[idx] - r[idx].mean()) / r[idx].std()  # numpy std is the population std
        assert adv[idx].numpy() == pytest.approx(expected, rel=1e-5)


def test_errors():
    with pytest.raises(ValueError):
        group_advantages(torch.tensor([1.0, 2.0]), ["a"])
    with pytest.raises(ValueError):
        group_advantages(torch.tensor([1.0]), ["a"], "rank")
