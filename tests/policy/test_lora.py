"""LoRA adapters (policy/lora.py) and the learning-rate warm-up (grpo/learner.py)."""

import copy

import pytest
import torch

from dgrpo.grpo.learner import GRPOParams, Learner
from dgrpo.policy.lora import add_lora, trainable_parameters
from dgrpo.policy.sampling import SamplingParams, sample
from dgrpo.types import Rollout

TARGETS = ["q_proj", "v_proj", "down_proj"]


def merged_copy(base: torch.nn.Module, lora_model: torch.nn.Module, rank: int, alpha: float) -> torch.nn.Module:
    """A plain copy of ``base`` whose target weights are W + (α/r)·B·A (Hu et al. 2021, eq. 3),
    computed here from the adapters' tensors, independently of peft's forward."""
    merged = copy.deepcopy(base)
    params = dict(lora_model.named_parameters())
    for name, module in merged.named_modules():
        if name.split(".")[-1] in TARGETS:
            a = params[f"{name}.lora_A.default.weight"]  # (r, d_in)
            b = params[f"{name}.lora_B.default.weight"]  # (d_out, r)
            with torch.no_grad():
                module.weight += (alpha / rank) * b @ a
    return merged


def test_adapters_start_at_the_base_model_and_only_they_train(model):
    base = copy.deepcopy(model)
    add_lora(model, rank=4, alpha=8.0, targets=TARGETS)
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    assert torch.equal(model(input_ids=ids).logits, base(input_ids=ids).logits)  # B = 0 at the start
    expected = 0
    for name, module in base.named_modules():
        if name.split(".")[-1] in TARGETS:
            expected += 4 * (module.in_features + module.out_features)  # A (r, in) + B (out, r)
    assert sum(p.numel() for p in trainable_parameters(model)) == expected


def test_adapted_forward_and_sampler_equal_the_merged_weights(model, tokenizer):
    base = copy.deepcopy(model)
    add_lora(model, rank=4, alpha=8.0, targets=TARGETS)
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    merged = merged_copy(base, model, 4, 8.0)
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    assert not torch.allclose(model(input_ids=ids).logits, base(input_ids=ids).logits, atol=1e-3)
    torch.testing.assert_close(model(input_ids=ids).logits, merged(input_ids=ids).logits, atol=1e-4, rtol=1e-4)
    eos, params = tokenizer.eos_token_id, SamplingParams(top_k=5, temperature=1.0, max_new_tokens=10)
    prompts, seeds = [[5, 6, 7], [8, 9]], [11, 12]
    assert sample(model, prompts, seeds, params, eos, eos) == sample(merged, prompts, seeds, params, eos, eos)


def test_a_lora_update_moves_only_the_adapters(model, tokenizer):
    add_lora(model, rank=2, alpha=4.0, targets=TARGETS)
    frozen = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    learner = Learner(model, GRPOParams(lr=1e-2), tokenizer.eos_token_id, tokenizer.pad_token_id)
    assert {id(p) for g in learner.optimizer.param_groups for p in g["params"]} == \
        {id(p) for p in trainable_parameters(model)}
    rollouts = [Rollout("p0", [5, 6, 7], [8 + i, 9, 10], "t", 0, reward=float(i % 2)) for i in range(4)]
    # a first step moves A by a zero gradient (B = 0): two steps move B, then A
    learner.step(rollouts)
    before = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_A" in n}
    learner.step(rollouts)
    assert all(torch.equal(p, frozen[n]) for n, p in model.named_parameters() if n in frozen)
    assert any(not torch.equal(p, before[n]) for n, p in model.named_parameters() if n in before)


@pytest.mark.parametrize("round_idx, expected", [(0, 2.5e-5), (1, 5e-5), (2, 7.5e-5), (3, 1e-4), (10, 1e-4), (None, 1e-4)])
def test_warmup_is_linear_over_the_first_rounds(model, tokenizer, round_idx, expected):
    learner = Learner(model, GRPOParams(lr=1e-4, warmup_rounds=4), tokenizer.eos_token_id, tokenizer.pad_token_id)
    assert learner.learning_rate(round_idx) == pytest.approx(expected)
    rollouts = [Rollout("p0", [5, 6], [7 + i, 8], "t", 0, reward=float(i % 2)) for i in range(2)]
    learner.step(rollouts, round_idx)
    assert learner.optimizer.param_groups[0]["lr"] == pytest.approx(expected)
