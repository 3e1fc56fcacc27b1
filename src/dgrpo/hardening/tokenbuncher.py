"""One TokenBuncher hardening step (Feng et al. 2025): RL with reward −H on harmful requests plus
the token noiser (reward and noiser are the pure functions of :mod:`dgrpo.hardening.entropy`).

For each request p the model samples G responses a_1..a_G; one forward pass gives the logits
along every response, from which

    r_i  = −H_i = −(1/|a_i|) Σ_t H(π(·|p, a_i<t))                 (entropy reward, detached)
    A_i  = (r_i − mean r) / std r                                  (group-relative, GRPO)
    L_pg = −(1/G) Σ_i A_i (1/|a_i|) Σ_t log π(a_it | p, a_i<t)     (GRPO, one update per generation)
    L_tn = token-noiser cross-entropy towards q (target = the sampled token a_it, σ)
    L    = mean over requests of L_pg + λ · L_tn

so the responses the model is most certain about are reinforced, and the mass it keeps off the
chosen tokens is spread over noise-ranked tokens.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Sequence

import torch

from dgrpo.grpo.advantages import group_advantages
from dgrpo.hardening.entropy import entropy_reward, response_entropy, token_noiser_loss
from dgrpo.policy.scoring import completion_mask, group_logits, pad_right, token_logprobs


@dataclass
class HardenStats:
    """What one hardening step did: mean response entropy (nats, before the step), losses, grad norm,
    and each completion's entropy H_i (its reward is −H_i), group by group."""

    entropy: float
    pg_loss: float
    noiser_loss: float
    grad_norm: float
    entropies: list[list[float]]


def harden_step(model, optimizer: torch.optim.Optimizer, groups: Sequence[tuple[list[int], list[list[int]]]],
                eos_id: int, pad_id: int, *, sigma: float, noiser_weight: float, max_grad_norm: float = 1.0,
                generator: torch.Generator | None = None) -> HardenStats:
    """One optimizer step of entropy-reward RL + token noiser over ``groups``.

    Args:
        groups: (prompt ids, G completion id lists) per request.
        sigma / noiser_weight: σ and λ of the token noiser (λ = 0 or σ = 0: RL only).

    Returns:
        :class:`HardenStats`.

    Raises:
        ValueError: no groups, or a group with an empty completion.
    """
    if not groups:
        raise ValueError("harden_step needs at least one group")
    model.train()
    optimizer.zero_grad(set_to_none=True)
    ents, pgs, tns = [], [], []
    for prompt, completions in groups:
        logits = group_logits(model, prompt, completions, pad_id)  # (G, T, V)
        ids = pad_right(completions, pad_id).to(logits.device)  # (G, T)
        mask = completion_mask(ids, eos_id, [len(c) for c in completions])  # (G, T)
        reward = entropy_reward(logits, mask)  # (G,) r_i = −H_i
        ent = -reward  # (G,) H_i
        adv = group_advantages(reward.detach(), [0] * len(completions)).to(logits.device)  # (G,)
        logp = token_logprobs(logits, ids)  # (G, T)
        pg = -(adv * (logp * mask).sum(1) / mask.sum(1)).mean()
        loss = pg
        tn = torch.zeros(())
        if noiser_weight > 0 and sigma > 0:
            tn = token_noiser_loss(logits, ids, mask, sigma, generator)
            loss = loss + noiser_weight * tn
        (loss / len(groups)).backward()
        ents.append(ent.detach().tolist())
        pgs.append(float(pg.detach()))
        tns.append(float(tn.detach()))
        del logits
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return HardenStats(statistics.fmean(h for grp in ents for h in grp), statistics.fmean(pgs), statistics.fmean(tns),
                       float(norm), ents)


@torch.no_grad()
def mean_response_entropy(model, groups: Sequence[tuple[list[int], list[list[int]]]], eos_id: int, pad_id: int) -> float:
    """Mean per-token entropy (nats) of the model along given responses (no grad)."""
    model.eval()
    vals = []
    for prompt, completions in groups:
        logits = group_logits(model, prompt, completions, pad_id)
        ids = pad_right(completions, pad_id).to(logits.device)
        vals += response_entropy(logits, completion_mask(ids, eos_id, [len(c) for c in completions])).tolist()
    return statistics.fmean(vals)
