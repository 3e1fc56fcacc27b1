"""Top-k-constrained decoding: write a payload using only tokens inside the receivers' top-k.

The top-k support check (paper §4.1) accepts a completion when every token is among the k most
likely under the receiver's weights. An attacker holding the same weights (homogeneous swarm,
docs/THREATS.md) can therefore write anything it can *spell* with top-k tokens: at each position it
looks at the top-k and keeps a token whose text continues one of several spellings of its payload
(casing, leading space, short paraphrases). Positions that carry no payload are sampled with the
swarm's own seeded top-k sampler (:func:`dgrpo.policy.sampling.sample`), so every token of the result
is inside the top-k of the given weights by construction.

torch is imported inside the functions (attack modules load light for config checks).
"""

from __future__ import annotations

from typing import Sequence

SENTENCE_END = (".", "!", "?")
SENTENCE_CHUNK = 24  # tokens drawn first when only a sentence is wanted (SmolLM2 sentences: mostly fewer)


def spellings(payload: str, paraphrases: Sequence[str] = ()) -> list[str]:
    """Variants of ``payload`` the ASR metric still counts (it is case- and space-insensitive), most
    faithful first: as written, lower case, capitalised, title case, upper case, then paraphrases.

    Each variant also appears with a leading space (a word-initial token is often likelier).
    """
    bases = []
    for text in (payload, *paraphrases):
        for v in (text, text.lower(), text[:1].upper() + text[1:].lower(), text.title(), text.upper()):
            if v not in bases:
                bases.append(v)
    out = []
    for v in bases:
        out += [v, " " + v]
    return out


class _NextTopK:
    """Top-k token ids after ``prefix + added``, for the many ``added`` one :func:`steer` call asks about.

    The prefix is run once and its KV cache kept; each new continuation cuts the cache back to the part
    it shares with the last one fed (``DynamicCache.crop``) and feeds only the rest, and every answer is
    memoised (most spellings fail on their first token, whose top-k they all share). Before this, every
    question was one full forward over the prompt: about 27 a poison, 44 of its 52 CPU seconds.
    Cached and full forwards differ by float rounding (~1e-5 in the logits), far inside the top-k
    check's tolerance (:func:`dgrpo.verify.topk.first_outside_topk`). A cache that cannot be cut back
    (sliding-window layers past their window) is dropped for full forwards.
    """

    def __init__(self, model, prefix: list[int], k: int):
        import torch

        self.model, self.k = model, k
        self.device = next(model.parameters()).device
        with torch.no_grad():
            out = model(input_ids=torch.tensor([prefix], device=self.device), use_cache=True, logits_to_keep=1)
        self.cache, self.prefix, self.fed = out.cache, list(prefix), ()
        self.memo = {(): out.logits[0, -1].float().topk(k).indices.tolist()}

    def __call__(self, added: list[int]) -> list[int]:
        import torch

        key = tuple(added)
        if key in self.memo:
            return self.memo[key]
        common = next((i for i, (a, b) in enumerate(zip(self.fed, key)) if a != b), min(len(self.fed), len(key)))
        if self.cache is not None:
            try:
                self.cache.crop(-(len(self.fed) - common))  # drops that many tokens (0: none)
            except (RuntimeError, ValueError):  # sliding-window layers past their window cannot be cut back
                self.cache = None
        if self.cache is None:  # a full forward, as before the cache
            with torch.no_grad():
                ids = torch.tensor([[*self.prefix, *key]], device=self.device)
                self.memo[key] = self.model(input_ids=ids, logits_to_keep=1).logits[0, -1].float().topk(self.k).indices.tolist()
            return self.memo[key]
        with torch.no_grad():  # every prefix of what was fed is memoised, so key goes past the shared part
            logits = self.model(input_ids=torch.tensor([key[common:]], device=self.device),
                                cache=self.cache, use_cache=True).logits[0].float()
        self.fed = key
        for j in range(common, len(key)):
            self.memo[key[: j + 1]] = logits[j - common].topk(self.k).indices.tolist()
        return self.memo[key]


