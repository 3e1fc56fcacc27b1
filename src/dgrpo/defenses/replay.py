"""Exact seeded replay for homogeneous swarms (the paper's suggested fix, §4.1).

Sampling is reproducible per completion (:mod:`dgrpo.policy.sampling`): a completion is a
function of (weights, prompt, seed). A verifier with the same weights accepts a completion only
when seeded sampling reproduces it.

* ``fast``: one forward pass (the update's own) gives the logits at every position; with the
  claimed seed's Gumbel table each sampling decision is re-made and must pick the claimed token.
  A decision passes when the claimed token is in the top-k and its perturbed score
  ``logit/τ + g`` trails the best by at most ``atol`` (float32 noise between batched decoding and
  one forward pass is ~1e-4). The length must match too: generation stops exactly at the first
  eos or at ``max_new_tokens``.
* ``regenerate``: resample the completion from its seed token by token and compare exactly.
"""

from __future__ import annotations

from typing import Sequence

import torch

from dgrpo.defenses.base import ACCEPT, Verdict, register
from dgrpo.policy.sampling import SamplingParams, gumbel_table, sample


def replay_mismatch(logits: torch.Tensor, ids: list[int], seed: int, params: SamplingParams, eos_id: int,
                    atol: float = 1e-3) -> tuple[int, str] | None:
    """First position where seeded sampling would not produce ``ids``.

    Args:
        logits: (T', V) float32 logits of the completion's positions (T' ≥ len(ids)).
        ids: the claimed completion.

    Returns:
        None when every decision reproduces, else (position, reason).
    """
    n = len(ids)
    if n > params.max_new_tokens:
        return params.max_new_tokens, f"{n} tokens exceed max_new_tokens={params.max_new_tokens}"
    if eos_id in ids[:-1]:
        return ids.index(eos_id), "continues after eos"
    if ids[-1] != eos_id and n < params.max_new_tokens:
        return n, "stops before eos and before max_new_tokens"
    top_v, top_i = logits[:n].topk(params.top_k, dim=-1)  # (n, k)
    claimed = torch.tensor(ids, device=logits.device)[:, None]  # (n, 1)
    hit = top_i == claimed  # (n, k)
    inside = hit.any(dim=-1)
    if not inside.all():
        t = int((~inside).nonzero()[0])
        return t, f"token at position {t} outside top-{params.top_k}"
    if params.temperature == 0:
        score = top_v
    else:
        score = top_v / params.temperature + gumbel_table(seed, params.max_new_tokens, params.top_k)[:n].to(logits.device)
    chosen = torch.where(hit, score, torch.full_like(score, float("-inf"))).max(-1).values  # (n,) claimed token's score
    gap = score.max(-1).values - chosen  # (n,) ≥ 0
    bad = (gap > atol).nonzero()
    if len(bad):
        t = int(bad[0])
        return t, f"seeded sampling picks another token at position {t} (score gap {float(gap[t]):.3g})"
    return None


@register("replay")
class ReplayDefense:
    """Accept a completion only when its claimed seed reproduces it.

    Args:
        cfg: :class:`dgrpo.defenses.config.ReplayDefenseConfig`.
        run_cfg: for the agreed sampling strategy.
        policy: the receiver's policy (weights for ``regenerate``, tokenizer ids).
    """

    name = "replay"

    def __init__(self, cfg, run_cfg, policy, task):
        s = run_cfg.sampling
        self.params = SamplingParams(s.top_k, s.temperature, s.max_new_tokens)
        self.method, self.atol, self.action = cfg.method, cfg.atol, cfg.action
        self.policy, self.task = policy, task
        self.stage = "logits" if cfg.method == "fast" else "rollouts"

    def inspect(self, rollouts: Sequence, logits: torch.Tensor | None = None) -> list[Verdict]:
        eos = self.policy.tokenizer.eos_token_id
        if self.method == "fast":
            if logits is None:
                raise ValueError("fast replay needs the group's logits")
            out = []
            for g, r in enumerate(rollouts):
                if r.seed is None:
                    out.append(Verdict(False, self.name, "no sampling seed claimed", 0, self.action))
                    continue
                miss = replay_mismatch(logits[g], r.completion_ids, r.seed, self.params, eos, self.atol)
                out.append(ACCEPT if miss is None else Verdict(False, self.name, miss[1], miss[0], self.action))
            return out
        claimed = [r for r in rollouts if r.seed is not None]
        regenerated = iter(sample(self.policy.model, [r.prompt_ids for r in claimed], [r.seed for r in claimed],
                                  self.params, eos, self.policy.tokenizer.pad_token_id))
        out = []
        for r in rollouts:
            if r.seed is None:
                out.append(Verdict(False, self.name, "no sampling seed claimed", 0, self.action))
                continue
            again = next(regenerated)
            if again == list(r.completion_ids):
                out.append(ACCEPT)
                continue
            t = next((i for i, (a, b) in enumerate(zip(again, r.completion_ids)) if a != b), min(len(again), len(r.completion_ids)))
            out.append(Verdict(False, self.name, f"regeneration differs at position {t}", t, self.action))
        return out
