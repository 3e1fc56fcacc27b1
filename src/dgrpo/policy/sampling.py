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
from dataclasses import dataclass, replace

import torch
from transformers import PreTrainedModel

from dgrpo.policy import stream
from dgrpo.policy.decode_attention import single_query_attention
from dgrpo.policy.kv_cache import plain_layers
from dgrpo.policy.onednn import onednn_linears
from dgrpo.policy.rescore import Rescore, stats_behind_prefill


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

    def with_temperature(self, temperature: float) -> "SamplingParams":
        """The same strategy at another temperature (this one when equal)."""
        return self if temperature == self.temperature else replace(self, temperature=temperature)


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
    temperatures: list[float] | None = None,
    hidden: list[list[torch.Tensor]] | None = None,
    scores: list[list | None] | None = None,
    rescore: Rescore | None = None,
) -> list[list[int]]:
    """Sample one completion per (prompt, seed), as one stream of requests with a KV cache.

    Every distinct prompt is prefilled once (a common prefix once for all); finished sequences leave
    the batch, or, when more requests wait than ``max_rows``, hand their row to the next request
    at once (continuous batching, :mod:`dgrpo.policy.stream`). The result for a (prompt, seed,
    temperature) does not depend on the other requests, their order or ``max_rows``, up to the
    float32 rounding noise that padding causes (about 1e-4 in the logits), so any split into calls
    gives the same completions. Bigger batches decode faster per token (the matmuls get more
    rows; ``BENCHMARKS.md`` has tokens/s by batch size): pass every completion a process needs at
    once and bound the memory with ``max_rows``.

    The KV cache is preallocated and written in place (:mod:`dgrpo.policy.kv_cache`), the linear
    layers run on oneDNN (:mod:`dgrpo.policy.onednn`) and single-token attention is two matmuls
    (:mod:`dgrpo.policy.decode_attention`).

    Args:
        prompts: token ids of each prompt (chat template already applied).
        seeds: one seed per prompt (see :func:`completion_seed`).
        eos_id: the token that ends a completion; it is kept as the last completion token.
        pad_id: padding token (may equal eos_id).
        max_rows: decode at most this many completions at once (None: all); the others wait for a
            finished row. :func:`dgrpo.policy.kv_cache.rows_for_memory` gives the largest that fits
            a memory budget. Models whose cache is not plain full attention (sliding windows) cannot
            refill rows and decode in successive batches of ``max_rows`` instead.
        temperatures: one temperature per request (0 = greedy; None: ``params.temperature`` for all),
            so sampled and greedy answers to the same prompts share one stream and one prefill.
        hidden: one empty list per request, to receive each chosen token's last-layer hidden state ((H,)
            bf16 on CPU; :func:`dgrpo.policy.stream.decode`), for TOPLOC proofs.
        scores: one entry per request, None or an empty list that receives, per completion token, its
            (log-probability, entropy) under ``model`` in nats, from the logits that chose it
            (:func:`dgrpo.policy.stream.decode`): a completion scored as it is sampled.
        rescore: given completions of some of these prompts to score under ``model`` as well
            (:class:`dgrpo.policy.rescore.Rescore`; its ``stats`` receive the scores): behind this call's
            prefill, so their prompts run once for both (models whose cache is not plain full attention,
            or calls that decode in successive batches: :func:`dgrpo.policy.scoring.completion_stats`).

    Returns:
        The completion token ids of each prompt, eos included when it was generated.

    Raises:
        ValueError: prompts, seeds, temperatures and score lists differ in length, a prompt is empty, a
            temperature is negative, max_rows < 1, or a ``rescore`` prompt is not one of ``prompts``.
    """
    if len(prompts) != len(seeds):
        raise ValueError(f"{len(prompts)} prompts but {len(seeds)} seeds")
    if temperatures is not None and len(temperatures) != len(prompts):
        raise ValueError(f"{len(prompts)} prompts but {len(temperatures)} temperatures")
    if temperatures is not None and any(not t >= 0 for t in temperatures):
        raise ValueError("temperatures must be >= 0 (0 = greedy)")
    if any(len(p) == 0 for p in prompts):
        raise ValueError("empty prompt")
    if max_rows is not None and max_rows < 1:
        raise ValueError(f"max_rows must be at least 1, got {max_rows}")
    if hidden is not None and len(hidden) != len(prompts):
        raise ValueError(f"{len(prompts)} prompts but {len(hidden)} hidden-state lists")
    if scores is not None and len(scores) != len(prompts):
        raise ValueError(f"{len(prompts)} prompts but {len(scores)} score lists")
    if rescore is not None and not {tuple(p) for p in rescore.prompts} <= {tuple(p) for p in prompts}:
        raise ValueError("rescore: every prompt to score must be one of the prompts sampled")
    n = len(prompts)
    if n == 0:
        return []
    temps = [params.temperature] * n if temperatures is None else [float(t) for t in temperatures]
    if rescore is not None and not plain_layers(model.config):  # (sliding windows: no prefill cache to share)
        sampled = sample(model, prompts, seeds, params, eos_id, pad_id, max_rows=max_rows, temperatures=temps,
                         hidden=hidden, scores=scores)
        _rescore_apart(model, rescore)
        return sampled
    if max_rows is not None and n > max_rows and not plain_layers(model.config):
        first_seen = {p: i for i, p in reversed(list(enumerate(tuple(q) for q in prompts)))}
        order = sorted(range(n), key=lambda i: first_seen[tuple(prompts[i])])  # stable: groups stay together
        out: list[list[int]] = [[] for _ in range(n)]
        for start in range(0, n, max_rows):
            chunk = order[start : start + max_rows]
            for i, ids in zip(chunk, sample(model, [prompts[i] for i in chunk], [seeds[i] for i in chunk], params,
                                            eos_id, pad_id, temperatures=[temps[i] for i in chunk],
                                            hidden=None if hidden is None else [hidden[i] for i in chunk],
                                            scores=None if scores is None else [scores[i] for i in chunk])):
                out[i] = ids
        return out
    device = next(model.parameters()).device
    # Completions of the same prompt share its prefill: run each distinct prompt once, then copy its
    # KV cache rows (a group of G costs one prompt forward instead of G). Distinct prompts that open
    # alike (system prompt, worked examples) share that prefix's forward too.
    distinct = list(dict.fromkeys(tuple(p) for p in prompts))
    row_of = {p: i for i, p in enumerate(distinct)}
    prompt_of = torch.tensor([row_of[tuple(p)] for p in prompts], device=device)  # (n,) distinct row of each
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

    after = None
    if rescore is not None:
        rows = [row_of[tuple(p)] for p in rescore.prompts]

        def after(cache, mask, positions, first_logits):
            rescore.stats.extend(stats_behind_prefill(model, cache, mask, positions, first_logits, rows,
                                                      rescore.completions))

    training = model.training  # a learner leaves the model in train mode; dropout would break replay
    model.eval()
    try:
        with onednn_linears(model), single_query_attention(model, shared):
            return stream.decode(model, ids, mask, positions, shared, prompt_of, noise,
                                 torch.tensor(temps, dtype=torch.float64, device=device), params, eos_id,
                                 n if max_rows is None else max_rows, choose_tokens, hidden, scores, after)
    finally:
        model.train(training)


def _rescore_apart(model: PreTrainedModel, rescore: Rescore) -> None:
    """``rescore``'s completions scored by their own pass (:func:`dgrpo.policy.scoring.completion_stats`)."""
    from dgrpo.policy.scoring import completion_stats  # (scoring → prefix → this module: imported late)

    training = model.training
    model.eval()
    try:
        if rescore.prompts:
            rescore.stats.extend(completion_stats(model, rescore.prompts, rescore.completions))
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