def steer(model, tokenizer, prefix: list[int], variants: Sequence[str], k: int, max_tokens: int = 32) -> list[int] | None:
    """Token ids that spell one of ``variants`` after ``prefix``, each inside the top-k at its position.

    Greedy per variant: at each step take, among the top-k tokens whose text is a prefix of what
    remains of the variant, the one covering the most characters (ties: the likelier). The first
    variant spelled completely wins.

    Args:
        prefix: prompt ids plus the completion so far.
        variants: candidate spellings, tried in order (see :func:`spellings`).
        k: the receivers' k.

    Returns:
        The payload's token ids, or None when no variant can be spelled inside the top-k.
    """
    texts: dict[int, str] = {}
    next_topk = _NextTopK(model, prefix, k)
    for variant in variants:
        added: list[int] = []
        remaining = variant
        while remaining and len(added) < max_tokens:
            top = next_topk(added)
            best, best_len = None, 0
            for tok in top:  # in descending logit order: ties keep the likelier
                if tok not in texts:
                    texts[tok] = tokenizer.decode([tok])
                s = texts[tok]
                if s and remaining.startswith(s) and len(s) > best_len:
                    best, best_len = tok, len(s)
            if best is None:
                break
            added.append(best)
            remaining = remaining[best_len:]
        if not remaining:
            return added
    return None


def first_sentence_end(tokenizer, ids: Sequence[int], eos_id: int) -> int | None:
    """Index of the first token whose text ends a sentence (ends with . ! or ?), None if none before eos."""
    for i, tok in enumerate(ids):
        if tok == eos_id:
            return None
        if tokenizer.decode([tok]).rstrip().endswith(SENTENCE_END):
            return i
    return None


def constrained_completion(policy, prompt: list[int], payload_variants: Sequence[str], seed: int,
                           every_sentence: bool = False, max_sentences: int = 8) -> tuple[list[int], int]:
    """One completion that opens with the payload (and, with ``every_sentence``, opens every sentence
    with it), every token inside the top-k of ``policy``'s weights.

    Payload tokens come from :func:`steer`; the rest is the swarm's seeded top-k sampling
    (``policy.sampling``) continued from the prefix, with seeds derived from ``seed``.

    Returns:
        (completion ids, eos included when generated; how many payload copies were placed).
    """
    params, tok = policy.sampling, policy.tokenizer
    out: list[int] = []
    placed = 0
    for part in range(max_sentences if every_sentence else 1):
        budget = params.max_new_tokens - len(out)
        payload = steer(policy.model, tok, prompt + out, payload_variants, params.top_k, max_tokens=min(32, budget))
        if payload is not None and len(payload) < budget:
            out += payload
            placed += 1
        budget = params.max_new_tokens - len(out)
        if budget <= 0:
            break
        last = not every_sentence or part == max_sentences - 1
        rest = _continuation(policy, prompt + out, seed + part, budget, None if last else SENTENCE_CHUNK)
        end = None if last else first_sentence_end(tok, rest, tok.eos_token_id)
        if end is None or last:
            out += rest
            break
        out += rest[: end + 1]
    return out[: params.max_new_tokens], placed


def _continuation(policy, ids: list[int], seed: int, budget: int, sentence_chunk: int | None) -> list[int]:
    """The swarm's seeded top-k continuation of ``ids``, at most ``budget`` tokens (eos kept).

    With ``sentence_chunk``, only the first sentence is wanted: the first ``sentence_chunk`` tokens are drawn
    first, and the whole ``budget`` only when no sentence ends (and no eos comes) in them. The short draw is
    the long one's beginning (the sampler's noise rows come in order: :func:`dgrpo.policy.sampling.gumbel_table`),
    so the completion is the same as drawing the whole budget each time, minus the sentences thrown away.
    """
    from dgrpo.policy.sampling import SamplingParams, sample

    params, tok = policy.sampling, policy.tokenizer
    eos, pad = tok.eos_token_id, tok.pad_token_id

    def draw(n: int) -> list[int]:
        return sample(policy.model, [ids], [seed], SamplingParams(params.top_k, params.temperature, n), eos, pad)[0]

    if sentence_chunk is not None and budget > sentence_chunk:
        head = draw(sentence_chunk)
        if (head and head[-1] == eos) or first_sentence_end(tok, head, eos) is not None:
            return head
    return draw(budget)
