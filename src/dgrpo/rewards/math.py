"""Answer checking for math tasks: the answer block must state exactly one number, equal to the oracle's.

One answer, or no reward: a policy (or a peer) that lists several candidates must not be paid for
guessing (docs/rewards.md). :func:`one_number` reads the answer block: words and units around the
number are allowed (``54 cows``, ``$1,234.00``, ``x = 7``, ``\\boxed{18}``, ``3/4``, ``\\frac{3}{4}``), but
a block that states two or more numbers — ``1331 and 1728``, ``1331 or 1728``, ``between 10 and 12``,
``12, no wait 13``, ``3 + 4 = 7``, ``12-13`` — or a number in words beside one in digits (``twelve or
13``) holds no single answer and earns nothing. Numbers compare exactly as fractions (``54.0`` = ``54``,
``0.5`` = ``1/2``). An oracle that is not one number (a symbolic answer of a dataset task) is compared
by math-verify (Hugging Face), and the same answer must then still name no second candidate.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from fractions import Fraction

from dgrpo.rewards.format import format_reward, parse_completion

_ORACLE = re.compile(r"####[ \t]*([^\n]*?)\s*\Z")  # the last line
_NUMBER = re.compile(r"[-+]?(\d+(\.\d*)?|\.\d+)(/\d+)?")
_FRAC = re.compile(r"\\[dt]?frac\s*\{\s*([^{}]*?)\s*\}\s*\{\s*([^{}]*?)\s*\}")  # \frac{a}{b} → a/b
# One written number: a sign, digits (thousands groups of exactly 3 after a comma), decimals, an
# exponent, and an optional "/ denominator". "1331, 1728" is two numbers, "1,234.5" one.
_DIGITS = r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+"
_LITERAL = re.compile(rf"(?<!\d)(?P<sign>[-+\u2212]?)(?P<num>{_DIGITS})(?:[eE](?P<exp>[-+]?\d{{1,3}}))?"
                      rf"(?:\s*/\s*(?P<den>{_DIGITS}))?(?![\d])")
MAX_DIGITS = 100  # longest number (characters, separators included) read as a value
_WORDS = re.compile(r"\b(zero|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|"
                    r"fifteen|sixteen|seventeen|eighteen|nineteen|twenty|thirty|forty|fifty|sixty|seventy|eighty|"
                    r"ninety|hundred|thousand|million|billion)\b", re.IGNORECASE)
_HEDGE = re.compile(r"\b(or|and|between|either|wait|maybe|perhaps)\b|[,;]", re.IGNORECASE)


def _plain(text: str) -> str:
    """NFKC (fullwidth digits are digits) with LaTeX fractions written ``a/b``."""
    return _FRAC.sub(r"\1/\2", unicodedata.normalize("NFKC", text))


def numbers_in(text: str) -> list[Fraction | None]:
    """Every number ``text`` writes in digits, in order, as exact fractions.

    ``"54 cows"`` → [54]; ``"$1,234.50"`` → [2469/2]; ``"1331 and 1728"`` → [1331, 1728];
    ``"\\frac{3}{4}"`` → [3/4]; ``"-2.5e3"`` → [-2500]. A number of more than :data:`MAX_DIGITS`
    characters, or over a zero denominator, is listed as None: it counts as a number but equals none
    (a completion cannot make the reward parse a 10,000-digit integer).
    """
    out: list[Fraction | None] = []
    for m in _LITERAL.finditer(_plain(text)):
        if len(m["num"]) > MAX_DIGITS or len(m["den"] or "") > MAX_DIGITS:
            out.append(None)
            continue
        value = Fraction(m["num"].replace(",", "")) * Fraction(10) ** int(m["exp"] or 0)
        if m["den"] is not None:
            den = Fraction(m["den"].replace(",", ""))
            if den == 0:
                out.append(None)
                continue
            value /= den
        out.append(-value if m["sign"] in ("-", "\u2212") else value)
    return out


def one_number(text: str) -> Fraction | None:
    """The one number an answer states, or None when it states none or more than one.

    More than one: two numbers in digits (``1331 or 1728``, ``between 10 and 12``, ``12, no wait
    13``), or one in digits and one in words (``twelve or 13``). ``"54 cows"`` → 54; ``"x = 7."`` → 7.
    """
    found = numbers_in(text)
    if len(found) != 1 or _WORDS.search(text):
        return None
    return found[0]


def _timeout() -> int | None:
    # math-verify's timeout uses SIGALRM, which only works on the main thread.
    return 5 if threading.current_thread() is threading.main_thread() else None


def parse_oracle(solution: str) -> str:
    """The oracle answer of a GSM8K-format solution, which ends in ``#### N``.

    ``#### -3`` → ``"-3"``; ``#### 1,234`` → ``"1234"``.

    Raises:
        ValueError: the solution's last line is not ``#### N`` with N a number (integer, decimal or
            fraction; thousands commas allowed).
    """
    match = _ORACLE.search(solution)
    if match is None:
        raise ValueError(f"GSM8K answer does not end in a '#### N' line: {solution[-80:]!r}")
    value = match.group(1).replace(",", "").strip()
    if not _NUMBER.fullmatch(value):
        raise ValueError(f"GSM8K answer's '#### N' line holds {value!r}, not a number")
    return value


def answers_match(predicted: str, oracle: str) -> bool:
    """Whether the answer text states exactly one value, the oracle's (see the module docstring).

    ``"54.0"``, ``"54 cows"`` and ``"$54"`` match ``"54"``; ``"53 or 54"``, ``"between 50 and 54"``
    and ``"no number"`` do not. A symbolic oracle (``"x + 1"``) is compared by math-verify, and an
    answer that hedges (``or``, ``and``, ``between``, a comma or semicolon) never matches it.

    Raises:
        ValueError: the oracle itself is neither one number nor an expression math-verify reads.
    """
    gold = numbers_in(oracle)
    if _LITERAL.fullmatch(_plain(oracle).strip().removeprefix("$").removesuffix("%").strip()) and gold[0] is not None:
        return one_number(predicted) == gold[0]  # (a number oracle: "54", "-3", "1,234.5", "3/4")
    from math_verify import parse, verify  # (imported on first use: config checks import the tasks)

    expected = parse(oracle, parsing_timeout=_timeout())
    if not expected:
        raise ValueError(f"oracle answer {oracle!r} is not a number")
    if _HEDGE.search(_plain(predicted)):
        return False
    pred = parse(predicted, parsing_timeout=_timeout())
    return bool(pred) and bool(verify(expected, pred, timeout_seconds=_timeout()))


def math_reward(completion: str, answer: str) -> float:
    """Binary reward of the paper (§3.1, §D.1).

    Returns:
        1.0 when the completion has exactly one ``<think>…</think>`` followed by exactly one
        ``<answer>…</answer>`` and the answer block states one value, the oracle's
        (:func:`answers_match`: no reward for a list or a hedge), else 0.0.

    Raises:
        ValueError: the oracle answer itself is not a number (a data error, never scored as 0).
    """
    parsed = parse_completion(completion)
    if parsed is None:
        return 0.0
    return float(answers_match(parsed.answer, answer))


MAX_FORMAT_WEIGHT = 100.0  # w / (1 + w) ≤ 0.99: a wrong answer's reward stays clearly below a correct one's


def check_format_weight(format_weight: float) -> float:
    """``format_weight`` itself when it is a number in [0, :data:`MAX_FORMAT_WEIGHT`].

    Raises:
        ValueError: otherwise (NaN, negative, or so large that w / (1 + w) rounds to 1 and a
            well-formatted wrong answer would count as correct).
    """
    if not (0.0 <= format_weight <= MAX_FORMAT_WEIGHT):
        raise ValueError(f"format_weight must be a number in [0, {MAX_FORMAT_WEIGHT:g}], got {format_weight}")
    return format_weight


def shaped_math_reward(completion: str, answer: str, format_weight: float = 0.0) -> float:
    """The math reward plus a format reward, scaled back into [0, 1].

    r = (r_answer + w · r_format) / (1 + w), with r_answer = :func:`math_reward` and r_format =
    :func:`dgrpo.rewards.format.format_reward`: the accuracy and format rewards of DeepSeek-R1
    (Guo et al. 2025, §2.2.2), summed with weight w and divided by 1 + w so the maximum stays 1.
    A correct answer is always well formatted, so r = 1 exactly when the answer is correct; a
    well-formatted wrong answer earns w / (1 + w). With w = 0 this is :func:`math_reward`.

    Raises:
        ValueError: ``format_weight`` is negative or not finite, or the oracle answer is not a number.
    """
    check_format_weight(format_weight)
    correct = math_reward(completion, answer)
    if format_weight == 0.0:
        return correct
    return (correct + format_weight * format_reward(completion)) / (1.0 + format_weight)

