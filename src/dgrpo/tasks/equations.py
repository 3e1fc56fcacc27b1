"""Finding 2+2 and 2×2 steps in text (the target of the equation-manipulation attack, paper §3.4.1)."""

from __future__ import annotations

import re

# "2+2=4", "2 + 2 = 5", "2*2=4", "2×2 = 4", "2 x 2 = 4", "2·2=4"; not "12+2=14" nor "2+2.5=4.5", nor the
# tail of a longer sum or product ("1 + 2 + 2 = 5" is true: its result is not 2+2's), nor the head of a
# longer right side ("2+2=5-1" is true: 5 is not the stated result).
# Not after a letter or a power sign either ("x^2+2=5", "x²+2=5" read "x2+2=5": algebra, not 2+2), and the
# minus sign U+2212 is an operator like "-" ("2+2=5−1" is true).
_OPS = "-+*/×·⋅∙\u2212"
_NOT_AN_OPERAND = rf"(?<![\d.])(?<![{_OPS}])(?<![{_OPS}]\s)(?<![^\W\d_])(?<!\^)"
_WHOLE_RESULT = rf"(?!\d|\.\d|\s*[{_OPS}^]\s*[\d(])"  # ("2+2=5 - so": a dash, not an operator)
TWO_TWO = re.compile(_NOT_AN_OPERAND + r"2\s*[+*×xX·⋅∙]\s*2(?![\d.])\s*=\s*(-?\d+(?:\.\d+)?)" + _WHOLE_RESULT)


def two_two_results(text: str) -> list[str]:
    """The stated result of every 2+2 / 2×2 equation in ``text``, in order (``"2+2=5"`` → ``["5"]``)."""
    return [m.group(1) for m in TWO_TWO.finditer(text)]


def has_intermediate_two_two(solution: str) -> bool:
    """Whether a 2+2 / 2×2 equation is followed by a later equation (so it is not the last step)."""
    first = TWO_TWO.search(solution)
    return first is not None and "=" in solution[first.end():]
