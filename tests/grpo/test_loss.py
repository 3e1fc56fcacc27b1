import pytest
import torch

from dgrpo.grpo.loss import aggregate_loss, loss_terms, per_token_loss


def _two_sequences():
    # sequence A: five tokens of value 2; sequence B: one token of value 10 (then padding)
    per_token = torch.tensor([[2.0, 2, 2, 2, 2], [10.0, 99, 99, 99, 99]])
    mask = torch.tensor([[1.0, 1, 1, 1, 1], [1.0, 0, 0, 0, 0]])
    return per_token, mask


def test_bnpo_token_mean():
    per_token, mask = _two_sequences()
    assert aggregate_loss(per_token, mask, "bnpo", max_len=10).item() == pytest.approx(20 / 6)


def test_grpo_mean_of_sequence_means():
    per_token, mask = _two_sequences()
    assert aggregate_loss(per_token, mask, "grpo", max_len=10).item() == pytest.approx(6.0)


def test_dr_grpo_constant_normaliser():
    per_token, mask = _two_sequences()
    assert aggregate_loss(per_token, mask, "dr_grpo", max_len=10).item() == pytest.approx(1.0)


def test_micro_batches_accumulate_to_full_batch():
    per_token, mask = _two_sequences()
    for loss_type in ("grpo", "bnpo", "dr_grpo"):
        parts = [loss_terms(per_token[i : i + 1], mask[i : i + 1], loss_type, 10) for i in range(2)]
        total = sum(n for n, _ in parts) / sum(d for _, d in parts)
        assert total.item() == pytest.approx(aggregate_loss(per_token, mask, loss_type, 10).item())


def test_ratio_one_gives_policy_gradient():
    # at ratio 1 the gradient of -ratio*A w.r.t. logp is -A per token
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    loss = per_token_loss(logp, logp.detach(), torch.tensor([0.5])).sum()
    loss.backward()
    assert logp.grad[0].tolist() == pytest.approx([-0.5, -0.5])


def test_clipping_stops_gradient_beyond_epsilon():
    old = torch.tensor([[0.0]])
    logp = torch.tensor([[0.5]], requires_grad=True)  # ratio e^0.5 = 1.65 > 1.2
    per_token_loss(logp, old, torch.tensor([1.0]), epsilon=0.2).sum().backward()
    assert logp.grad.item() == 0.0  # positive advantage, ratio above 1+eps: clipped
    logp2 = torch.tensor([[0.5]], requires_grad=True)
    per_token_loss(logp2, old, torch.tensor([-1.0]), epsilon=0.2).sum().backward()
    assert logp2.grad.item() == pytest.approx(torch.exp(torch.tensor(0.5)).item())  # negative A: not clipped


def test_kl_k3_value():
    logp = torch.tensor([[-1.0]])
    ref = torch.tensor([[-2.0]])
    # k3 = exp(ref-logp) - (ref-logp) - 1 = e^-1 + 1 - 1
    loss = per_token_loss(logp, logp, torch.tensor([0.0]), ref_logp=ref, beta=0.1)
    assert loss.item() == pytest.approx(0.1 * torch.exp(torch.tensor(-1.0)).item())
    with pytest.raises(ValueError):
        per_token_loss(logp, logp, torch.tensor([0.0]), beta=0.1)
