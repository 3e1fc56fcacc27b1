"""Answer checking for math tasks: parse a number from the answer block and compare to the oracle.

Parsing and equivalence use math-verify (Hugging Face), which reads plain numbers, thousands
separators, currency, units and LaTeX: ``54 cows`` → 54, ``$1,234.00`` → 1234, ``\\frac{1}{2}`` → 1/2.
When the answer text holds several numbers math-verify keeps the last one (``3 + 4 = 7`` → 7).
"""

from __future__ import annotations

import re
import threading

from dgrpo.rewards.format import format_reward, parse_completion

_ORACLE = re.compile(r"####[ \t]*([^\n]*?)\s*\Z")  # the last line
_NUMBER = re.compile(r"[-+]?(\d+(\.\d*)?|\.\d+)(/\d+)?")


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
    """Whether the answer text denotes the oracle value (math-verify equivalence).

    ``"54.0"`` matches ``"54"``; ``"$1,234.00"`` matches ``"1234"``; an answer with no number is False.
    """
    from math_verify import parse, verify  # (imported on first use: config checks import the tasks)

    gold = parse(oracle, parsing_timeout=_timeout())
    if not gold:
        raise ValueError(f"oracle answer {oracle!r} is not a number")
    pred = parse(predicted, parsing_timeout=_timeout())
    if not pred:
        return False
    return bool(verify(gold, pred, timeout_seconds=_timeout()))


def math_reward(completion: str, answer: str) -> float:
    """Binary reward of the paper (§3.1, §D.1).

    Returns:
        1.0 when the completion has exactly one ``<think>…</think>`` followed by exactly one
        ``<answer>…</answer>`` and the answer block equals the oracle answer, else 0.0.

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

