"""Scoring given completions behind the prompts a sampler has just prefilled, so their prompts run once.

An evaluation samples completions of its validation prompts and, for the drift metrics, scores the
reference completions of the same prompts under the same weights
(:mod:`dgrpo.training.evaluate`). Scored apart (:func:`dgrpo.policy.scoring.completion_stats`),
every prompt's positions after the common prefix run a second time. Here the scoring runs inside
the sampling call (:func:`dgrpo.policy.sampling.sample`'s ``rescore``), right after its prefill:
each completion's first token is scored by the logits the prefill computed at its prompt's last
position, and its other tokens by one forward of the completion alone, behind a copy of its prompt's
rows of the prefill cache. The same numbers as :func:`~dgrpo.policy.scoring.completion_stats` up to
float32 rounding (other batch shapes); only the completion positions are computed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from transformers import DynamicCache, PreTrainedModel


@dataclass
class Rescore:
    """Completions to score during a sampling call, behind that call's prefill of their prompts.

    Attributes:
        prompts, completions: one (prompt ids, completion ids) pair per index; every prompt is one of
            the call's prompts, every completion non-empty.
        stats: receives, per pair, (log π(x_t | x_<t), H(π(· | x_<t))) over the completion's tokens:
            two (T,) float32 tensors in nats, as :func:`dgrpo.policy.scoring.completion_stats` gives.
    """

    prompts: list[list[int]]
    completions: list[list[int]]
    stats: list = field(default_factory=list)


def stats_behind_prefill(model: PreTrainedModel, prefill: DynamicCache, mask: torch.Tensor, positions: torch.Tensor,
                         first_logits: torch.Tensor, rows: list[int], completions: list[list[int]],
                         max_tokens: int = 1024, max_rows: int = 32) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Log-probability and entropy at every token of completions whose prompts ``prefill`` holds (no grad).

    Completions run shortest first in right-padded batches of at most ``max_rows`` rows and about
    ``max_tokens`` positions (causal attention never lets a real token see the padding), each batch
    behind copies of its prompts' cache rows; ``prefill`` itself is left as it is.

    Args:
        prefill: cache of plain full-attention layers holding D prompts, (D, heads, W, head_dim) per layer.
        mask, positions: (D, W) long, the prefill's attention mask (0 = padding) and position ids.
        first_logits: (D, V) float32 logits at each prompt's last position.
        rows: the prefill row of each completion's prompt.
        completions: non-empty token id lists, one per entry of ``rows``.

    Returns:
        Per completion, (log-probs, entropies): two (T,) float32 tensors, natural log.

    Raises:
        ValueError: ``rows`` and ``completions`` differ in length, or a completion is empty.
    """
    if len(rows) != len(completions) or any(not c for c in completions):
        raise ValueError("stats_behind_prefill needs one prefill row per non-empty completion")
    device = first_logits.device
    out: list = [None] * len(completions)
    order = sorted(range(len(completions)), key=lambda i: len(completions[i]))
    start = 0
    while start < len(order):
        stop = start + 1
        while (stop < len(order) and stop - start < max_rows
               and (stop - start + 1) * (len(completions[order[stop]]) - 1) <= max_tokens):
            stop += 1
        batch = order[start:stop]
        start = stop
        src = torch.tensor([rows[i] for i in batch], device=device)
        width = len(completions[batch[-1]]) - 1  # input: each completion but its last token
        rest = None
        if width:
            ids = torch.zeros((len(batch), width), dtype=torch.long, device=device)
            for r, i in enumerate(batch):
                ids[r, : len(completions[i]) - 1] = torch.tensor(completions[i][:-1], device=device)
            cache = DynamicCache(config=model.config)
            for k, layer in enumerate(prefill.layers):
                cache.update(layer.keys[src], layer.values[src], k)
            attention = torch.cat([mask[src], mask.new_ones(len(batch), width)], dim=1)  # (b, W + width)
            pos = positions[src][:, -1:] + 1 + torch.arange(width, device=device)[None]  # (b, width)
            rest = model(input_ids=ids, attention_mask=attention, position_ids=pos, cache=cache,
                         use_cache=True).logits  # (b, width, V)
        for r, i in enumerate(batch):
            steps = [first_logits[rows[i]][None]] + ([rest[r, : len(completions[i]) - 1].float()] if rest is not None
                                                     else [])
            logp = torch.log_softmax(torch.cat(steps), dim=-1)  # (T, V)
            taken = torch.tensor(completions[i], device=device)[:, None]
            out[i] = (logp.gather(-1, taken).squeeze(-1), -(logp.exp() * logp).sum(-1))
    return out
