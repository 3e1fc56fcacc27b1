"""What the step checker (:mod:`dgrpo.verify.steps`) reports: one :class:`Claim` per arithmetic claim it
found, the :class:`StepVerdict` on a completion, and :func:`fmt`, how a value is written in a reason."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

Status = Literal["true", "false", "unparsed", "skipped"]


@dataclass(frozen=True)
class Claim:
    """One arithmetic claim.

    Attributes:
        text: the claim as written in the original text (``"2 + 2 = 5"``).
        start, end: its character span in the original text.
        relation: ``=``, ``≈`` or an inequality (``<``, ``≥``, ...).
        left, right: the exact values of both sides (None when a side did not parse).
        status: ``true``, ``false``, ``unparsed`` (a side is not arithmetic, or over a limit) or
            ``skipped`` (a unit conversion such as ``1 hour = 60 minutes``).
        reason: why (``"2 + 2 is 4, not 5"``).
        source: ``text`` or ``annotation`` (inside ``<<...>>``).
    """

    text: str
    start: int
    end: int
    relation: str
    left: Fraction | None
    right: Fraction | None
    status: Status
    reason: str
    source: str = "text"


@dataclass(frozen=True)
class StepVerdict:
    """The checker's decision on one completion.

    Attributes:
        accepted: False when a claim is false (or the text is over the limits).
        reason: empty when accepted; else the first false claim, quoted.
        claims: every candidate claim in text order (annotations after the text).
        unparsed_share: unparsed candidates / all candidates (0.0 when there are none).
    """

    accepted: bool
    reason: str
    claims: tuple[Claim, ...] = ()
    unparsed_share: float = 0.0

    @property
    def false_claims(self) -> tuple[Claim, ...]:
        return tuple(c for c in self.claims if c.status == "false")

    def count(self, status: Status) -> int:
        return sum(c.status == status for c in self.claims)


def fmt(v: Fraction | None) -> str:
    """A value for a reason: exact decimal when it terminates within 12 places, else a fraction."""
    if v is None:
        return "?"
    if v.denominator == 1:
        s = str(v.numerator)
        return s if len(s) <= 40 else f"{s[:12]}...({len(s)} digits)"
    d = v.denominator
    for p in (2, 5):
        while d % p == 0:
            d //= p
    if d == 1:
        for places in range(1, 13):
            scaled = v * 10**places
            if scaled.denominator == 1:
                sign = "-" if scaled < 0 else ""
                digits = str(abs(scaled.numerator)).rjust(places + 1, "0")
                return f"{sign}{digits[:-places]}.{digits[-places:]}"
    return f"{v.numerator}/{v.denominator}" if len(str(v.numerator)) < 12 else f"≈{float(v):.6g}"
