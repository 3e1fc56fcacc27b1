"""Attention for one new token per row, as two small matmuls instead of SDPA's flash kernel.

When the sampler decodes, every row brings one query token against a few hundred cached ones.
PyTorch's CPU flash-attention kernel is built for long queries; for a single query it ran at about
30 GFLOP/s in the profile (26 % of a sampling call once the linears ran on oneDNN). The textbook
form (Vaswani et al. 2017, Eq. 1),

    softmax(q Kᵀ · scale + mask) V,

as two batched matmuls over the key/value heads (the query heads of a GQA group stacked as rows,
no ``repeat_kv`` copy) takes about half the time (``BENCHMARKS.md``). The results agree with SDPA
to float32 rounding (about 4e-7).

:func:`decode_attention` registers itself with transformers' attention interface;
:func:`single_query_attention` switches a model to it while the context is open. Anything that is
not a plain single-query step (prefill, softcapping, attention sinks, attention dropout) goes to
transformers' own SDPA function unchanged.

A sampler's rows often share their first keys: every distinct prompt of a round or an evaluation
opens with the same system prompt and worked examples (196 of ~228 tokens in the README job), and
each row's cache holds its own copy of them. With ``shared=S`` (:func:`single_query_attention`) the
scores against those S keys are one matmul of every row's queries with row 0's copy
(``(Hk, B·g, D) @ (Hk, D, S)``), reading those keys once instead of B times; the scores against
the other keys, the softmax and the weighted sum of values are unchanged. Each score is the same
head_dim-term dot product either way, summed in the order the matmul kernel picks for the shape:
equal to float32 rounding (``tests/policy/test_decode_attention.py``; bitwise for SmolLM2's
64-wide heads on this project's CPU, about 3e-7 relative for the tests' tiny model).
"""

from __future__ import annotations

import contextlib
from contextvars import ContextVar
from typing import Iterator

import torch
from transformers import AttentionInterface, PreTrainedModel
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

NAME = "dgrpo_single_query"
_PASS_THROUGH = ("softcap", "s_aux", "sinks", "position_bias", "output_attentions")
_SHARED: ContextVar[int] = ContextVar("dgrpo_shared_keys", default=0)  # leading keys every row holds alike


def decode_attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None, **kwargs):
    """transformers attention function: matmul attention for one query token, SDPA otherwise.

    Args:
        query: (B, Hq, q, D); key / value: (B, Hk, L, D), Hq a multiple of Hk.
        attention_mask: None, or SDPA's (B, 1, q, L) bool mask (True = attend) or additive float mask.

    Returns:
        ((B, q, Hq, D) attention output, None), as transformers' SDPA function returns it.
    """
    per_head_mask = attention_mask is not None and attention_mask.shape[1] != 1
    if query.shape[2] != 1 or dropout or per_head_mask or any(kwargs.get(k) for k in _PASS_THROUGH):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    b, hq, _, d = query.shape
    hk = key.shape[1]
    q = query.reshape(b, hk, hq // hk, d)  # the query heads of one key/value head become rows
    s = _SHARED.get()
    if 0 < s < key.shape[2] and b > 1:  # the shared keys once for all rows (module docstring)
        head = torch.matmul(q.transpose(0, 1).reshape(hk, b * (hq // hk), d), key[0, :, :s].transpose(-1, -2))
        scores = torch.cat([head.view(hk, b, hq // hk, s).transpose(0, 1),
                            torch.matmul(q, key[:, :, s:].transpose(-1, -2))], dim=-1)  # (B, Hk, Hq/Hk, L)
    else:
        scores = torch.matmul(q, key.transpose(-1, -2))  # (B, Hk, Hq/Hk, L)
    scores.mul_(d**-0.5 if scaling is None else scaling)
    if attention_mask is not None:
        if attention_mask.dtype == torch.bool:
            scores.masked_fill_(~attention_mask, float("-inf"))
        else:
            scores.add_(attention_mask)
    out = torch.matmul(scores.softmax(-1), value)  # (B, Hk, Hq/Hk, D)
    return out.reshape(b, hq, 1, d).transpose(1, 2).contiguous(), None


AttentionInterface.register(NAME, decode_attention)
ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, sdpa_mask)  # same masks as SDPA


@contextlib.contextmanager
def single_query_attention(model: PreTrainedModel, shared: int = 0) -> Iterator[None]:
    """Use :func:`decode_attention` in ``model`` while the context is open (SDPA models only).

    Args:
        shared: the first ``shared`` cached keys and values are the same in every row of every
            single-query step inside the context (a common prompt prefix, copied to each row), so
            their scores are computed once for all rows (module docstring); 0: no such prefix.
    """
    if getattr(model.config, "_attn_implementation", None) != "sdpa":
        yield
        return
    with attention_implementation(model, NAME, _SHARED, shared):
        yield


@contextlib.contextmanager
def attention_implementation(model: PreTrainedModel, name: str, var: ContextVar, value) -> Iterator[None]:
    """Run ``model``'s attention through the registered implementation ``name`` with ``var`` set to ``value`` while
    the context is open; the previous implementation and value come back on exit (also used by
    :func:`dgrpo.policy.packing.block_attention`)."""
    config = model.config
    saved = config._attn_implementation
    config._attn_implementation = name
    token = var.set(value)
    try:
        yield
    finally:
        var.reset(token)
        config._attn_implementation = saved
