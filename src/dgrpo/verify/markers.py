"""The judge's solution markers and their removal from untrusted text (docs/judge.md, docs/detector.md).

The judge prompt (:mod:`dgrpo.verify.judge`) and the detector template (:mod:`dgrpo.verify.detector`)
put a completion between ``<<<SOLUTION`` and ``SOLUTION>>>``. A completion must not be able to close
that block early, so every marker is removed from it — to a fixed point: removing one marker can join
the pieces around it into a new one (``<<<SOLU<<<SOLUTIONTION`` → ``<<<SOLUTION`` after one pass of a
plain ``re.sub``), so the result of :func:`strip_markers` holds no marker at all.
"""

from __future__ import annotations

import re

OPEN, CLOSE = "<<<SOLUTION", "SOLUTION>>>"
MARKERS = (OPEN, CLOSE)


def strip_markers(text: str) -> str:
    """``text`` with every ``<<<SOLUTION`` and ``SOLUTION>>>`` removed until none is left.

    One left-to-right pass with a stack (the output so far): after each character, a marker that now
    ends the output is popped. The output never holds a marker (a new one can only end at the character
    just added), so the result is a fixed point of marker removal, in O(len(text)) time — not the
    O(len(text)² / 11) of repeating a regex pass until nothing changes on nested input. (Where
    markers overlap, the text it keeps can differ from that of the repeated pass; both hold none.)
    """
    if OPEN not in text and CLOSE not in text:  # no marker: nothing to remove, none can form
        return text
    out: list[str] = []
    for ch in text:
        out.append(ch)
        if ch in "N>" and len(out) >= 11:
            tail = "".join(out[-11:])
            if tail in MARKERS:
                del out[-11:]
    return "".join(out)


# What a reader (an LLM judge) takes for a marker: any case, spaces inside, two or more brackets.
_VARIANT = re.compile(r"<{2,}\s*s\s*o\s*l\s*u\s*t\s*i\s*o\s*n|s\s*o\s*l\s*u\s*t\s*i\s*o\s*n\s*>{2,}", re.IGNORECASE)


def strip_marker_variants(text: str) -> str:
    """``text`` folded (:func:`dgrpo.verify.normalize.fold_prose`: fullwidth, zero-width and other
    invisible characters, spacing) with every marker *variant* removed until none is left: any case,
    whitespace between the letters, two or more ``<`` / ``>`` (``solution>>>``, ``SOLUTION >>>``,
    ``<< solution``). For the judge's prompt, which a model reads; repeated passes are at most
    len(text) / 10 (each removes at least 10 characters). Not folded: look-alike letters of other
    scripts (Cyrillic ``О``)."""
    from dgrpo.verify.normalize import fold_prose

    text = fold_prose(text)
    while True:
        new = _VARIANT.sub("", text)
        if new == text:
            return strip_markers(text)
        text = new
