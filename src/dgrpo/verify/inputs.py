"""What the checks read, made safe before they read it: prompt padding, half precision, malformed ids and seeds.

A completion, its prompt and its claimed seed come from an untrusted sender. A token id outside the
vocabulary made the scoring forward raise IndexError, a negative one made decoding raise OverflowError, a
seeds list one short made Replay raise IndexError: one malformed field ended the training step.
:func:`malformed` turns each into a rejection with its reason instead.
"""

from __future__ import annotations

import operator
from typing import Sequence

from dgrpo.types import Verdict

SEED_RANGE = (-(2**63), 2**64)  # what torch.Generator.manual_seed accepts (dgrpo.policy.sampling.gumbel_table)


def unpad(prompt: Sequence[int], mask: Sequence[int] | None) -> tuple[int, ...]:
    """The real tokens of ``prompt``: those where ``mask`` is 1 (all of them when ``mask`` is None).

    Raises:
        ValueError: ``mask`` has another length than ``prompt``.
    """
    prompt = tuple(int(t) for t in prompt)
    if mask is None:
        return prompt
    mask = [int(m) for m in mask]
    if len(mask) != len(prompt):
        raise ValueError(f"prompt_mask: a mask of {len(mask)} for a prompt of {len(prompt)} tokens (pass generate's "
                         "attention_mask row of each prompt)")
    return tuple(t for t, m in zip(prompt, mask) if m)


def refuse_half(dtype, what: str) -> None:
    """Raise :class:`~dgrpo.errors.SettingError` when ``dtype`` is bf16 or fp16 (docs/verification.md)."""
    from dgrpo.verify.forward import half_precision_problem

    problem = half_precision_problem(dtype, what)
    if problem:
        from dgrpo.errors import SettingError

        raise SettingError(problem)


def model_vocab(model) -> int | None:
    """The width of ``model``'s logits (rows of its output embedding; None when ``model`` is None)."""
    if model is None:
        return None
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is not None and getattr(head, "weight", None) is not None:
        return int(head.weight.shape[0])
    return int(model.config.get_text_config().vocab_size)


def _bad_id(t, vocab: int | None, at: str = "") -> str | None:
    try:
        t = operator.index(t)
    except TypeError:
        return f"token id {t!r}{at} is not an integer"
    if t < 0 or (vocab is not None and t >= vocab):
        return f"token id {t}{at} out of range (vocabulary of {vocab})" if vocab else f"token id {t}{at} is negative"
    return None


def malformed(prompt_ids, completion_ids, seeds, vocab: int | None, name: str = "input") -> dict[int, Verdict]:
    """The completions whose fields cannot be checked, each with its rejection.

    Args:
        prompt_ids: N prompt id lists (None: not given); completion_ids: N completion id lists.
        seeds: N claimed seeds (an integer, or None for none claimed), or None when no seeds were sent.
        vocab: the scorer's vocabulary size (ids must lie in [0, vocab)); None: only negative ids are caught.
        name: the ``defense`` of the verdicts (``input``; ``rollout`` for a TRL worker's rollout).

    Returns:
        completion index → a rejection: ``"token id 999999 at position 0 out of range (vocabulary of 400)"``,
        ``"prompt token id -1 ..."``, ``"3 seeds for 4 completions"`` (every completion), ``"seed 'x' is not an
        integer"``, ``"seed ... out of range"``; the position is the completion token's, when there is one.
    """
    n = len(completion_ids)
    for what, xs in (("seeds", seeds), ("prompt_ids", prompt_ids)):
        if xs is not None and len(xs) != n:
            return {i: Verdict(False, name, f"{len(xs)} {what} for {n} completions", None) for i in range(n)}
    out = {}
    for i in range(n):
        for pos, t in enumerate(completion_ids[i]):
            bad = _bad_id(t, vocab, f" at position {pos}")
            if bad:
                out[i] = Verdict(False, name, bad, pos)
                break
        if i not in out and prompt_ids is not None:
            bad = next((b for b in (_bad_id(t, vocab) for t in prompt_ids[i]) if b), None)
            if bad:
                out[i] = Verdict(False, name, f"prompt {bad}", None)
        if i not in out and seeds is not None and seeds[i] is not None:
            try:
                s = operator.index(seeds[i])
            except TypeError:
                out[i] = Verdict(False, name, f"seed {seeds[i]!r} is not an integer", None)
                continue
            if not SEED_RANGE[0] <= s < SEED_RANGE[1]:
                out[i] = Verdict(False, name, f"seed {s} out of range (a 64-bit seed)", None)
    return out
