import math

import pytest
import torch
import torch.nn.functional as F
from scipy.stats import entropy as scipy_entropy
from scipy.stats import spearmanr

from dgrpo.hardening.entropy import (
    entropy_reward,
    noised_target_distribution,
    response_entropy,
    token_entropy,
    token_noiser_loss,
)


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def test_uniform_distribution_has_entropy_log_v():
    g, t, v = 3, 5, 17
    logits = torch.full((g, t, v), 2.5)  # any constant: uniform
    mask = torch.ones(g, t)
    assert token_entropy(logits).flatten().tolist() == pytest.approx([math.log(v)] * g * t, rel=1e-6)
    assert response_entropy(logits, mask).tolist() == pytest.approx([math.log(v)] * g, rel=1e-6)
    assert entropy_reward(logits, mask).tolist() == pytest.approx([-math.log(v)] * g, rel=1e-6)


def test_token_entropy_matches_scipy_and_handles_minus_inf():
    logits = torch.randn(4, 9, generator=_gen(1), dtype=torch.float64)
    p = torch.softmax(logits, dim=-1).numpy()
    assert token_entropy(logits).tolist() == pytest.approx(scipy_entropy(p, axis=-1).tolist(), rel=1e-10)
    banned = torch.tensor([[0.0, 0.0, float("-inf"), float("-inf")]], requires_grad=True)
    h = token_entropy(banned)
    assert h.item() == pytest.approx(math.log(2))  # two tokens left, no nan from 0·log 0
    h.sum().backward()
    assert torch.isfinite(banned.grad).all()
    assert token_entropy(torch.tensor([[1e4, 0.0, 0.0]])).item() == pytest.approx(0.0, abs=1e-6)


def test_response_entropy_ignores_padding():
    logits = torch.randn(2, 6, 11, generator=_gen(2), dtype=torch.float64)
    lengths = [6, 3]
    mask = torch.tensor([[1.0] * 6, [1.0] * 3 + [0.0] * 3])
    ref = [scipy_entropy(torch.softmax(logits[g, :n], -1).numpy(), axis=-1).mean() for g, n in enumerate(lengths)]
    assert response_entropy(logits, mask).tolist() == pytest.approx(ref, rel=1e-10)
    noisy = logits.clone()
    noisy[1, 3:] = 1e3 * torch.randn(3, 11, generator=_gen(3), dtype=torch.float64)  # garbage in padding
    assert torch.equal(response_entropy(noisy, mask), response_entropy(logits, mask))


def test_response_entropy_errors():
    logits = torch.zeros(2, 3, 4)
    with pytest.raises(ValueError, match="no tokens"):
        response_entropy(logits, torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]]))
    with pytest.raises(ValueError, match="mask"):
        response_entropy(logits, torch.ones(2, 4))


def test_ascending_the_entropy_reward_lowers_entropy():
    logits = torch.randn(2, 4, 8, generator=_gen(4), requires_grad=True)
    mask = torch.ones(2, 4)
    before = response_entropy(logits, mask).detach()
    entropy_reward(logits, mask).sum().backward()
    after = response_entropy((logits + 0.5 * logits.grad).detach(), mask)
    assert (after < before).all()


def test_noised_target_keeps_the_target_probability():
    logits = torch.randn(3, 5, 50, generator=_gen(5), dtype=torch.float64)
    targets = torch.randint(0, 50, (3, 5), generator=_gen(6))
    p = torch.softmax(logits, dim=-1)
    q = noised_target_distribution(logits, targets, sigma=2.0, generator=_gen(7))
    assert q.shape == logits.shape and (q >= 0).all()
    assert torch.allclose(q.sum(dim=-1), torch.ones(3, 5, dtype=torch.float64))
    assert torch.allclose(q.gather(-1, targets[..., None]), p.gather(-1, targets[..., None]))
    assert not torch.allclose(q, p)  # the non-target mass moved
    assert torch.allclose(noised_target_distribution(logits, targets, sigma=0.0), p)  # σ = 0: identity


def test_noise_scrambles_the_order_of_non_target_tokens():
    v = 1000
    logits = torch.randn(v, generator=_gen(8), dtype=torch.float64)
    target = torch.tensor(int(torch.argmax(logits)))
    rest = torch.arange(v) != target

    def rank_corr(sigma):
        q = noised_target_distribution(logits, target, sigma, generator=_gen(9))
        return spearmanr(q[rest].numpy(), logits[rest].numpy())[0]

    assert rank_corr(0.0) == pytest.approx(1.0)
    assert rank_corr(1.0) < 0.8
    assert abs(rank_corr(20.0)) < 0.1  # noise 20× the logit spread: order is essentially random


def test_token_noiser_loss_matches_torch_cross_entropy_and_spares_the_target():
    g, t, v = 2, 4, 12
    logits = torch.randn(g, t, v, generator=_gen(10), dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, v, (g, t), generator=_gen(11))
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 0.0, 0.0]], dtype=torch.float64)
    loss = token_noiser_loss(logits, targets, mask, sigma=3.0, generator=_gen(12))
    q = noised_target_distribution(logits, targets, 3.0, generator=_gen(12))
    ce = F.cross_entropy(logits.detach().reshape(-1, v), q.reshape(-1, v), reduction="none").reshape(g, t)
    assert loss.item() == pytest.approx(((ce * mask).sum() / mask.sum()).item(), rel=1e-10)
    loss.backward()
    grad = logits.grad
    assert torch.allclose(grad.gather(-1, targets[..., None]), torch.zeros(g, t, 1, dtype=torch.float64), atol=1e-12)
    assert torch.equal(grad[1, 2:], torch.zeros(2, v, dtype=torch.float64))  # padding gets no gradient
    assert grad[0].abs().sum() > 0


def test_token_noiser_loss_has_no_gradient_without_noise():
    logits = torch.randn(1, 3, 7, generator=_gen(13), dtype=torch.float64, requires_grad=True)
    token_noiser_loss(logits, torch.zeros(1, 3, dtype=torch.long), torch.ones(1, 3), sigma=0.0).backward()
    assert logits.grad.abs().max() < 1e-12


def test_noiser_errors():
    logits = torch.zeros(2, 5)
    with pytest.raises(ValueError, match="sigma"):
        noised_target_distribution(logits, torch.zeros(2, dtype=torch.long), -1.0)
    with pytest.raises(ValueError, match=r"\[0, 5\)"):
        noised_target_distribution(logits, torch.tensor([0, 5]), 1.0)
    with pytest.raises(ValueError, match="match"):
        noised_target_distribution(logits, torch.zeros(3, dtype=torch.long), 1.0)
