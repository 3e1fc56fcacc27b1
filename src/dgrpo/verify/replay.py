"""Exact seeded replay (the paper's suggested fix, §4.1): would the claimed seed reproduce a completion?

Sampling is reproducible per completion (:mod:`dgrpo.policy.sampling`): a completion is a function of
(weights, prompt, seed), independent of the batch it was sampled in (docs/verification.md). A
verifier holding the same weights checks it in one of two ways:

* :func:`replay_mismatch`: from one forward pass (the update's own logits), re-make every seeded
  sampling decision with the claimed seed's Gumbel table; each must pick the claimed token. A
  decision passes when the claimed token is in the top-k and its perturbed score ``logit/τ + g``
  trails the best by at most ``atol`` (float32 noise between batched decoding and one forward pass
  is about 1e-4). The length must match too: generation stops exactly at the first eos or at
  ``max_new_tokens``.
* :func:`regeneration_mismatches`: sample the completions again from their seeds and compare exactly.
"""

from __future__ import annotations

import torch

from dgrpo.policy.sampling import SamplingParams, gumbel_table, sample


def length_problem(ids: list[int], params: SamplingParams, eos_id: int) -> tuple[int, str] | None:
    """(position, reason) when ``ids`` breaks the sampler's stopping rules (stop exactly at the first
    eos or at max_new_tokens), else None."""
    n = len(ids)
    if n == 0:
        return 0, "empty completion"
    if n > params.max_new_tokens:
        return params.max_new_tokens, f"{n} tokens exceed max_new_tokens={params.max_new_tokens}"
    if eos_id in ids[:-1]:
        return ids.index(eos_id), "continues after eos"
    if ids[-1] != eos_id and n < params.max_new_tokens:
        return n, "stops before eos and before max_new_tokens"
    return None


def replay_gaps(logits: torch.Tensor, ids: list[int], seed: int, params: SamplingParams,
                positions: list[int] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """How far each claimed token trails the seeded choice (the stopping rules aside); a decision departs
    where ``gap > atol`` or the token is outside the top-k.

    Args:
        logits: (T', V) float32 logits of the completion's positions (T' ≥ len(ids)).
        ids: the claimed completion (n tokens).
        positions: check only these positions (each < n; a spot check, :mod:`dgrpo.verify.spot`); None: all.

    Returns:
        (gap, inside) over the checked positions (r = n, or len(positions)): (r,) float32, the best
        perturbed score minus the claimed token's (≥ 0; inf outside the top-k), and (r,) bool, the claimed
        token is inside the top-k.
    """
    n = len(ids)
    if positions is None:
        rows, sub = torch.arange(n), logits[:n]  # (n, V)
    else:
        rows = torch.tensor(positions, dtype=torch.long)  # (r,)
        sub = logits[rows.to(logits.device)]  # (r, V)
    top_v, top_i = sub.topk(params.top_k, dim=-1)  # (r, k)
    claimed = torch.tensor(ids, device=logits.device, dtype=torch.long)[rows.to(logits.device), None]  # (r, 1)
    hit = top_i == claimed  # (r, k)
    inside = hit.any(dim=-1)  # (r,)
    if params.temperature == 0:
        score = top_v
    else:
        score = top_v / params.temperature + gumbel_table(seed, params.max_new_tokens, params.top_k)[rows].to(logits.device)
    chosen = torch.where(hit, score, torch.full_like(score, float("-inf"))).max(-1).values  # (r,) claimed token's score
    gap = score.max(-1).values - chosen  # (r,) ≥ 0, inf where the token is outside the top-k
    return gap, inside


def replay_mismatch(logits: torch.Tensor, ids: list[int], seed: int, params: SamplingParams, eos_id: int,
                    atol: float = 1e-3, positions: list[int] | None = None) -> tuple[int, str] | None:
    """First position where seeded sampling would not produce ``ids``.

    Args:
        logits: (T', V) float32 logits of the completion's positions (T' ≥ len(ids)).
        ids: the claimed completion.
        positions: check only these positions (ascending, each < len(ids); a spot check,
            :mod:`dgrpo.verify.spot`); None: all. The stopping rules are checked either way.

    Returns:
        None when every checked decision reproduces, else (position, reason).
    """
    bad = length_problem(ids, params, eos_id)
    if bad is not None:
        return bad
    if positions is not None and not len(positions):
        return None
    gap, inside = replay_gaps(logits, ids, seed, params, positions)
    bad = ((gap > atol) | ~inside).nonzero()  # the first departure of either kind (an edited token inside the top-k
    if len(bad):  # makes later ones fall outside it: the earlier position is the edit)
        r = int(bad[0])
        t = r if positions is None else int(positions[r])
        if not inside[r]:
            return t, f"token at position {t} outside top-{params.top_k}"
        return t, f"seeded sampling picks another token at position {t} (score gap {float(gap[r]):.3g})"
    return None


def regeneration_mismatches(model, prompts: list[list[int]], completions: list[list[int]], seeds: list[int],
                            params: SamplingParams, eos_id: int, pad_id: int) -> list[int | None]:
    """Sample each (prompt, seed) again; per completion, the first position where the regeneration
    differs from the claimed ids (their shorter length when one is a prefix of the other), None when equal."""
    again = sample(model, prompts, seeds, params, eos_id, pad_id)
    out = []
    for regenerated, claimed in zip(again, completions):
        if regenerated == list(claimed):
            out.append(None)
            continue
        out.append(next((i for i, (a, b) in enumerate(zip(regenerated, claimed)) if a != b), min(len(regenerated), len(claimed))))
    return out
