import copy

import pytest
import torch

from dgrpo.grpo.advantages import group_advantages
from dgrpo.grpo.learner import GRPOParams, Learner
from dgrpo.grpo.loss import aggregate_loss, per_token_loss
from dgrpo.policy.scoring import completion_mask, pad_right
from dgrpo.types import Rollout

EOS = 2


def _rollouts():
    prompts = {"a": [5, 6, 7], "b": [8, 9]}
    specs = [("a", [20, 21, EOS], 1.0), ("a", [22, EOS], 0.0), ("a", [23, 24, 25, 26], 0.0),
             ("b", [30, EOS], 1.0), ("b", [31, 32, EOS], 1.0), ("b", [33], 0.0)]
    return [Rollout(pid, prompts[pid], ids, "", sender=0, reward=r) for pid, ids, r in specs]


def _reference_grads(model, rollouts, loss_type, max_len):
    """Full-batch loss computed the plain way: each sequence forwarded on its own."""
    model.zero_grad()
    adv = group_advantages(torch.tensor([r.reward for r in rollouts]), [r.prompt_id for r in rollouts])
    comps = pad_right([r.completion_ids for r in rollouts], EOS)
    logps = []
    for r, ids in zip(rollouts, comps):
        full = torch.tensor([r.prompt_ids + ids.tolist()])
        logits = model(input_ids=full).logits[0, len(r.prompt_ids) - 1 : -1].float()
        logps.append(torch.log_softmax(logits, -1).gather(-1, ids[:, None]).squeeze(-1))
    logp = torch.stack(logps)
    mask = completion_mask(comps, EOS, [len(r.completion_ids) for r in rollouts])
    loss = aggregate_loss(per_token_loss(logp, logp.detach(), adv), mask, loss_type, max_len)
    loss.backward()
    return {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo"])
def test_grouped_accumulation_equals_full_batch_gradient(model, loss_type):
    reference = copy.deepcopy(model)
    expected = _reference_grads(reference, _rollouts(), loss_type, max_len=6)
    # lr=1 SGD-free check: read the gradient the learner applies by capturing it before the step
    learner = Learner(model, GRPOParams(loss_type=loss_type, max_len=6, max_grad_norm=1e9), EOS, EOS)
    captured = {}
    original_step = learner.optimizer.step

    def capture():
        captured.update({n: p.grad.clone() for n, p in model.named_parameters()})
        original_step()

    learner.optimizer.step = capture
    learner.step(_rollouts())
    for name, grad in expected.items():
        assert torch.allclose(captured[name], grad, atol=1e-6), name


def test_update_raises_logprob_of_rewarded_completion(model):
    learner = Learner(model, GRPOParams(lr=1e-2), EOS, EOS)
    rollouts = _rollouts()

    def logp_of(r):
        full = torch.tensor([r.prompt_ids + r.completion_ids])
        logits = model(input_ids=full).logits[0, len(r.prompt_ids) - 1 : -1]
        return torch.log_softmax(logits, -1).gather(-1, torch.tensor(r.completion_ids)[:, None]).sum().item()

    before = [logp_of(r) for r in rollouts]
    for _ in range(3):
        learner.step(_rollouts())
    after = [logp_of(r) for r in rollouts]
    assert after[0] > before[0] and after[1] < before[1]  # rewarded up, unrewarded down


def test_all_equal_rewards_skip_without_forward(model):
    learner = Learner(model, GRPOParams(), EOS, EOS)
    flat = [Rollout("a", [5, 6], [7, EOS], "", 0, reward=1.0) for _ in range(4)]
    before = [p.clone() for p in model.parameters()]
    stats = learner.step(flat)
    assert stats.used == 0 and stats.skipped_groups == 1
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_beta_needs_reference_and_multiple_iterations_run(model):
    with pytest.raises(ValueError):
        Learner(model, GRPOParams(beta=0.1), EOS, EOS)
    ref = copy.deepcopy(model).requires_grad_(False)
    learner = Learner(model, GRPOParams(beta=0.1, num_iterations=2, lr=1e-3), EOS, EOS, ref)
    stats = learner.step(_rollouts())
    assert stats.used == 6 and stats.grad_norm > 0
