"""The token loop of :func:`dgrpo.policy.sampling.sample`: one stream of requests, a batch that stays full.

Every distinct prompt is prefilled once (its common prefix once for all). Up to ``rows`` requests
decode together; when a row finishes and requests are still waiting, the next one takes the row at
once (continuous batching; Yu et al. 2022, "Orca"): its prompt's keys and values are copied from
the prefill cache into the row, so a refill costs a copy, no forward, and the row's first token is
chosen from the logits its prompt's prefill already produced. When nothing waits, finished rows
leave the batch by moving (:meth:`~dgrpo.policy.kv_cache.PreallocatedCache.drop_rows`).

Cache layout of one row, over the cache's positions ``[0, L)``:

    [common prefix | masked: padding or a former occupant's keys | own prompt rest | own tokens]

The common prefix is the same in every row (the same tokens at the same positions), so a refilled
row keeps it; everything between it and the row's own prompt is masked out, so no row ever attends
to another request's keys. A refilled row's prompt ends at the current length L; when L reaches
the capacity, the positions that every live row masks are cut out
(:meth:`~dgrpo.policy.kv_cache.PreallocatedCache.drop_columns`; at most once per ``max_new_tokens``
steps). Keys carry their rotary positions, so where a row's keys sit changes only the order
attention sums in: a completion depends on its (prompt, seed, temperature) alone, up to the same
float32 rounding noise that padding already causes (``tests/policy/test_stream.py`` compares the
tokens with and without refill).

Without refill (``rows`` ≥ requests) this is exactly the sampler of issue 20: the same operations
in the same order.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache, PreTrainedModel

from dgrpo.policy.kv_cache import PreallocatedCache, supports


def choose_rows(logits: torch.Tensor, noise: torch.Tensor, temps: torch.Tensor, params, choose) -> torch.Tensor:
    """``choose`` (:func:`dgrpo.policy.sampling.choose_tokens`) row by row's own temperature.

    Args:
        logits: (m, V); noise: (m, k); temps: (m,) float64 temperatures (0 = greedy).

    Returns:
        (m,) token ids: each row's decision exactly as ``choose`` makes it with that row's temperature
        (rows of one temperature are decided together; a row's decision does not depend on the others).
    """
    values = temps.unique()
    if len(values) == 1:
        return choose(logits, noise, params.with_temperature(float(values[0])))
    out = torch.empty(len(logits), dtype=torch.long, device=logits.device)
    for value in values.tolist():
        sel = (temps == value).nonzero().squeeze(1)
        out[sel] = choose(logits[sel], noise[sel], params.with_temperature(value))
    return out


def decode(model: PreTrainedModel, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, shared: int,
           prompt_of: torch.Tensor, noise: torch.Tensor, temps: torch.Tensor, params, eos_id: int, rows: int,
           choose, hidden: list[list[torch.Tensor]] | None = None,
           scores: list[list | None] | None = None, after_prefill=None) -> list[list[int]]:
    """Prefill the distinct prompts, then decode every request through at most ``rows`` rows.

    Args:
        ids, mask, positions: (D, W) long, the distinct prompts laid out as
            ``[common prefix | left padding | rest]`` with their attention mask and position ids.
        shared: length of the common prefix (0: none).
        prompt_of: (n,) long, the distinct prompt of each request, in arrival order.
        noise: (n, T, k) float32 Gumbel noise of each request (T = ``params.max_new_tokens``).
        temps: (n,) float64 temperature of each request.
        rows: decode at most this many requests at once (≥ 1); more requests refill finished rows,
            which needs a cache of plain full-attention layers.
        choose: the decision rule (:func:`dgrpo.policy.sampling.choose_tokens`).
        hidden: when given (one empty list per request), each request's list gets, per chosen token, the
            (H,) bf16 CPU input of the output embedding that produced its logits (the last-layer hidden
            state a TOPLOC proof commits to, :mod:`dgrpo.policy.proofs`).
        scores: when given, one entry per request: None, or an empty list that gets, per chosen token,
            (log π(token), entropy of π) in nats from the float32 logits that chose it (π: the model's
            softmax, whatever the request's temperature), i.e. what scoring the completion again
            under the same weights would give, up to float32 rounding.
        after_prefill: when given, called once as ``after_prefill(cache, mask, positions, first_logits)``
            right after the prefill, before any decoding: the (D, …) prefill cache (to read, not to change),
            ``mask`` and ``positions`` as above and the (D, V) float32 logits at each prompt's last
            position (:func:`dgrpo.policy.rescore.stats_behind_prefill` scores given completions there).

    Returns:
        The completion token ids of each request, eos included when it was generated.

    Raises:
        ValueError: ``rows`` < number of requests on a model whose cache is not plain full attention.
    """
    seen: list[torch.Tensor] = []  # the output embedding's last input per forward (with ``hidden``)
    hook = None if hidden is None else model.get_output_embeddings().register_forward_pre_hook(
        lambda _m, args: seen.append(args[0][:, -1, :].detach().to(torch.bfloat16).cpu()))
    try:
        return _decode(model, ids, mask, positions, shared, prompt_of, noise, temps, params, eos_id, rows, choose,
                       hidden, seen, scores, after_prefill)
    finally:
        if hook is not None:
            hook.remove()


def _score(logits: torch.Tensor, tokens: torch.Tensor, reqs: list[int], scores: list[list | None]) -> None:
    """Append (log π(token), entropy) of each row whose request ``reqs[j]`` keeps scores.

    Args:
        logits: (m, V) float32; tokens: (m,) the tokens chosen from them; reqs: the request of each row.
    """
    rows = [j for j, req in enumerate(reqs) if scores[req] is not None]
    if not rows:
        return
    logp = torch.log_softmax(logits[rows], dim=-1)  # (r, V)
    taken = logp.gather(-1, tokens[rows][:, None]).squeeze(-1).tolist()
    entropy = (-(logp.exp() * logp).sum(-1)).tolist()
    for j, lp, h in zip(rows, taken, entropy):
        scores[reqs[j]].append((lp, h))


def _decode(model, ids, mask, positions, shared, prompt_of, noise, temps, params, eos_id, rows, choose, hidden, seen,
            scores, after_prefill):
    n, steps, (d, width), device = len(prompt_of), params.max_new_tokens, ids.shape, ids.device
    prefill = DynamicCache(config=model.config)
    if shared:  # the common prefix once, then every prompt's rest behind copies of its cache
        model(input_ids=ids[:1, :shared], position_ids=positions[:1, :shared], cache=prefill, use_cache=True,
              logits_to_keep=1)
        prefill.batch_repeat_interleave(d)
    first_logits = model(input_ids=ids[:, shared:], attention_mask=mask, position_ids=positions[:, shared:],
                         cache=prefill, use_cache=True, logits_to_keep=1).logits[:, -1, :].float()  # (D, V)
    first_h = seen.pop() if hidden is not None else None  # (D, H) with ``hidden``
    if after_prefill is not None:
        kept = len(seen)
        after_prefill(prefill, mask, positions, first_logits)
        del seen[kept:]  # (its forwards are not the sampler's)
    r = min(rows, n)
    refill = r < n
    if refill and not supports(prefill):
        raise ValueError("refilling rows needs a cache of plain full-attention layers; pass rows >= requests")
    capacity = width + steps * (2 if refill else 1)  # room for a refill to last max_new_tokens (module docstring)
    expand = prompt_of[:r]
    logits = first_logits[expand]  # (r, V)
    cur_h = first_h[expand.cpu()] if hidden is not None else None  # (r, H): the hidden state behind each row's logits
    # Each row's attention mask for every position it can reach: prompt part, then ones.
    full_mask = torch.ones((r, capacity), dtype=mask.dtype, device=device)
    full_mask[:, :width] = mask[expand]
    step_pos = positions[expand][:, -1:]  # (r, 1) position of the last token
    if supports(prefill):
        cache: DynamicCache | PreallocatedCache = PreallocatedCache(prefill, expand, capacity)
    else:  # sliding windows, shared or linear-attention layers: keep transformers' own cache
        cache = prefill
        cache.batch_select_indices(expand)
    rest_cache = start = rest_start = None
    if refill:  # keep what a refill copies: each prompt's positions after the common prefix
        rest_start = (mask[:, shared:] == 0).sum(-1) + shared  # (D,) first column of each prompt's rest
        rest_cache = [(layer.keys[:, :, shared:].clone(), layer.values[:, :, shared:].clone())
                      for layer in prefill.layers]
        start = rest_start[expand]  # (r,) first unmasked position after the common prefix, per row
    del prefill

    out: list[list[int]] = [[] for _ in range(n)]
    alive = torch.arange(r, device=device)  # request held by each batch row
    t_row = torch.zeros(r, dtype=torch.long, device=device)  # tokens each row has chosen
    waiting, length = r, width  # next request to enter; positions filled in the cache
    while True:
        tokens = choose_rows(logits, noise[alive, t_row], temps[alive], params, choose)  # (m,)
        if scores is not None:
            _score(logits, tokens, alive.tolist(), scores)
        for j, (req, tok) in enumerate(zip(alive.tolist(), tokens.tolist())):
            out[req].append(tok)
            if hidden is not None:
                hidden[req].append(cur_h[j])
        t_row += 1
        done = (tokens == eos_id) | (t_row == steps)
        while waiting < n and bool(done.any()):  # refill finished rows, deciding each newcomer's first token
            free = done.nonzero().squeeze(1)[: n - waiting]
            new = torch.arange(waiting, waiting + len(free), device=device)
            waiting += len(free)
            src = prompt_of[new]
            cache.refill(free, rest_cache, src)  # the prompt's rest ends at the current length
            full_mask[free, :shared], full_mask[free, shared:length], full_mask[free, length:] = 1, 0, 1
            full_mask[free, length - width + shared : length] = mask[src, shared:]
            start[free] = rest_start[src] + length - width
            alive[free], step_pos[free], t_row[free] = new, positions[src][:, -1:], 1
            tokens[free] = choose_rows(first_logits[src], noise[new, 0], temps[new], params, choose)
            if scores is not None:
                _score(first_logits[src], tokens[free], new.tolist(), scores)
            for req, tok, s in zip(new.tolist(), tokens[free].tolist(), src.tolist()):
                out[req].append(tok)
                if hidden is not None:
                    hidden[req].append(first_h[s])  # (its first token: its prompt's prefill)
            done[free] = (tokens[free] == eos_id) | (steps == 1)
        if bool(done.all()):
            break
        if bool(done.any()):  # finished rows leave the batch and the cache
            if isinstance(cache, PreallocatedCache):
                holes, sources, m = cache.drop_rows(done)
                for buf in (alive, tokens, step_pos, full_mask, t_row) + ((start,) if refill else ()):
                    buf[holes] = buf[sources]
                alive, tokens, step_pos, full_mask, t_row = (alive[:m], tokens[:m], step_pos[:m], full_mask[:m],
                                                              t_row[:m])
                start = start[:m] if refill else None
            else:
                keep = (~done).nonzero().squeeze(1)
                cache.batch_select_indices(keep)
                alive, tokens, step_pos, full_mask, t_row = (alive[keep], tokens[keep], step_pos[keep],
                                                              full_mask[keep], t_row[keep])
        if length == capacity:  # cut the positions every live row masks (module docstring)
            cut = min(int(start.min()) - shared, length - width)
            cache.drop_columns(shared, cut)
            full_mask[:, shared : length - cut] = full_mask[:, shared + cut : length].clone()
            full_mask[:, length - cut :] = 1
            start, length = start - cut, length - cut
        step_pos = step_pos + 1
        logits = model(input_ids=tokens[:, None], attention_mask=full_mask[:, : length + 1], position_ids=step_pos,
                       cache=cache, use_cache=True).logits[:, -1, :].float()  # (m, V)
        cur_h = seen.pop() if hidden is not None else None
        length += 1
    return out
