"""Answer checking for math tasks: the answer block must state exactly one number, equal to the oracle's.

One answer, or no reward: a policy (or a peer) that lists several candidates must not be paid for
guessing (docs/rewards.md). :func:`one_number` reads the answer block (:mod:`dgrpo.rewards.numbers`):
words and units around the number are allowed (``54 cows``, ``$1,234.00``, ``x = 7``, ``\\boxed{18}``,
``3/4``, ``\\frac{3}{4}``, ``54 m²``, ``½``, ``1 728``), but a block that states two or more numbers —
``1331 and 1728``, ``1331 or 1728``, ``between 10 and 12``, ``12, no wait 13``, ``3 + 4 = 7``,
``12-13``, ``5²`` (one value written twice, ``13 or 13.0``, is one answer) — or qualifies its number — ``at least 12``, ``not 12``, ``±3``, ``about 12``, ``√5``,
a number in words (``twelve or 13``) — holds no single answer and earns nothing. Numbers compare
exactly as fractions (``54.0`` = ``54``, ``0.5`` = ``1/2``). A tuple oracle (``(1, 2)``) needs the same
numbers in order; an oracle that is not numbers (a symbolic answer of a dataset task) is compared by
math-verify (Hugging Face), and the same answer must then still name no second candidate (the oracle's own
``\\sqrt``, ``\\pi``, ``\\log`` are no hedge). Around its one number an answer must also fit a closed grammar
(:mod:`dgrpo.rewards.answer_form`: an allowed word before it, a noun phrase after it; docs/rewards.md).
"""

from __future__ import annotations

import re
import threading
from fractions import Fraction

from dgrpo.rewards.answer_form import lead_allowed, tail_allowed, well_formed
from dgrpo.rewards.format import format_reward, parse_completion
from dgrpo.rewards.numbers import LITERAL, MAX_DIGITS, hedged, numbers_in, plain, qualifiers, read, unrestated

__all__ = ["MAX_DIGITS", "answers_match", "math_reward", "numbers_in", "one_number", "parse_oracle",
           "shaped_math_reward"]

_ORACLE = re.compile(r"####[ \t]*([^\n]*?)\s*\Z")  # the last line
_NUMBER = re.compile(r"[-+]?(\d+(\.\d*)?|\.\d+)(/\d+)?")
_HEDGE = re.compile(r"\b(and|wait)\b|[,;]", re.IGNORECASE)  # (with hedged(): a symbolic answer's list or hedge)
# A math span of an answer: $…$, $$…$$, \(…\), \[…\], \boxed{…}. Two that differ are two answers.
# A span never contains its own opener, so text of repeated openers with no closer (``\(`` x 16k) is
# scanned once, not once per opener (that cost 2.6 s of host CPU at 32k characters).
_SPANS = re.compile(r"\$\$((?:(?!\$\$).)+?)\$\$|\$([^$]+?)\$|\\\(((?:(?!\\\().)+?)\\\)|\\\[((?:(?!\\\[).)+?)\\\]"
                    r"|\\boxed\s*\{((?:[^{}]|\{[^{}]*\})*)\}", re.DOTALL)
# Between two writings of one value: words and separators, no operator ("13 times 13", "13 - 13" are
# not 13); the "or" of "13 or 13.0" then names no alternative.
_SAME_GAP = re.compile(r"(?!\s*:\s*\Z)[^\W\d_\s]*(?:[\s,;:=(){}$.'\\]+[^\W\d_]*)*", re.DOTALL)  # (not "13:13", a ratio)
_OPERATOR = re.compile(r"\b(?:times|plus|minus|negative|divided|by|over|x|of|per|multiplied|mod|modulo|point|into|out|"
                       r"less|more|add(?:ed)?|subtract(?:ed)?|take|away|from|to|squared|cubed|power|sum|product|"
                       r"difference|frac|cdot)\b", re.IGNORECASE)
MAX_WRITINGS = 3  # times one answer may write its value ("13 cows, i.e. 13 or 13.0")
_ALTERNATIVE = re.compile(r"\b(?:or|either)\b", re.IGNORECASE)
# A number joined to a variable or a term ("1+x", "3 - x", "1/2 +"): a hedge after a number answer ("13+",
# "13 - x"), but a term of a symbolic answer, one expression that math-verify compares with the oracle.
_TERM = re.compile(r"\d\s*(?:\+|[-*/^]\s*[^\W\d_])")
_TUPLE = re.compile(rf"\s*[(\[]?\s*(?:{LITERAL.pattern})(?:\s*[,;]\s*(?:{LITERAL.pattern.replace('?P<', '?P<t_')}))+\s*[)\]]?\s*")


