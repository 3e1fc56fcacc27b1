"""Seeded, batch-independent top-k sampling.

Hugging Face ``generate`` draws one random stream for the whole batch, so a completion depends on
which other prompts share its batch and cannot be replayed by another node. Here every sequence
owns its noise: a table of Gumbel variates drawn from a ``torch.Generator`` seeded with the
completion's own seed, indexed by decoding step. Sampling is the Gumbel-max trick over the top-k
logits (Gumbel 1954; Maddison et al. 2014):

    token_t = topk_ids[argmax_j (topk_logits_j / temperature + g_{t,j})],   g = -log(-log(u)), u ~ U(0,1)

which draws from softmax(topk_logits / temperature) exactly. Because the noise depends only on
(seed, t, rank j), any node holding the same weights can replay the decision from one forward pass
(:mod:`dgrpo.defenses.replay`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch
from transformers import DynamicCache, PreTrainedModel

from dgrpo.policy.decode_attention import single_query_attention
from dgrpo.policy.kv_cache import PreallocatedCache, supports
from dgrpo.policy.onednn import onednn_linears


@dataclass(frozen=True)
class SamplingParams:
    """The agreed sampling strategy of a swarm.

    Attributes:
        top_k: k of top-k sampling (paper §D.3 uses 10); tokens outside the top-k are impossible.
        temperature: softmax temperature; 0 means greedy.
        max_new_tokens: completion length limit, in tokens.
    """

    top_k: int = 10
    temperature: float = 1.0
    max_new_tokens: int = 96


def completion_seed(run_seed: int, round_idx: int, node: int, prompt_id: str | int, index: int) -> int:
    """Seed of one completion, derived from (run seed, round, node, prompt, index).

    Returns:
        A non-negative 63-bit integer (a stable hash; the same on every machine and Python).
    """
    key = f"{run_seed}|{round_idx}|{node}|{prompt_id}|{index}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little") >> 1


def gumbel_table(seed: int, steps: int, top_k: int) -> torch.Tensor:
    """The Gumbel noise of one sequence.

    Returns:
        Tensor of shape (steps, top_k), float32: row t perturbs the top-k logits at step t
        (column j = the j-th largest logit).
    """
    gen = torch.Generator().manual_seed(seed)
    u = torch.rand(steps, top_k, generator=gen, dtype=torch.float64)
    u = u.clamp(1e-12, 1 - 1e-12)  # keeps -log(-log(u)) finite
    return (-torch.log(-torch.log(u))).float()


def choose_tokens(logits: torch.Tensor, noise: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """One sampling decision per row.

    Args:
        logits: (N, V) float32 next-token logits.
        noise: (N, k) Gumbel noise for this step.

    Returns:
        (N,) chosen token ids.
    """
    top_v, top_i = logits.topk(params.top_k, dim=-1)  # (N, k), sorted descending
    if params.temperature == 0:
        return top_i[:, 0]
    choice = (top_v / params.temperature + noise).argmax(dim=-1)  # (N,)
    return top_i.gather(1, choice[:, None]).squeeze(1)


@torch.no_grad()  # not inference_mode: its tensors could not enter the update that trains these weights right after
def sample(
    model: PreTrainedModel,
    prompts: list[list[int]],
    seeds: list[int],
    params: SamplingParams,
    eos_id: int,
    pad_id: int,
    *,
    max_rows: int | None = None,
) -> list[list[int]]:
    """Sample one completion per (prompt, seed), batched with a KV cache.

    Prompts are left-padded; finished sequences are dropped from the batch so they cost nothing.
    The result for a (prompt, seed) pair does not depend on the other members of the batch,
    up to the float32 rounding noise that padding causes (about 1e-4 in the logits), so any split
    into batches gives the same completions. Bigger batches decode faster per token (the matmuls
    get more rows; ``BENCHMARKS.md`` has tokens/s by batch size): pass every completion a process
    needs at once and bound the memory with ``max_rows``.

    The KV cache is preallocated and written in place (:mod:`dgrpo.policy.kv_cache`), the linear
    layers run on oneDNN (:mod:`dgrpo.policy.onednn`) and single-token attention is two matmuls
    (:mod:`dgrpo.policy.decode_attention`).

    Args:
        prompts: token ids of each prompt (chat template already applied).
        seeds: one seed per prompt (see :func:`completion_seed`).
        eos_id: the token that ends a completion; it is kept as the last completion token.
        pad_id: padding token (may equal eos_id).
        max_rows: decode at most this many completions at once (None: all in one batch); the
            completions of one prompt stay in one batch where they fit, so they share its prefill.
            :func:`dgrpo.policy.kv_cache.rows_for_memory` gives the largest that fits a memory budget.

    Returns:
        The completion token ids of each prompt, eos included when it was generated.

    Raises:
        ValueError: prompts and seeds differ in length, a prompt is empty, or max_rows < 1.
    """
    if len(prompts) != len(seeds):
        raise ValueError(f"{len(prompts)} prompts but {len(seeds)} seeds")
    if any(len(p) == 0 for p in prompts):
        raise ValueError("empty prompt")
    if max_rows is not None and max_rows < 1:
        raise ValueError(f"max_rows must be at least 1, got {max_rows}")
    n = len(prompts)
    if n == 0:
        return []
    if max_rows is not None and n > max_rows:
        first_seen = {p: i for i, p in reversed(list(enumerate(tuple(q) for q in prompts)))}
        order = sorted(range(n), key=lambda i: first_seen[tuple(prompts[i])])  # stable: groups stay together
        out: list[list[int]] = [[] for _ in range(n)]
        for start in range(0, n, max_rows):
            chunk = order[start : start + max_rows]
            for i, ids in zip(chunk, sample(model, [prompts[i] for i in chunk], [seeds[i] for i in chunk], params,
                                            eos_id, pad_id)):
                out[i] = ids
        return out
    device = next(model.parameters()).device
    # Completions of the same prompt share its prefill: run each distinct prompt once, then repeat
    # its KV cache rows (a group of G costs one prompt forward instead of G). Distinct prompts that
    # open alike (system prompt, worked examples) share that prefix's forward too.
    distinct = list(dict.fromkeys(tuple(p) for p in prompts))
    row_of = {p: i for i, p in enumerate(distinct)}
    expand = torch.tensor([row_of[tuple(p)] for p in prompts], device=device)  # (n,) distinct row of each
    shared = _shared_prefix(distinct)
    # Row layout: [shared prefix | left padding | rest of the prompt]; padding is masked out.
    width = shared + max(len(p) - shared for p in distinct)
    ids = torch.full((len(distinct), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(distinct), width), dtype=torch.long)
    for row, p in enumerate(distinct):
        ids[row, :shared], mask[row, :shared] = torch.tensor(p[:shared], dtype=torch.long), 1
        ids[row, width - len(p) + shared :] = torch.tensor(p[shared:])
        mask[row, width - len(p) + shared :] = 1
    steps = params.max_new_tokens
    noise = torch.stack([gumbel_table(s, steps, params.top_k) for s in seeds]).to(device)  # (n, T, k)
    ids, mask = ids.to(device), mask.to(device)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)

    training = model.training  # a learner leaves the model in train mode; dropout would break replay
    model.eval()
    try:
        with onednn_linears(model), single_query_attention(model):
            return _decode(model, ids, mask, positions, shared, expand, noise, params, eos_id)
    finally:
        model.train(training)


def _shared_prefix(distinct: list[tuple[int, ...]], minimum: int = 16) -> int:
    """Length of the prefix all distinct prompts share, when it is worth a forward of its own.

    Returns 0 for a single prompt or a prefix shorter than ``minimum`` tokens; otherwise the
    common prefix, capped so that every prompt keeps at least one token after it.
    """
    if len(distinct) < 2:
        return 0
    first, n = distinct[0], min(len(p) for p in distinct) - 1
    for p in distinct[1:]:
        n = next((i for i in range(n) if p[i] != first[i]), n)
    return n if n >= minimum else 0


def _decode(model, ids, mask, positions, shared, expand, noise, params, eos_id) -> list[list[int]]:
    """The prefill and the token loop of :func:`sample` (arguments prepared there)."""
    n, steps, width, device = len(expand), params.max_new_tokens, ids.shape[1], ids.device
    prefill = DynamicCache(config=model.config)
    if shared:  # the common prefix once, then every prompt's rest behind copies of its cache
        model(input_ids=ids[:1, :shared], position_ids=positions[:1, :shared], cache=prefill, use_cache=True,
              logits_to_keep=1)
        prefill.batch_repeat_interleave(ids.shape[0])
    logits = model(input_ids=ids[:, shared:], attention_mask=mask, position_ids=positions[:, shared:], cache=prefill,
                   use_cache=True, logits_to_keep=1).logits[:, -1, :].float()[expand]  # (n, V)
    # Each row's attention mask for all positions it can reach: prompt part, then ones.
    full_mask = torch.ones((n, width + steps), dtype=mask.dtype, device=device)
    full_mask[:, :width] = mask[expand]
    step_pos = positions[expand][:, -1:]  # (n, 1) position of the last token
    if supports(prefill):
        cache: DynamicCache | PreallocatedCache = PreallocatedCache(prefill, expand, width + steps)
    else:  # sliding windows, shared or linear-attention layers: keep transformers' own cache
        cache = prefill
        cache.batch_select_indices(expand)
    del prefill

    out: list[list[int]] = [[] for _ in range(n)]
    alive = torch.arange(n, device=device)  # original row of each batch row
    for t in range(steps):
        tokens = choose_tokens(logits, noise[alive, t], params)  # (m,)
        done = tokens == eos_id
        for orig, tok in zip(alive.tolist(), tokens.tolist()):
            out[orig].append(tok)
        if t == steps - 1 or bool(done.all()):
            break
        if bool(done.any()):  # finished rows leave the batch and the cache
            if isinstance(cache, PreallocatedCache):
                holes, sources, m = cache.drop_rows(done)
                for buf in (alive, tokens, step_pos, full_mask):
                    buf[holes] = buf[sources]
                alive, tokens, step_pos, full_mask = alive[:m], tokens[:m], step_pos[:m], full_mask[:m]
            else:
                keep = (~done).nonzero().squeeze(1)
                cache.batch_select_indices(keep)
                alive, tokens, step_pos, full_mask = alive[keep], tokens[keep], step_pos[keep], full_mask[keep]
        step_pos = step_pos + 1
        logits = model(input_ids=tokens[:, None], attention_mask=full_mask[:, : width + t + 1], position_ids=step_pos,
                       cache=cache, use_cache=True).logits[:, -1, :].float()  # (m, V)
    return out
