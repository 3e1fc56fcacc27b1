"""Tolerant seeded replay: how far is each claimed token from the seeded sampler's choice?

Exact replay (:mod:`dgrpo.verify.replay`) accepts a completion only when every seeded decision picks
the claimed token again. Across kernel paths (another batch shape, thread count, oneDNN vs MKL, a
GPU) honest logits differ by float32 rounding (~1e-6 relative, docs/verification.md), which does two
things to a seeded Gumbel-max decision (:mod:`dgrpo.policy.sampling`):

1. two perturbed scores ``z_j/τ + g_j`` that were nearly equal swap order: a small *margin*;
2. two top-k logits that were nearly equal swap *rank*, so the Gumbel variates (indexed by rank) swap
   tokens: the claimed token may then trail by a whole Gumbel difference, O(1), though honest.

The per-token divergence score is the Gumbel-max margin of Token-DiFR (Karvonen et al. 2025,
arXiv 2511.20621: the amount by which the reference's seeded choice beats the claimed token), taken
over the agreed top-k, with an allowance for rank swaps among logits closer than ``tie``:

    d_t = max(0,  max_{j < k} (z_(j)/τ + g_j)  −  max_{j ∈ R(z_c)} (z_(j)/τ + g_j))

where c is the claimed token, z the verifier's float32 logits at step t, z_(j) its j-th largest logit,
g the claimed seed's Gumbel row (:func:`dgrpo.policy.sampling.gumbel_table`) and
R(x) = {ranks j < k : |z_(j) − x| ≤ tie} the ranks a token of logit x could hold on the sender. Why
this is sound: sorted values are 1-Lipschitz in the max norm, so when the sender's logits are within
δ of the verifier's, the sender's j-th largest logit is within δ of z_(j) whichever token holds it:
the seeded score of every *rank* is known to ±δ/τ; only which token sits at a rank is uncertain, and
a token of logit z_c can sit at rank j only when |z_(j) − z_c| ≤ 2δ (``tie``). d_t = inf when c is outside
the top-k by more than ``tie`` (R(z_c) empty: no sampler could pick it). With ``tie = 0`` and no exact
ties, d_t is exactly the score gap exact fast replay thresholds with ``atol``. Greedy (τ = 0):
d_t = max(0, z_(0) − z_c).

A completion is rejected when max_t d_t > ``threshold`` (or its length breaks the stopping rules);
the count of tokens with d_t > ``eps`` is reported beside it. What ``tie`` and ``threshold`` give an
attacker: at a position where two top-k logits lie within ``tie``, or the runner-up's perturbed score
within ``threshold`` of the winner's, it may claim either token (:func:`free_alternatives` counts those
choices). Defaults (tie 1e-4, threshold 2e-4, in logit/τ units): 35× the largest honest score measured
across CPU kernel paths on SmolLM2-135M (5.7e-6, ``results/nondeterminism/``), and small enough that 2 of
16,036 honest positions offer a sender another token, where the first defaults (tie 1e-2, threshold 2e-2)
offered 176, digits and operators among them (review u36 I; ``results/tolerant_capacity/``,
docs/verification.md).
"""

from __future__ import annotations

import torch

from dgrpo.policy.sampling import SamplingParams, gumbel_table
from dgrpo.verify.replay import length_problem  # the stopping rules exact replay checks too

TIE = 1e-4
THRESHOLD = 2e-4
EPS = 1e-6


def token_divergence(logits: torch.Tensor, ids: list[int], seed: int, params: SamplingParams,
                     tie: float = TIE, positions: list[int] | None = None) -> torch.Tensor:
    """The per-token divergence d_t of the module docstring.

    Args:
        logits: (T', V) float32 logits of the completion's positions (T' ≥ len(ids)), row t the
            distribution that produced ``ids[t]``.
        ids: the claimed completion (n = len(ids) ≤ max_new_tokens tokens).
        seed: the claimed sampling seed.
        tie: logits closer than this (absolute, logit units) may have swapped rank on the sender.
        positions: score only these positions (each < n; a spot check, :mod:`dgrpo.verify.spot`); None: all.

    Returns:
        (n,) float32 scores ≥ 0 (one per position of ``positions`` when given), in logit/τ units (logit
        units when greedy); inf outside the top-k.

    Raises:
        ValueError: ``ids`` longer than ``logits`` or than ``params.max_new_tokens``, or ``tie`` < 0.
    """
    n, k = len(ids), params.top_k
    if n > logits.shape[0] or n > params.max_new_tokens:
        raise ValueError(f"token_divergence: {n} ids but {logits.shape[0]} logit rows and max_new_tokens="
                         f"{params.max_new_tokens}; pass the completion's own logits")
    if tie < 0:
        raise ValueError(f"token_divergence: tie must be ≥ 0, got {tie}")
    rows = torch.arange(n) if positions is None else torch.tensor(positions, dtype=torch.long)
    z = (logits[:n] if positions is None else logits[rows.to(logits.device)]).float()  # (r, V)
    claimed = torch.tensor(ids, device=z.device, dtype=torch.long)[rows.to(z.device)]  # (r,)
    z_c = z.gather(1, claimed[:, None]).squeeze(1)  # (n,)
    top_v, top_i = z.topk(k, dim=-1)  # (n, k) descending
    own = (top_v - z_c[:, None]).abs() <= tie  # (n, k): ranks the claimed token could hold
    inside = own.any(-1) | (top_i == claimed[:, None]).any(-1)
    if params.temperature == 0:
        d = (top_v[:, 0] - z_c).clamp(min=0)
        return torch.where(inside, d, torch.full_like(d, float("inf")))
    tau = params.temperature
    g = gumbel_table(seed, params.max_new_tokens, k)[rows].to(z.device)  # (r, k)
    score = top_v / tau + g  # (n, k): the seeded score of each rank, known to ±tie/τ whichever token holds it
    claim = torch.where(own, score, torch.full_like(score, float("-inf"))).max(-1).values
    d = (score.max(-1).values - claim).clamp(min=0)
    return torch.where(inside, d, torch.full_like(d, float("inf")))


