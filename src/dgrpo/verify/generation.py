"""What the logit-level checks need from the generator, checked before they run (docs/verification.md).

The top-k and replay checks recompute the sender's sampling decisions from the raw float32 logits of
the same weights. A generator setting that changes those decisions makes them reject honest work,
silently: ``top_k=0`` (TRL's default) samples outside the top-k, ``repetition_penalty=1.3`` moves
tokens in and out of it, bf16 weights move logits by up to 1.6, and ``generate``'s own random stream
cannot be replayed. :func:`generation_problems` lists each such setting of a ``transformers``
``GenerationConfig`` (or a mapping of its fields) as one line naming the setting and the fix;
:func:`check_generation` raises the first.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from dgrpo.errors import SettingError
from dgrpo.verify.checks import Replay, TopK
from dgrpo.verify.forward import half_precision_problem

# GenerationConfig fields whose logits processors run before the sampling warpers (and before any
# custom processor), with the value that leaves the logits alone: any other value changes which tokens
# are in the top-k and which one a seeded decision picks.
LOGIT_CHANGING = {
    "repetition_penalty": 1.0,
    "no_repeat_ngram_size": 0,
    "bad_words_ids": None,
    "suppress_tokens": None,
    "begin_suppress_tokens": None,
    "sequence_bias": None,
    "min_length": 0,
    "min_new_tokens": None,
    "forced_bos_token_id": None,
    "forced_eos_token_id": None,
    "exponential_decay_length_penalty": None,
    "guidance_scale": 1.0,
    "encoder_repetition_penalty": 1.0,
}


def _get(config: Any, name: str) -> Any:
    return config.get(name) if isinstance(config, Mapping) else getattr(config, name, None)


def _changed(name: str, value: Any) -> bool:
    neutral = LOGIT_CHANGING[name]
    if value is None or value == neutral:
        return False
    return not (neutral is None and value in ((), [], {}))


def generation_problems(config: Any, checks: Sequence[object], *, seeded: bool = False, model: Any = None,
                        eos_id: int | None = None, where: str = "generation config") -> list[str]:
    """The generator settings that make ``checks`` reject honest completions, one line each.

    Args:
        config: the generator's ``transformers.GenerationConfig``, or a mapping of its fields (what a
            worker passes to ``generate``); None when unknown (only ``model`` is checked).
        checks: the :class:`~dgrpo.verify.TopK` / :class:`~dgrpo.verify.Replay` checks that will read the logits
            (others are ignored).
        seeded: the generator samples with :class:`dgrpo.integrations.generate.SeededLogitsProcessor` (or
            dgrpo's own sampler) with the Replay check's parameters.
        model: the scoring model, to check its dtype (None: not checked).
        eos_id: the verifier's eos id; Replay needs generation to stop at it and at no other token.
        where: how the messages name ``config`` (``"GRPOConfig"``, ``"generation config"``).

    Returns:
        One line per problem (empty: none found); each names the setting, its value and the fix.
    """
    topks = [c for c in checks if isinstance(c, TopK)]
    replays = [c for c in checks if isinstance(c, Replay)]
    if not topks and not replays:
        return []
    out = []
    if model is not None:
        problem = half_precision_problem(next(model.parameters()).dtype, "the scoring model")
        if problem:
            out.append(problem)
    if config is None:
        return out
    for name in LOGIT_CHANGING:
        value = _get(config, name)
        if _changed(name, value):
            out.append(f"{where}: {name}={value!r} changes the logits before sampling, so honest tokens fall outside "
                       f"the top-k and seeded decisions differ; leave {name} unset")
    beams = _get(config, "num_beams")
    if beams is not None and beams > 1:
        out.append(f"{where}: num_beams={beams} is beam search, not sampling; use num_beams=1")
    sampling = bool(_get(config, "do_sample"))
    for check in topks:
        if seeded:
            top = min((r.params.top_k for r in replays), default=None)
            if top is not None and top > check.k:
                out.append(f"the seeded sampler's top_k={top} exceeds TopK(k={check.k}); sample with top_k ≤ {check.k}")
            continue
        top_k = _get(config, "top_k")
        if sampling and top_k is None:  # generate fills it: the model's generation_config, then transformers' 50
            out.append(f"{where}: top_k is unset, so generate samples with the model's generation_config.top_k or "
                       f"transformers' default 50, and TopK(k={check.k}) rejects honest completions; set top_k to at "
                       f"most {check.k}")
        elif sampling and (not top_k or top_k > check.k):
            what = "samples from the whole vocabulary" if not top_k else f"samples outside the top-{check.k}"
            out.append(f"{where}: top_k={top_k} {what}, so TopK(k={check.k}) rejects honest completions; "
                       f"set top_k to at most {check.k}")
    for check in replays:
        p = check.params
        if not seeded and not (not sampling and p.temperature == 0):
            out.append(f"{where}: Replay needs dgrpo's seeded sampler (generate's own random stream cannot be replayed); "
                       "sample with dgrpo.integrations.generate.SeededLogitsProcessor or drop Replay")
            continue
        stops = _get(config, "eos_token_id")
        stops = [] if stops is None else [stops] if isinstance(stops, int) else list(stops)
        if eos_id is not None and stops and set(stops) != {eos_id}:
            out.append(f"{where}: eos_token_id={stops} stops generation at other tokens than the verifier's eos_id="
                       f"{eos_id}, so Replay rejects completions ending there; generate with eos_token_id={eos_id}")
        stop_strings = _get(config, "stop_strings")
        if stop_strings:
            out.append(f"{where}: stop_strings={stop_strings!r} ends generation before eos, so Replay rejects every "
                       "honest completion that stops there ('stops before eos'); leave stop_strings unset")
        limit = _get(config, "max_new_tokens")
        if limit is not None and limit != p.max_new_tokens:
            out.append(f"{where}: max_new_tokens={limit} but Replay's params.max_new_tokens={p.max_new_tokens} "
                       "(replay checks where a completion stops); make them equal")
    return out


def check_generation(config: Any, checks: Sequence[object], *, seeded: bool = False, model: Any = None,
                     eos_id: int | None = None, where: str = "generation config") -> None:
    """Raise the first of :func:`generation_problems`.

    Raises:
        SettingError: a setting makes the checks reject honest completions (one line naming it and the fix).
    """
    problems = generation_problems(config, checks, seeded=seeded, model=model, eos_id=eos_id, where=where)
    if problems:
        raise SettingError(problems[0])
