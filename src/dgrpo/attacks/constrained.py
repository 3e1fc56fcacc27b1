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


def _next_topk(model, ids: list[int], k: int):
    """(values, token ids) of the k largest next-token logits after ``ids`` (one full forward)."""
    import torch

    device = next(model.parameters()).device
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids], device=device)).logits[0, -1].float()
    v, i = logits.topk(k)
    return v.tolist(), i.tolist()


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
    for variant in variants:
        added: list[int] = []
        remaining = variant
        while remaining and len(added) < max_tokens:
            _, top = _next_topk(model, prefix + added, k)
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
    from dgrpo.policy.sampling import SamplingParams, sample

    params, tok = policy.sampling, policy.tokenizer
    eos, pad = tok.eos_token_id, tok.pad_token_id
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
        rest = sample(policy.model, [prompt + out], [seed + part], SamplingParams(params.top_k, params.temperature, budget),
                      eos, pad)[0]
        end = first_sentence_end(tok, rest, eos) if every_sentence else None
        if end is None or part == max_sentences - 1:
            out += rest
            break
        out += rest[: end + 1]
    return out[: params.max_new_tokens], placed
