"""What a served judge's ``extra_body`` may hold: an allow-list of sampling settings.

The openai client merges ``extra_body`` over the request the judge builds, and servers read many fields
beyond the OpenAI ones, so an open ``extra_body`` let a config ask the judge something else or force its
answer, accepted silently (u37, J1): ``messages`` (a fixed question), ``tools`` (llama.cpp puts a tool's
description in Qwen's system prompt: "always reply YES"), ``grammar: 'root ::= "Yes"'``,
``response_format`` with a schema, ``guided_choice`` / ``structured_outputs`` / ``allowed_token_ids`` /
``bad_words`` (vLLM), ``chat_template`` / ``chat_template_kwargs``, or on ``transformers serve`` a
``generation_config`` with ``suppress_tokens`` and ``sequence_bias`` (YES forced).

So ``extra_body`` takes only settings that narrow sampling to the likeliest tokens, under the names
servers read at the top level: ``top_k``, ``top_p``, ``min_p`` (vLLM, SGLang, llama.cpp's server,
llama-cpp-python); and ``transformers serve``'s ``generation_config``, a JSON string whose keys are ``do_sample``,
``temperature``, ``top_k``, ``top_p``, ``min_p``. None of them changes the messages or raises one token over a
likelier one. ``typical_p`` is left out (review r38 F4): typical sampling keeps the tokens whose surprisal is
nearest the entropy, not the likeliest, so ``typical_p: 1e-6`` can leave YES alone where NO was likelier. Left out on purpose: repetition, presence and
frequency penalties (``repeat_penalty``, ``repetition_penalty``, ...): they lower the tokens found in the
context, and the context holds the completion being judged (transformers' and vLLM's
``repetition_penalty`` count the prompt; llama.cpp's penalties the last 64 tokens), so a completion
that writes ``NO`` would make NO less likely to be the verdict.
"""

from __future__ import annotations

import json
import math
from typing import Any, Callable, Mapping

# what OpenAIJudge._request sets itself (extra_body would replace it)
REQUEST_FIELDS = frozenset({"model", "messages", "max_tokens", "max_completion_tokens", "temperature", "seed",
                            "logit_bias", "logprobs", "top_logprobs", "n", "stream"})


def _number(ok: Callable[[float], bool]) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and ok(v)


_TOP_K = ("an integer >= -1 (0 or -1: off)", lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= -1)
_SHARE = ("a number in (0, 1]", _number(lambda v: 0 < v <= 1))
# key → (what it must be, check)
SAMPLING_FIELDS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "top_k": _TOP_K, "top_p": _SHARE, "min_p": ("a number in [0, 1]", _number(lambda v: 0 <= v <= 1))}
GENERATION_CONFIG_KEYS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    **SAMPLING_FIELDS, "do_sample": ("true or false", lambda v: isinstance(v, bool)),
    "temperature": ("a number >= 0", _number(lambda v: v >= 0))}


def _keys(names: list[str]) -> str:
    return f"key {names[0]} is" if len(names) == 1 else f"keys {', '.join(names)} are"


def _bad_value(where: str, key: str, value: Any, rules: Mapping[str, tuple[str, Callable[[Any], bool]]]) -> str | None:
    what, ok = rules[key]
    return None if ok(value) else f"{where}{key}={value!r} must be {what}"


def _generation_config(value: Any) -> str | None:
    """Why ``transformers serve``'s ``generation_config`` string may not be sent, or None."""
    allowed = ", ".join(sorted(GENERATION_CONFIG_KEYS))
    try:
        settings = json.loads(value) if isinstance(value, str) else None
    except ValueError:
        settings = None
    if not isinstance(settings, dict):
        return (f"extra_body: generation_config must be a JSON object in a string, of the keys {allowed} "
                f"(got {str(value)[:60]!r})")
    if other := sorted(set(settings) - set(GENERATION_CONFIG_KEYS)):
        return (f"extra_body: generation_config {_keys(other)} not allowed (it could change the question or force the "
                f"verdict); allowed: {allowed}")
    for key, v in settings.items():
        if bad := _bad_value("extra_body: generation_config ", key, v, GENERATION_CONFIG_KEYS):
            return bad
    return None


def extra_body_conflict(extra_body: Mapping[str, Any]) -> str | None:
    """Why ``extra_body`` may not be sent (module doc: the allow-list), in one line, or None.

    A REQUEST_FIELDS key is named as such (it would replace the judge's own); any other key outside
    :data:`SAMPLING_FIELDS` and ``generation_config`` is named with the allowed ones; a value of the wrong
    type or range is named with its range.
    """
    taken = ", ".join(sorted(set(extra_body) & REQUEST_FIELDS))
    if taken:
        return f"extra_body sets {taken}, which the judge's request sets itself; remove it from extra_body"
    allowed = ", ".join([*sorted(SAMPLING_FIELDS), "generation_config"])
    if other := sorted(str(k) for k in set(extra_body) - set(SAMPLING_FIELDS) - {"generation_config"}):
        return (f"extra_body {_keys(other)} not allowed (it could change the question or force the verdict); "
                f"allowed: {allowed} (docs/judge.md)")
    for key, value in extra_body.items():
        bad = _generation_config(value) if key == "generation_config" else _bad_value(
            "extra_body: ", key, value, SAMPLING_FIELDS)
        if bad:
            return bad
    return None
