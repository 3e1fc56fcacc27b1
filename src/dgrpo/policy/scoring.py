"""Per-token log-probabilities of given completion ids, one forward pass per group.

All completions of a group share their prompt, so the prompt is run once and the G completions
attend to its KV cache: the forward (and backward) cost of the prompt is paid once per group
instead of G times, and the completions are packed into one sequence so no padding position is
computed (:func:`group_logits`). The logits this returns also serve the defenses that inspect them
(top-k support, replay), so checking costs no extra forward pass.
"""

from __future__ import annotations

import copy

import torch
from transformers import DynamicCache, PreTrainedModel
from transformers.cache_utils import DynamicLayer

from dgrpo.policy.onednn import Kernel, kernel_linears, onednn_linears
from dgrpo.policy.prefix import SharedPrefix, common_prefix


def pad_right(completions: list[list[int]], pad_id: int) -> torch.Tensor:
    """Right-pad completions to a (G, T) long tensor, T = the longest completion."""
    width = max(len(c) for c in completions)
    out = torch.full((len(completions), width), pad_id, dtype=torch.long)
    for row, ids in enumerate(completions):
        out[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
    return out


def completion_mask(ids: torch.Tensor, eos_id: int, lengths: list[int] | None = None) -> torch.Tensor:
    """Mask of real completion tokens: everything up to and including the first eos.

    Works when pad == eos: ``x y <eos> <pad> <pad>`` → ``[1, 1, 1, 0, 0]``. A completion cut at
    the length limit has no eos, so when it is padded with eos only ``lengths`` can tell the first
    pad from a real eos: pass them whenever they are known.

    Args:
        ids: (G, T) completion ids.
        lengths: real length of each completion (None: infer from the first eos only).

    Returns:
        (G, T) float mask.
    """
    is_eos = (ids == eos_id).long()
    eos_before = is_eos.cumsum(dim=1) - is_eos  # number of eos strictly before t
    mask = eos_before == 0
    if lengths is not None:
        positions = torch.arange(ids.shape[1], device=ids.device)[None, :]
        mask &= positions < torch.tensor(lengths, device=ids.device)[:, None]
    return mask.float()


def group_logits(model: PreTrainedModel, prompt: list[int], completions: list[list[int]], pad_id: int,
                 prefix: SharedPrefix | None = None, hidden: list | None = None) -> torch.Tensor:
    """Next-token logits at every completion position of a group.

    ``logits[g, t]`` is the distribution that produced ``completions[g][t]``: for t = 0 it comes
    from the last prompt position (prompt ``A B C``, completion ``D E F`` → D is scored by the
    logits at C), for t > 0 from completion position t − 1.

    The prompt (all but its last token) runs once; the G completions, each behind a copy of the
    prompt's last token, are packed into one sequence whose attention mask lets every token see the
    prompt and the earlier tokens of its own completion only (block-diagonal causal mask; the
    sequence-packing of Krell et al. 2021). No padding position is computed, the prompt is not
    repeated G times and the language-model head runs on completion positions only. Groups where
    packing costs more FLOPs than it saves (completions of nearly equal length, or so long that the
    dense packed attention dominates), and models with sliding-window or other non-plain attention
    layers, take the padded path instead: prompt once, its cache repeated for the G right-padded
    completions. Linear layers run on oneDNN
    (:mod:`dgrpo.policy.onednn`). With ``prefix`` (the start of the prompt, run once for several
    groups: :class:`dgrpo.policy.prefix.SharedPrefix`) only the rest of the prompt runs here, behind
    the prefix's keys and values; the same logits up to float32 rounding.

    Args:
        prompt: the prompt ids shared by the group (length L ≥ 1).
        completions: G completion id lists (each length ≥ 1).
        prefix: a prefix of ``prompt`` already run by ``model`` (shorter than the prompt), or None.
        hidden: an empty list, to receive per completion its (len, H) bf16 CPU last-layer hidden states (the
            output embedding's input behind each logit row: what a TOPLOC proof commits to,
            :mod:`dgrpo.policy.proofs`), from this same forward; None: not kept.

    Returns:
        (G, T, V) float32 logits, T = longest completion; rows past a completion's end are padding
        (zeros on the packed path). Differentiable when grad is enabled.

    Raises:
        ValueError: empty prompt or empty completion; a ``prefix`` that is not a proper prefix of ``prompt``.
    """
    if not prompt or not completions or any(len(c) == 0 for c in completions):
        raise ValueError("group_logits needs a non-empty prompt and non-empty completions")
    if prefix is not None and not prefix.matches(prompt):
        raise ValueError("group_logits: prefix must be the start of the prompt, shorter than it (SharedPrefix.ids)")
    seen: list[torch.Tensor] = []  # the output embedding's input, per call (with ``hidden``)
    hook = None if hidden is None else model.get_output_embeddings().register_forward_pre_hook(
        lambda _module, args: seen.append(args[0].detach().to(torch.bfloat16).cpu()))
    lengths = [len(c) for c in completions]
    try:
        with onednn_linears(model):
            if _packable(model, len(prompt), lengths):
                logits = _packed_logits(model, prompt, completions, prefix)
                rows = list(seen[-1][0].split(lengths)) if hook else []  # (1, N, H): the last call
            else:
                logits = _padded_logits(model, prompt, completions, pad_id, prefix)
                # the last calls: the prompt's last position (1, 1, H), then (G, T − 1, H) when T > 1
                first = seen[-2 if max(lengths) > 1 else -1][0] if hook else None  # (1, H)
                rows = [torch.cat([first, seen[-1][g, : n - 1]]) if n > 1 else first for g, n in enumerate(lengths)] \
                    if hook else []
    finally:
        if hook is not None:
            hook.remove()
    if hidden is not None:
        hidden.extend(rows)
    return logits


def _packable(model: PreTrainedModel, prompt_len: int, lengths: list[int]) -> bool:
    """Pack when every layer is plain full attention and packing costs fewer FLOPs than padding.

    A position costs 2 × parameters (its matmuls) + 4 × layers × heads × head_dim × the positions
    it attends to. Padded: G × T positions over the prompt and T completion positions; packed:
    N = Σ lengths positions over the prompt and all N (the mask is dense).
    """
    layers = DynamicCache(config=model.config).layers
    if not layers or any(type(layer) is not DynamicLayer for layer in layers):
        return False
    text = model.config.get_text_config()
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    per_context = 4 * text.num_hidden_layers * text.num_attention_heads * head_dim
    matmul = 2 * model.num_parameters()
    n, width = sum(lengths), max(lengths)
    packed = n * (matmul + per_context * (prompt_len + n))
    padded = len(lengths) * width * (matmul + per_context * (prompt_len + width))
    return packed <= padded


def group_token_logprobs(model: PreTrainedModel, prompt: list[int], completions: list[list[int]], pad_id: int,
                         prefix: SharedPrefix | None = None, kernel: Kernel = "onednn") -> torch.Tensor:
    """log π(completions[g][t] | prompt, completions[g][:t]) of a group: :func:`token_logprobs` of
    :func:`group_logits`, without the (G, T, V) logits on the packed path; its linears on ``kernel``
    (:func:`dgrpo.policy.onednn.kernel_linears`: the update passes ``grpo.update_kernel``'s).

    On the packed path the log-softmax and the gather run on the N = Σ lengths computed rows of logits
    only, and their (N,) results are placed in a (G, T) tensor: no (G, T, V) tensor is zero-filled,
    scattered into, or log-softmaxed over its padding rows, forward or backward (for a README round's
    group, 512 rows of 49,152 logits for ~310 real ones). Every real position's value and gradient is
    the same row computation as before, so equal bit for bit; padding positions hold 0 here (the
    log-probability of the pad token under zero logits there): mask them, as before.

    Returns:
        (G, T) log-probabilities, T = the longest completion; differentiable when grad is enabled.

    Raises:
        ValueError: as :func:`group_logits`.
    """
    if not prompt or not completions or any(len(c) == 0 for c in completions):
        raise ValueError("group_logits needs a non-empty prompt and non-empty completions")
    if prefix is not None and not prefix.matches(prompt):
        raise ValueError("group_logits: prefix must be the start of the prompt, shorter than it (SharedPrefix.ids)")
    lengths = [len(c) for c in completions]
    with kernel_linears(model, kernel):
        if not _packable(model, len(prompt), lengths):
            logits = _padded_logits(model, prompt, completions, pad_id, prefix)
            return token_logprobs(logits, pad_right(completions, pad_id).to(logits.device))
        out, segment, offset = _packed_rows(model, prompt, completions, prefix)  # (N, V), (N,), (N,)
    taken = torch.tensor([t for c in completions for t in c], device=out.device)[:, None]  # (N, 1)
    rows = torch.log_softmax(out, dim=-1).gather(-1, taken).squeeze(-1)  # (N,)
    logp = rows.new_zeros(len(completions), max(lengths))
    logp[segment, offset] = rows
    return logp


def _packed_logits(model: PreTrainedModel, prompt: list[int], completions: list[list[int]],
                   prefix: SharedPrefix | None) -> torch.Tensor:
    out, segment, offset = _packed_rows(model, prompt, completions, prefix)
    logits = out.new_zeros(len(completions), max(len(c) for c in completions), out.shape[-1])
    logits[segment, offset] = out
    return logits


def _packed_rows(model: PreTrainedModel, prompt: list[int], completions: list[list[int]],
                 prefix: SharedPrefix | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(N, V) float32 logits of the packed completion positions, and each row's completion and offset in it."""
    device = next(model.parameters()).device
    lengths = [len(c) for c in completions]
    g, n, past = len(completions), sum(lengths), len(prompt) - 1
    done = len(prefix.ids) if prefix is not None else 0  # prompt positions already in the cache
    cache = prefix.cache(model) if prefix is not None else DynamicCache(config=model.config) if past else None
    if past > done:
        model(input_ids=torch.tensor([prompt[done:-1]], device=device), cache=cache, use_cache=True, logits_to_keep=1)
    # Completion g enters as [last prompt token] + its ids but the last, at positions past, past + 1, ...
    ids = torch.tensor([t for c in completions for t in [prompt[-1], *c[:-1]]], device=device)[None]  # (1, N)
    segment = torch.repeat_interleave(torch.arange(g, device=device), torch.tensor(lengths, device=device))  # (N,)
    offset = torch.cat([torch.arange(k, device=device) for k in lengths])  # (N,) index inside its completion
    own = (segment[:, None] == segment[None, :]) & (offset[:, None] >= offset[None, :])  # (N, N)
    visible = torch.cat([own.new_ones(n, past), own], dim=1)  # (N, past + N): the prompt, then its own prefix
    dtype = next(model.parameters()).dtype
    mask = torch.zeros(visible.shape, dtype=dtype, device=device).masked_fill_(~visible, torch.finfo(dtype).min)
    out = model(input_ids=ids, position_ids=(offset + past)[None], attention_mask=mask[None, None], cache=cache,
                use_cache=cache is not None).logits[0].float()  # (N, V)
    return out, segment, offset


def _padded_logits(model: PreTrainedModel, prompt: list[int], completions: list[list[int]], pad_id: int,
                   prefix: SharedPrefix | None) -> torch.Tensor:
    device = next(model.parameters()).device
    g = len(completions)
    cache = prefix.cache(model) if prefix is not None else DynamicCache(config=model.config)
    done = len(prefix.ids) if prefix is not None else 0
    prompt_ids = torch.tensor([prompt[done:]], dtype=torch.long, device=device)  # (1, L - done)
    first = model(input_ids=prompt_ids, cache=cache, use_cache=True, logits_to_keep=1).logits[:, -1:, :]  # (1, 1, V)
    cache.batch_repeat_interleave(g)  # (1, …) → (G, …): the prompt is computed once
    comp = pad_right(completions, pad_id).to(device)  # (G, T)
    # Right padding needs no attention mask: causal attention never lets a real token see it.
    rest = model(input_ids=comp[:, :-1], cache=cache, use_cache=True).logits if comp.shape[1] > 1 else None
    first = first.expand(g, 1, first.shape[-1])
    logits = first if rest is None else torch.cat([first, rest], dim=1)  # (G, T, V)
    return logits.float()


def token_logprobs(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """log π(ids[g, t] | prefix) from logits.

    Args:
        logits: (G, T, V); ids: (G, T).

    Returns:
        (G, T) log-probabilities (natural log).
    """
    return torch.log_softmax(logits, dim=-1).gather(-1, ids[..., None]).squeeze(-1)


def score(model: PreTrainedModel, prompt: list[int], completions: list[list[int]], pad_id: int) -> torch.Tensor:
    """Per-token log-probs of given completion ids under ``model`` (no grad).

    Returns:
        (G, T) log-probs; positions past each completion's end hold log-probs of padding.
    """
    with torch.no_grad():
        logits = group_logits(model, prompt, completions, pad_id)
        return token_logprobs(logits, pad_right(completions, pad_id).to(logits.device))


@torch.no_grad()
def completion_stats(model: PreTrainedModel, prompts: list[list[int]], completions: list[list[int]],
                     max_tokens: int = 1024) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Log-probability and entropy at every token of many (prompt, completion) pairs, no grad.

    The prompts' common prefix (a system prompt, worked examples) runs once; each pair's
    ``prompt rest + completion`` then runs behind a copy of its cache, right-padded (causal
    attention never lets a real token see padding) in batches of about ``max_tokens`` positions,
    shortest first. The same numbers as :func:`group_logits` per pair up to float32 rounding
    (other matmul shapes), at a fraction of the cost when the prompts share most of their tokens
    (evaluation prompts: 196 of ~228 tokens).

    Args:
        prompts, completions: one (prompt, completion) pair per index; prompts non-empty,
            completions non-empty.

    Returns:
        Per pair, (log π(x_t | x_<t), H(π(· | x_<t))) for t over the completion: two (T,) float32
        tensors, natural log.

    Raises:
        ValueError: lengths differ, or a prompt or completion is empty.
    """
    if len(prompts) != len(completions) or any(not p for p in prompts) or any(not c for c in completions):
        raise ValueError("completion_stats needs one non-empty prompt per non-empty completion")
    device = next(model.parameters()).device
    shared = common_prefix(prompts)  # (0 for one distinct prompt)
    rows = [list(p[shared:]) + list(c[:-1]) for p, c in zip(prompts, completions)]
    out: list = [None] * len(rows)
    order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
    with onednn_linears(model):
        prefix = None
        if shared:
            prefix = DynamicCache(config=model.config)
            model(input_ids=torch.tensor([prompts[0][:shared]], device=device), cache=prefix, use_cache=True,
                  logits_to_keep=1)
        start = 0
        while start < len(order):
            stop = start + 1
            while stop < len(order) and (stop - start + 1) * len(rows[order[stop]]) <= max_tokens:
                stop += 1
            batch = order[start:stop]
            width = len(rows[batch[-1]])
            ids = torch.zeros((len(batch), width), dtype=torch.long, device=device)
            for r, i in enumerate(batch):
                ids[r, : len(rows[i])] = torch.tensor(rows[i], device=device)
            cache = None
            if prefix is not None:  # a copy of the prefix's cache per row (the forward appends to it)
                cache = copy.deepcopy(prefix)
                cache.batch_repeat_interleave(len(batch))
            positions = torch.arange(shared, shared + width, device=device)[None].expand(len(batch), -1)
            logits = model(input_ids=ids, position_ids=positions, cache=cache, use_cache=cache is not None).logits
            for r, i in enumerate(batch):
                first = len(prompts[i]) - shared - 1  # the last prompt position scores the first completion token
                logp = torch.log_softmax(logits[r, first : first + len(completions[i])].float(), dim=-1)  # (T, V)
                taken = torch.tensor(completions[i], device=device)[:, None]
                out[i] = (logp.gather(-1, taken).squeeze(-1), -(logp.exp() * logp).sum(-1))
            start = stop
    return out
