"""Several groups' log-probs from one forward pass: more rows per GEMM, attention by block.

:func:`dgrpo.policy.scoring.group_token_logprobs` runs one group per forward: its prompt's rest (behind
the shared prefix) then its G completions packed behind the prompt's last token, ~350 rows. The
weight-gradient GEMMs of its backward reduce over those rows only and reached about 2/3 of the
GEMM peak (``BENCHMARKS.md``). :func:`groups_token_logprobs` packs the prompt rests and completions of
several groups into one sequence, so every linear layer (forward, ∂x and ∂W) runs once over all
their rows, and the caller back-propagates their summed loss once.

Attention does not grow with the packing: while :func:`block_attention` is open, each group's
rows attend, through their own SDPA call, to the shared prefix and to their own group only (its
prompt rest causally; each completion to the whole prompt and to its own earlier tokens, the
block-diagonal causal mask of Krell et al. 2021), so the attention work is each group's as before,
and no (rows × rows) mask over the whole sequence is built.

Every log-prob is the same sum of the same products as the per-group path, in another order
(other GEMM shapes, the prompt rest and the completions in one call): equal to float32 rounding
(``tests/grpo/test_multi_group.py``).
"""

from __future__ import annotations

import contextlib
from contextvars import ContextVar
from typing import Iterator, Sequence

import torch
from transformers import AttentionInterface, PreTrainedModel
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

from dgrpo.policy.decode_attention import attention_implementation
from dgrpo.policy.onednn import Kernel, kernel_linears
from dgrpo.policy.prefix import SharedPrefix

NAME = "dgrpo_blocks"
# per block: (first row, end row, its (rows, prefix + rows) additive mask), rows of the packed sequence
_BLOCKS: ContextVar[list[tuple[int, int, torch.Tensor]] | None] = ContextVar("dgrpo_blocks", default=None)


def blocks_attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None, **kwargs):
    """transformers attention function: each block of query rows against the leading (prefix) keys and
    its own block's keys, one SDPA call per block (:func:`block_attention`).

    Args:
        query: (1, Hq, N, D); key / value: (1, Hk, S + N, D), the S prefix keys first.
        attention_mask: ignored (the blocks carry their masks).

    Returns:
        ((1, N, Hq, D) attention output, None), as transformers' SDPA function returns it.
    """
    blocks = _BLOCKS.get()
    s = key.shape[2] - query.shape[2]
    outs = []
    for start, end, mask in blocks:
        k = torch.cat([key[:, :, :s], key[:, :, s + start : s + end]], dim=2)
        v = torch.cat([value[:, :, :s], value[:, :, s + start : s + end]], dim=2)
        out, _ = sdpa_attention_forward(module, query[:, :, start:end], k, v, mask[None, None], dropout=dropout,
                                        scaling=scaling, **kwargs)
        outs.append(out)  # (1, rows, Hq, D)
    return torch.cat(outs, dim=1), None


AttentionInterface.register(NAME, blocks_attention)
ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, lambda *args, **kwargs: None)  # the blocks carry their masks


@contextlib.contextmanager
def block_attention(model: PreTrainedModel, blocks: list[tuple[int, int, torch.Tensor]]) -> Iterator[None]:
    """Use :func:`blocks_attention` with ``blocks`` in ``model`` while the context is open."""
    with attention_implementation(model, NAME, _BLOCKS, blocks):
        yield


def _block(rest: int, lengths: list[int], prefix: int, dtype: torch.dtype, device) -> torch.Tensor:
    """The additive mask of one group's rows: ``rest`` prompt positions, then its completions packed.

    Rows: the prompt rest, then the completions; keys: the ``prefix`` shared positions, then the
    same rows. A prompt row sees the prefix and the rest up to itself; a completion row sees the
    prefix, the whole rest and its own completion up to itself.
    """
    n = sum(lengths)
    segment = torch.repeat_interleave(torch.arange(len(lengths), device=device), torch.tensor(lengths, device=device))
    offset = torch.cat([torch.arange(k, device=device) for k in lengths])
    visible = torch.zeros(rest + n, prefix + rest + n, dtype=torch.bool, device=device)
    visible[:, :prefix] = True
    visible[:rest, prefix : prefix + rest] = torch.ones(rest, rest, dtype=torch.bool, device=device).tril()
    visible[rest:, prefix : prefix + rest] = True
    visible[rest:, prefix + rest :] = (segment[:, None] == segment[None, :]) & (offset[:, None] >= offset[None, :])
    return torch.zeros(visible.shape, dtype=dtype, device=device).masked_fill_(~visible, torch.finfo(dtype).min)