def _sampled_inputs(name: str, logits: torch.Tensor, ids: list[int], params: SamplingParams) -> tuple[int, int]:
    """(n, k) for a seeded-rank function ``name``; ValueError for greedy params or ``ids`` longer than ``logits`` or
    than ``params.max_new_tokens``."""
    n, k = len(ids), params.top_k
    if params.temperature <= 0:
        raise ValueError(f"{name}: greedy decoding has no seeded ranks; pass sampling params (temperature > 0)")
    if n > logits.shape[0] or n > params.max_new_tokens:
        raise ValueError(f"{name}: {n} ids but {logits.shape[0]} logit rows and max_new_tokens="
                         f"{params.max_new_tokens}; pass the completion's own logits")
    return n, k


def free_alternatives(logits: torch.Tensor, ids: list[int], seed: int, params: SamplingParams,
                      tie: float = TIE, threshold: float = THRESHOLD) -> torch.Tensor:
    """How many other top-k tokens a sender holding the weights and the bound seed could claim at each position
    and still pass (divergence ≤ ``threshold`` under ``tie``): the tolerance's room for an adaptive edit (review
    u36 I: a one-token edit of an equation, the rest sampled from the seed, passes wherever this is > 0).

    Args: as :func:`token_divergence` (sampling only: ``params.temperature`` > 0).

    Returns:
        (n,) int64: per position, the count of top-k tokens other than ``ids[t]`` that would pass there.

    Raises:
        ValueError: greedy params, ``ids`` longer than ``logits`` or than ``params.max_new_tokens``, or ``tie`` < 0.
    """
    n, k = _sampled_inputs("free_alternatives", logits, ids, params)
    if tie < 0:
        raise ValueError(f"free_alternatives: tie must be ≥ 0, got {tie}")
    z = logits[:n].float()
    top_v, top_i = z.topk(k, dim=-1)  # (n, k)
    score = top_v / params.temperature + gumbel_table(seed, params.max_new_tokens, k)[:n].to(z.device)
    own = (top_v[:, :, None] - top_v[:, None, :]).abs() <= tie  # (n, k, k): ranks the token at rank j could hold
    claim = torch.where(own, score[:, None, :], torch.full_like(own, float("-inf"), dtype=score.dtype)).max(-1).values
    passes = score.max(-1, keepdim=True).values - claim <= threshold  # (n, k): claiming rank j's token passes
    other = top_i != torch.tensor(ids, device=z.device, dtype=torch.long)[:, None]
    return (passes & other).sum(-1)


def required_tie(logits: torch.Tensor, ids: list[int], seed: int, params: SamplingParams,
                 threshold: float = THRESHOLD) -> torch.Tensor:
    """The smallest ``tie`` under which each token's divergence stays within ``threshold``: the quantity that
    calibrates ``tie`` on honest traffic (0 where exact fast replay's gap is within ``threshold`` already).

    d_t(tie) ≤ threshold exactly when some rank j < k with seeded score ≥ max score − threshold holds a
    logit within ``tie`` of the claimed token's, so the answer is min over those ranks of |z_(j) − z_c|.

    Args: as :func:`token_divergence` (sampling only: ``params.temperature`` > 0).

    Returns:
        (n,) float32, logit units: 0 where the claimed token holds such a rank (every honest token on one
        kernel path), else how far its logit is from the nearest such rank's.

    Raises:
        ValueError: greedy params (the tie does not enter greedy's score), or ``ids`` longer than ``logits``
            or than ``params.max_new_tokens``.
    """
    n, k = _sampled_inputs("required_tie", logits, ids, params)
    z = logits[:n].float()
    z_c = z.gather(1, torch.tensor(ids, device=z.device, dtype=torch.long)[:, None])  # (n, 1)
    top_v, _ = z.topk(k, dim=-1)  # (n, k)
    score = top_v / params.temperature + gumbel_table(seed, params.max_new_tokens, k)[:n].to(z.device)
    near = score >= score.max(-1, keepdim=True).values - threshold  # (n, k): ranks within threshold of the best
    gap = torch.where(near, (top_v - z_c).abs(), torch.full_like(top_v, float("inf")))
    return gap.min(-1).values


def tolerant_mismatch(logits: torch.Tensor, ids: list[int], seed: int, params: SamplingParams, eos_id: int,
                      tie: float = TIE, threshold: float = THRESHOLD, eps: float = EPS,
                      positions: list[int] | None = None) -> tuple[int, str] | None:
    """None when ``ids`` passes tolerant replay, else (position, reason): the stopping rules, then the
    first (checked) token whose divergence exceeds ``threshold`` (the reason gives its score, the
    maximum over the checked tokens and how many exceed ``eps``).

    Args: as :func:`token_divergence`; ``threshold`` and ``eps`` in the same units as the scores.
    """
    bad = length_problem(ids, params, eos_id)
    if bad is not None:
        return bad
    if positions is not None and not len(positions):
        return None
    d = token_divergence(logits, ids, seed, params, tie, positions)
    over = (d > threshold).nonzero()
    if not len(over):
        return None
    r = int(over[0])
    t = r if positions is None else int(positions[r])
    what = "outside the top-k" if torch.isinf(d[r]) else f"divergence {float(d[r]):.3g}"
    return t, (f"seeded sampling picks another token at position {t} ({what} > {threshold:g}; max "
               f"{float(d.max()):.3g}, {int((d > eps).sum())} of {len(d)} checked tokens above {eps:g})")
