"""The ``<think>…</think><answer>…</answer>`` completion format (paper §3.1, §D.1)."""

from __future__ import annotations

import re
from dataclasses import dataclass

_TAGS = ("<think>", "</think>", "<answer>", "</answer>")
# Whitespace (newlines included) may surround the blocks; nothing else may.
_LAYOUT = re.compile(r"\s*<think>(?P<think>.*?)</think>\s*<answer>(?P<answer>.*?)</answer>\s*", re.DOTALL)


@dataclass(frozen=True)
class Parsed:
    """A completion split into its reasoning and its answer (both stripped)."""

    think: str
    answer: str


def parse_completion(text: str) -> Parsed | None:
    """Split a completion into its think and answer blocks.

    The format holds only when the text is exactly one ``<think>…</think>`` followed by exactly one
    ``<answer>…</answer>``, with nothing but whitespace around and between them.

    Returns:
        The two blocks, or None when the format does not hold (e.g.
        ``<think>a</think><think>b</think><answer>c</answer>``).
    """
    if any(text.count(tag) != 1 for tag in _TAGS):
        return None
    match = _LAYOUT.fullmatch(text)
    if match is None:
        return None
    return Parsed(think=match["think"].strip(), answer=match["answer"].strip())


def format_reward(completion: str) -> float:
    """1.0 when :func:`parse_completion` accepts the completion, else 0.0."""
    return float(parse_completion(completion) is not None)
