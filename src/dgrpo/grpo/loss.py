"""GRPO per-token loss and its aggregation variants.

Notation (paper §1.1): π_θ the policy, π_old the policy that generated the completions, π_ref the
frozen reference model, A_i the advantage of completion i, ε the clipping range, β the KL weight.
"""

from __future__ import annotations

from typing import Literal

import torch

LossType = Literal["grpo", "dr_grpo", "bnpo"]


def per_token_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    epsilon: float = 0.2,
    ref_logp: torch.Tensor | None = None,
    beta: float = 0.0,
) -> torch.Tensor:
    """Clipped surrogate plus KL penalty, per token.

    ℓ_{i,t} = −min(ρ_{i,t} A_i, clip(ρ_{i,t}, 1−ε, 1+ε) A_i) + β KL_{i,t},
    ρ_{i,t} = π_θ(a_{i,t}|·) / π_old(a_{i,t}|·),
    KL_{i,t} = exp(ref − logp) − (ref − logp) − 1   (the k3 estimator, Schulman 2020; DeepSeekMath eq. 4).

    With one update per generation (the paper's setting) pass ``old_logp = logp.detach()``: ρ = 1,
    the clip is inactive and the gradient is A_i ∇ log π_θ, exactly the paper's loss.

    Args:
        logp, old_logp: (N, T) per-token log-probs under π_θ (with grad) and π_old.
        advantages: (N,) one advantage per completion (broadcast over its tokens).
        ref_logp: (N, T) reference log-probs, required when beta > 0.

    Returns:
        (N, T) per-token loss (padding positions included; mask them when aggregating).

    Raises:
        ValueError: beta > 0 without ref_logp.
    """
    ratio = torch.exp(logp - old_logp)
    adv = advantages[:, None]  # (N, 1)
    surrogate = torch.minimum(ratio * adv, ratio.clamp(1 - epsilon, 1 + epsilon) * adv)
    loss = -surrogate
    if beta > 0:
        if ref_logp is None:
            raise ValueError("beta > 0 needs reference log-probs")
        delta = ref_logp - logp
        loss = loss + beta * (torch.exp(delta) - delta - 1)
    return loss


def loss_terms(per_token: torch.Tensor, mask: torch.Tensor, loss_type: LossType, max_len: int) -> tuple[torch.Tensor, float]:
    """Split a batch loss into (numerator, denominator) so micro-batches can be accumulated.

    The full-batch loss is Σ numerators / Σ denominators:

    * ``grpo``: Σ_i (Σ_t ℓ_{i,t} / |a_i|)  /  N          — mean of per-sequence means (paper §1.1)
    * ``bnpo``: Σ_{i,t} ℓ_{i,t}  /  Σ_i |a_i|            — token mean over the batch (DAPO)
    * ``dr_grpo``: Σ_{i,t} ℓ_{i,t}  /  (N · max_len)     — constant normaliser (Dr. GRPO, Liu et al. 2025)

    Args:
        per_token: (N, T) losses; mask: (N, T) 1 for real tokens; max_len: the constant
            normaliser of dr_grpo (the max completion length, in tokens).

    Raises:
        ValueError: unknown loss type.
    """
    masked = per_token * mask
    den = loss_denominator(mask, loss_type, max_len)
    if loss_type == "grpo":
        return (masked.sum(1) / mask.sum(1).clamp(min=1)).sum(), den
    return masked.sum(), den


def loss_denominator(mask: torch.Tensor, loss_type: LossType, max_len: int) -> float:
    """The denominator of :func:`loss_terms` for completions with token mask ``mask`` (N, T): N
    (grpo), the number of real tokens (bnpo) or N · max_len (dr_grpo).

    Raises:
        ValueError: unknown loss type.
    """
    if loss_type == "grpo":
        return float(mask.shape[0])
    if loss_type == "bnpo":
        return float(mask.sum().item())
    if loss_type == "dr_grpo":
        return float(mask.shape[0] * max_len)
    raise ValueError(f"loss_type must be grpo, dr_grpo or bnpo, got {loss_type!r}")


def aggregate_loss(per_token: torch.Tensor, mask: torch.Tensor, loss_type: LossType, max_len: int) -> torch.Tensor:
    """The scalar loss of one batch (see :func:`loss_terms`)."""
    num, den = loss_terms(per_token, mask, loss_type, max_len)
    return num / max(den, 1e-12)
