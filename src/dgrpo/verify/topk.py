"""Top-k support check (paper §4.1, Table 1): could the agreed top-k sampler have produced a token?

Every node holds the same weights and the swarm agreed to sample with top-k. A token outside the
receiver's own top-k at its position could not have been sampled. The logits must be float32 on
both sides: with bf16 anywhere, honest tokens fall outside (docs/verification.md).
"""

from __future__ import annotations

import torch

from dgrpo.policy.scoring import completion_mask, pad_right


def outside_topk(logits: torch.Tensor, ids: torch.Tensor, mask: torch.Tensor, k: int, atol: float = 0.0) -> torch.Tensor:
    """Which tokens lie outside the top-k of their position.

    A token is inside when its logit ≥ (k-th largest logit − atol): ties at the k-th logit count as
    inside.

    Args:
        logits: (G, T, V) float32; ids: (G, T) token ids; mask: (G, T) 1 for real tokens.

    Returns:
        (G, T) bool, True where a real token is outside the top-k.
    """
    kth = logits.topk(k, dim=-1).values[..., -1]  # (G, T) k-th largest logit
    token = logits.gather(-1, ids[..., None]).squeeze(-1)  # (G, T)
    return (token < kth - atol) & mask.bool()


def first_outside_topk(logits: torch.Tensor, completions: list[list[int]], eos_id: int, k: int,
                       atol: float = 0.0) -> list[int | None]:
    """Per completion, the first position whose token is outside the top-k (None: every token inside).

    Args:
        logits: (G, T', V) float32 logits of the group's completion positions (T' ≥ longest completion),
            as :func:`dgrpo.policy.scoring.group_logits` returns them.
        completions: G completion id lists (eos included when generated).
    """
    ids = pad_right(completions, eos_id).to(logits.device)  # (G, T)
    mask = completion_mask(ids, eos_id, [len(c) for c in completions])
    bad = outside_topk(logits[:, : ids.shape[1]], ids, mask, k, atol)  # (G, T)
    firsts = []
    for row in bad:
        where = row.nonzero()
        firsts.append(int(where[0]) if len(where) else None)
    return firsts
