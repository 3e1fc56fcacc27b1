"""The judge's solution markers and their removal from untrusted text (docs/judge.md, docs/detector.md).

The judge prompt (:mod:`dgrpo.verify.judge`) and the detector template (:mod:`dgrpo.verify.detector`)
put a completion between ``<<<SOLUTION`` and ``SOLUTION>>>``. A completion must not be able to close
that block early, so every marker is removed from it — to a fixed point: removing one marker can join
the pieces around it into a new one (``<<<SOLU<<<SOLUTIONTION`` → ``<<<SOLUTION`` after one pass of a
plain ``re.sub``), so the result of :func:`strip_markers` holds no marker at all.
"""

from __future__ import annotations

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
