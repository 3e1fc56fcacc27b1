"""Entropy-as-reward hardening and the token noiser (TokenBuncher, Feng et al. 2025, arXiv 2508.20697).

RL-based harmful fine-tuning needs the model to produce different responses to the same
prompt (response entropy) so that a reward can tell them apart. TokenBuncher hardens a model
by RL on harmful prompts with the negative response entropy as reward, jointly with a
cross-entropy term towards "noised" targets (the Token Noiser) so that raising the entropy
later spreads probability over random tokens (gibberish) instead of over meaningful ones.

Convention (as :func:`dgrpo.policy.scoring.group_logits`): ``logits[g, t]`` is the
distribution that produced completion token t of completion g; ``mask[g, t]`` is 1 on real
completion tokens and 0 on padding. Entropies are in nats.
"""

from __future__ import annotations

import torch


def _upcast(x: torch.Tensor) -> torch.Tensor:
    """Half-precision logits to float32 (softmax sums in bf16 are too coarse); float64 stays."""
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy H = −Σ_v p_v log p_v of softmax(logits) over the last axis, in nats.

    Shape: (..., V) -> (...). A uniform distribution over V tokens gives log V.
    """
    logp = torch.log_softmax(_upcast(logits), dim=-1)
    # clamp so that a −inf logit (p = 0) contributes 0 · (finite) = 0, not 0 · −inf = nan
    logp = logp.clamp_min(torch.finfo(logp.dtype).min)
    return -(logp.exp() * logp).sum(dim=-1)


def _check_group(logits: torch.Tensor, mask: torch.Tensor) -> None:
    if logits.dim() != 3 or mask.shape != logits.shape[:2]:
        raise ValueError(f"need logits (G, T, V) and mask (G, T), got {tuple(logits.shape)} and {tuple(mask.shape)}")
    if (mask.sum(dim=1) <= 0).any():
        empty = (mask.sum(dim=1) <= 0).nonzero().flatten().tolist()
        raise ValueError(f"completions {empty} have no tokens: their entropy is undefined")


def response_entropy(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean per-token entropy of each completion: H_g = Σ_t m_gt H(p_gt) / Σ_t m_gt.

    Shape: logits (G, T, V), mask (G, T) -> (G,) nats. Differentiable in ``logits``.

    Raises:
        ValueError: shape mismatch, or a completion with no unmasked token (an empty completion
            would otherwise score 0 entropy, the best possible hardening reward).
    """
    _check_group(logits, mask)
    ent = token_entropy(logits)  # (G, T)
    m = mask.to(ent.dtype)
    return (ent * m).sum(dim=1) / m.sum(dim=1)


def entropy_reward(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """TokenBuncher's hardening reward r_g = −H_g (:func:`response_entropy`); higher = more certain.

    Shape: logits (G, T, V), mask (G, T) -> (G,). Raises as :func:`response_entropy`.
    """
    return -response_entropy(logits, mask)


def noised_target_distribution(
    logits: torch.Tensor,
    targets: torch.Tensor,
    sigma: float,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Token Noiser target: keep p(target), redistribute the rest over non-targets with noise.

    The paper adds noise to all non-target logits and trains with cross-entropy towards the
    result; its exact formula is not reproduced here. We choose, per position, with p =
    softmax(z), y the target token and ε_v ~ N(0, 1) i.i.d.:

        q_y = p_y
        q_v = (1 − p_y) · exp(z_v + σ ε_v) / Σ_{u ≠ y} exp(z_u + σ ε_u)      (v ≠ y)

    The target keeps exactly its probability (benign behaviour on the chosen token is not
    touched), while the order and shape of the non-target mass is scrambled by noise of scale σ
    (logit units, nats). σ = 0 gives q = p; σ → ∞ concentrates the non-target mass on random
    tokens. Not differentiable (a fixed target).

    Shape: logits (..., V), targets (...) long -> (..., V) probabilities, rows summing to 1.

    Raises:
        ValueError: sigma < 0, shape mismatch, a target id outside [0, V).
    """
    if sigma < 0:
        raise ValueError(f"sigma must be ≥ 0, got {sigma}")
    if targets.shape != logits.shape[:-1]:
        raise ValueError(f"targets {tuple(targets.shape)} must match logits {tuple(logits.shape)} without V")
    v = logits.shape[-1]
    if targets.numel() and (targets.min() < 0 or targets.max() >= v):
        raise ValueError(f"target ids must lie in [0, {v})")
    with torch.no_grad():
        z = _upcast(logits.detach())
        tgt = targets.long().unsqueeze(-1)  # (..., 1)
        p_y = torch.softmax(z, dim=-1).gather(-1, tgt)  # (..., 1)
        eps = torch.randn(z.shape, generator=generator, dtype=z.dtype, device=z.device) if sigma > 0 else 0.0
        noisy = (z + sigma * eps).scatter(-1, tgt, float("-inf"))  # target excluded from the rest
        rest = torch.nan_to_num(torch.softmax(noisy, dim=-1))  # (..., V), 0 at the target (V = 1: all 0)
        q = (1.0 - p_y) * rest
        return q.scatter(-1, tgt, p_y)


def token_noiser_loss(
    logits: torch.Tensor,
    targets: torch.Tensor,
    mask: torch.Tensor,
    sigma: float,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Masked mean cross-entropy −Σ_v q_v log p_v towards :func:`noised_target_distribution`.

    Added to the entropy-reward RL loss during hardening. Its gradient on the target logit is
    p_y − q_y = 0 and on a non-target logit p_v − q_v, so it only reshapes the non-target mass;
    with σ = 0 the gradient vanishes.

    Shape: logits (G, T, V), targets (G, T), mask (G, T) -> scalar. Differentiable in ``logits``.

    Raises:
        ValueError: as :func:`response_entropy` and :func:`noised_target_distribution`.
    """
    _check_group(logits, mask)
    q = noised_target_distribution(logits, targets, sigma, generator)  # (G, T, V) fixed target
    logp = torch.log_softmax(_upcast(logits), dim=-1)
    logp = logp.clamp_min(torch.finfo(logp.dtype).min)
    ce = -(q * logp).sum(dim=-1)  # (G, T)
    m = mask.to(ce.dtype)
    return (ce * m).sum() / m.sum()