def packed_rows(lengths: Sequence[int], prompt_len: int, prefix_len: int) -> int:
    """Rows a group takes in :func:`groups_token_logprobs`: its prompt after the prefix, but the last
    token, and one per completion token."""
    return prompt_len - 1 - prefix_len + sum(lengths)


def groups_token_logprobs(model: PreTrainedModel, groups: Sequence[tuple[list[int], list[list[int]]]],
                          prefix: SharedPrefix | None = None, kernel: Kernel = "onednn") -> list[torch.Tensor]:
    """log π(completions[g][t] | prompt, completions[g][:t]) of several groups, from one forward pass.

    The same values as :func:`dgrpo.policy.scoring.group_token_logprobs` per group, to float32
    rounding (module docstring). The model's layers must all be plain attention
    (:func:`dgrpo.policy.kv_cache.plain_layers`).

    Args:
        groups: (prompt, completions) per group; prompts non-empty, completions non-empty.
        prefix: a prefix of every prompt already run by ``model`` (shorter than each), or None.
        kernel: the float32 linear kernel of the forward and its backward
            (:func:`dgrpo.policy.onednn.kernel_linears`; the update passes ``grpo.update_kernel``'s).

    Returns:
        Per group, (G, T) log-probabilities, T = its longest completion, 0 past each completion's end;
        differentiable when grad is enabled.

    Raises:
        ValueError: an empty prompt or completion; a ``prefix`` that is not a proper prefix of a prompt.
    """
    if not groups or any(not p or not cs or any(not c for c in cs) for p, cs in groups):
        raise ValueError("groups_token_logprobs needs groups with a non-empty prompt and non-empty completions")
    if prefix is not None and not all(prefix.matches(p) for p, _ in groups):
        raise ValueError("groups_token_logprobs: prefix must be the start of every prompt, shorter than it")
    device, dtype = next(model.parameters()).device, next(model.parameters()).dtype
    s = len(prefix.ids) if prefix is not None else 0
    ids: list[int] = []
    positions: list[int] = []
    keep: list[int] = []  # the rows whose logits score a completion token
    blocks = []
    for prompt, completions in groups:
        lengths, start, rest = [len(c) for c in completions], len(ids), list(prompt[s:-1])
        ids += rest + [t for c in completions for t in [prompt[-1], *c[:-1]]]
        positions += list(range(s, len(prompt) - 1)) + [len(prompt) - 1 + o for k in lengths for o in range(k)]
        keep += range(start + len(rest), len(ids))
        blocks.append((start, len(ids), _block(len(rest), lengths, s, dtype, device)))
    cache = prefix.cache(model) if prefix is not None else None
    with kernel_linears(model, kernel), block_attention(model, blocks):
        out = model(input_ids=torch.tensor([ids], device=device), position_ids=torch.tensor([positions], device=device),
                    cache=cache, use_cache=cache is not None,
                    logits_to_keep=torch.tensor(keep, device=device)).logits[0].float()  # (rows kept, V)
    taken = torch.tensor([t for _, cs in groups for c in cs for t in c], device=device)[:, None]
    rows = torch.log_softmax(out, dim=-1).gather(-1, taken).squeeze(-1)  # (rows kept,)
    logps, at = [], 0
    for _, completions in groups:
        lengths = [len(c) for c in completions]
        n = sum(lengths)
        segment = torch.repeat_interleave(torch.arange(len(lengths), device=device), torch.tensor(lengths, device=device))
        offset = torch.cat([torch.arange(k, device=device) for k in lengths])
        logp = rows.new_zeros(len(completions), max(lengths))
        logp[segment, offset] = rows[at : at + n]
        logps.append(logp)
        at += n
    return logps