def one_number(text: str) -> Fraction | None:
    """The one number an answer states, or None when it states none, more than one, or qualifies it.

    More than one: two numbers in digits (``1331 or 1728``, ``between 10 and 12``, ``12, no wait
    13``, ``5²``), or one in digits and one in words (``twelve or 13``). Qualified
    (:func:`dgrpo.rewards.numbers.hedged`): ``at least 12``, ``not 12``, ``±3``, ``about 12``, ``√5``.
    ``"54 cows"`` → 54; ``"x = 7."`` → 7; ``"54 m²"`` → 54; ``"18 cm^2"``, ``"18 m2"`` → 18; ``"½"`` → 1/2;
    ``"1 728"`` → 1728; ``"18 one-dollar bills"`` → 18 (a compound adjective, no number word).
    One value written again is still one answer: ``"13 or 13.0"``, ``"13 cows, i.e. 13"`` → 13, at most
    :data:`MAX_WRITINGS` times and with only words and separators between (``"13 - 13"``, ``"13 times
    13"``, ``"13:13"``, ``"13 or 13?"`` → None).
    """
    text = unrestated(plain(text))  # ("Thirteen (13)": one value, written in words and digits)
    found = []
    for m in LITERAL.finditer(text):  # (at most one past the limit: a long list is not read to its end)
        found.append(m)
        if len(found) > MAX_WRITINGS:
            break
    values = {read(m) for m in found}
    if len(values) != 1 or None in values:
        return None
    if len(found) > MAX_WRITINGS:  # ("1 1 1 1", "1, 1, 1, 1": a list, not an answer)
        return None
    if not well_formed(text, found[0].start(), found[-1].end()):  # (the closed grammar: "shy of 13", "13, I think")
        return None
    if len(found) > 1:  # one value written twice ("13 or 13.0", "$13$ (13 dollars)"): its gaps hold no operator
        gaps = [text[a.end():b.start()] for a, b in zip(found, found[1:])]
        if not all(g.strip() and _SAME_GAP.fullmatch(g) and not _OPERATOR.search(g) for g in gaps):
            return None
        pieces = [text[:found[0].start()]]
        for m, gap in zip(found, gaps + [""]):
            pieces += [m[0], _ALTERNATIVE.sub(" ", gap)]
        text = "".join(pieces) + text[found[-1].end():]
    return None if hedged(text) else values.pop()


# Math outside the one expression of a symbolic answer: a digit, an operator, a backslash, a brace, or a letter
# standing alone (a variable; "a" and "I" are words). Words of two letters or more inside the expression must
# be the names of functions and constants.
_MATHY = re.compile(r"[\d+\-*/^=<>\\_{}|]|(?<![^\W\d_])(?![aAI](?![^\W\d_]))[^\W\d_](?![^\W\d_])")
_MATH_NAMES = frozenset("sin cos tan cot sec csc log ln exp sqrt pi infty lim max min mod gcd lcm arcsin arccos "
                        "arctan sinh cosh tanh det frac dfrac tfrac cdot times left right".split())


def _one_expression(text: str) -> bool:
    """Whether a symbolic answer writes one expression and around it only the closed grammar's lead and tail
    (:mod:`dgrpo.rewards.answer_form`): ``"The answer is $x+1$."`` → True; ``"$x+1$ (x+2)"``, ``"x+2 vs.
    $x+1$"``, ``"$x^2$ otherwise x^3"`` → False (sixth review, r34e: a second candidate outside the span)."""
    spans = list(_SPANS.finditer(text))
    if spans:
        lead, tail = text[:spans[0].start()], text[spans[-1].end():]
        between = "".join(text[a.end():b.start()] for a, b in zip(spans, spans[1:]))
        if _MATHY.search(plain(lead + " " + between + " " + tail)):
            return False
    else:
        found = list(_MATHY.finditer(text))
        if not found:
            return True
        lead, tail = text[:found[0].start()], text[found[-1].end():]
        expression = text[found[0].start():found[-1].end()]
        if any(w.lower() not in _MATH_NAMES for w in re.findall(r"(?<![\\\w])[^\W\d_]{2,}", expression)):
            return False
    return lead_allowed(plain(lead)) and tail_allowed(plain(tail))


def _spans_differ(text: str) -> bool:
    """Whether ``text`` has two math spans (``$…$``, ``\\boxed{…}``) of different content."""
    return len({" ".join(next(g for g in m.groups() if g is not None).split()) for m in _SPANS.finditer(text)}) > 1


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

    ``"54.0"``, ``"54 cows"``, ``"$54"`` and ``"54 m²"`` match ``"54"``; ``"53 or 54"``, ``"between 50
    and 54"``, ``"at least 54"``, ``"not 54"`` and ``"no number"`` do not. A tuple oracle (``"(1, 2)"``)
    is matched by an answer that states the same numbers in the same order and nothing else. A symbolic
    oracle (``"x + 1"``) is compared by math-verify, and an answer that hedges (``or``, ``and``,
    ``between``, a bound, a comma or semicolon) or writes two different math spans never matches it.

    Raises:
        ValueError: the oracle itself is neither one number nor an expression math-verify reads.
    """
    gold = numbers_in(oracle)
    written = plain(oracle).strip().removeprefix("$").removesuffix("%").strip()
    if len(gold) == 1 and LITERAL.fullmatch(written) and gold[0] is not None:
        return one_number(predicted) == gold[0]  # (a number oracle: "54", "-3", "1,234.5", "3/4")
    if _TUPLE.fullmatch(written) and None not in gold:  # (a tuple oracle: "(1, 2)", "3, -4")
        return not hedged(predicted) and not _spans_differ(predicted) and numbers_in(predicted) == gold
    from math_verify import parse, verify  # (imported on first use: config checks import the tasks)

    expected = parse(oracle, parsing_timeout=_timeout())
    if not expected:
        raise ValueError(f"oracle answer {oracle!r} is not a number")
    own = qualifiers(oracle) | {m[0].lower() for m in _HEDGE.finditer(plain(oracle))}  # ("$\\sqrt{2}$", "$\\pi$")
    extra = {q for q in qualifiers(predicted) if not _TERM.fullmatch(q)}  # ("$1+x$" = "$x+1$": a sum, r34f)
    extra |= {m[0].lower() for m in _HEDGE.finditer(plain(predicted))}
    if extra - own or _spans_differ(predicted) or not _one_expression(predicted):
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

