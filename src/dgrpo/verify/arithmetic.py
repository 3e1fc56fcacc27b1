"""Exact, bounded evaluation of the arithmetic written in a completion.

Parses arithmetic expressions over tokens (:mod:`dgrpo.verify.tokens`) with exact rational numbers
(:class:`fractions.Fraction`); nothing is ever passed to ``eval``. Every path is bounded so that
adversarial text cannot hang the checker:

- a number over ``max_digits`` digits has no value (see :mod:`dgrpo.verify.tokens`);
- an intermediate value whose numerator or denominator needs more than ``max_bits`` bits is an
  error (so ``9^9^9`` or a 10,000-factor product stops early), and a power is computed only when
  its exponent is an integer and ``bits(base) × |exponent| <= max_bits``;
- brackets nest at most ``max_depth`` deep and are matched once up front (an unmatched ``(`` costs
  O(1)); runs of more than two signs are no number; sums and products of any length are loops,
  not recursion, so a 10,000-term expression is parsed in one linear pass.

What an expression may contain: numbers, number words up to the billions (``twenty-five``,
``one hundred and five``; ``half``), ``+ - * / ^``, ``x``, ``plus``, ``minus``, ``times``,
``multiplied by``, ``divided by``, ``of`` after a percentage or fraction (``50% of 80``), brackets,
implicit products ``27(1/3)``, ``(1/2) 278``, LaTeX ``\\times``, ``\\cdot``, ``\\div``, ``\\frac{a}{b}``,
mixed numbers ``3 1/2``, scale words ``1.5 million``, ``50 percent``; up to five unit words between a
number and the next operator (``3 apples + 4 apples``, ``$20/hour * 35 hours``, ``65-minute``,
``93 (average) * 5``). A fraction written tight (``1/2``) binds before spaced operators:
``1 1/2 / 1/2 = 3``. A letter glued to a number that is used as a variable in the text (``2B``,
``4m``, always ``x``, ``y``, ``z``, ``n``) makes the expression algebra, not arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from dgrpo.verify.tokens import (AFTER_NUMBER, APPROX_WORDS, BEFORE_SIGNED, CONNECTIVES, CURRENCY, EQ_WORDS, LATEX_OPS,
                                 OP_WORDS, RESERVED, SCALES, SMALL, TENS, Token, tokenize)

__all__ = ["Expr", "Parser", "Token", "tokenize", "APPROX_WORDS", "BEFORE_SIGNED", "EQ_WORDS", "CONNECTIVES", "CURRENCY"]


@dataclass
class Expr:
    """A parsed arithmetic expression over tokens ``[start, end)``."""

    start: int
    end: int
    value: Fraction | None
    error: str | None = None  # why value is None ("division by zero", "a variable", ...)
    compound: bool = False  # has at least one operator
    leading: Token | None = None  # the number it starts with, when it starts with a plain number
    fractionish: bool = False  # a percentage or a fraction: "of" after it multiplies
    fraction: bool = False  # exactly a fraction written tight, "48/2" or "3/4"
    words: bool = False  # number words only ("one")
    percent: bool = False  # contains a percentage
    values: tuple = ()  # the numbers written in it and its intermediate results (at most MAX_VALUES)
    half: Fraction | None = None  # a single number: half a unit of its last written decimal (None: integer)
    half0: Fraction | None = None  # the same, integers included


MAX_VALUES = 64


def variables(toks: list[Token]) -> set[str]:
    """Letters used as variables: written alone ("Let L be", "m + h") or glued to a number twice ("2B", "B/2")."""
    alone = {b.text for a, b in zip([None, *toks], toks) if b.kind == "word" and len(b.text) == 1
             and b.text not in ("a", "i") and not (a is not None and a.kind in ("num", "rp") and b.start == a.end)}
    glued: dict[str, int] = {}
    for a, b in zip(toks, toks[1:]):
        if a.kind in ("num", "rp") and b.kind == "word" and len(b.text) == 1 and b.start == a.end:
            glued[b.text] = glued.get(b.text, 0) + 1
    return alone | {w for w, n in glued.items() if n >= 2} | {"x", "y", "z", "n"}


class Parser:
    """Recursive-descent parser with exact, bounded evaluation over a token list."""

    def __init__(self, toks: list[Token], max_bits: int = 4096, max_depth: int = 16):
        self.toks, self.max_bits, self.max_depth = toks, max_bits, max_depth
        self.variables = variables(toks)
        self.too_deep: int | None = None  # index of the first bracket nested deeper than max_depth
        # matching brackets, found once: an unmatched "(" is rejected in O(1), so text such as
        # "( 1 + ( 1 + ( 1 + ..." costs linear time
        self.match: dict[int, int] = {}
        stack: list[int] = []
        pairs = {")": "(", "]": "[", "}": "{"}
        for k, t in enumerate(toks):
            if t.kind == "lp":
                stack.append(k)
            elif t.kind == "rp":
                if stack and toks[stack[-1]].text == pairs[t.text]:
                    self.match[stack.pop()] = k
                else:
                    stack.clear()

    # ----- token helpers -----
    def _tok(self, i: int) -> Token | None:
        return self.toks[i] if 0 <= i < len(self.toks) else None

    def _word(self, i: int, *words: str) -> bool:
        t = self._tok(i)
        return t is not None and t.kind == "word" and t.text in words

    def _unit_word(self, i: int) -> bool:
        t = self._tok(i)
        return t is not None and t.kind == "word" and t.text not in RESERVED and t.text not in self.variables

    def _gap(self, i: int) -> int:
        """Characters between token i - 1 and token i."""
        return self.toks[i].start - self.toks[i - 1].end

    def skip_units(self, i: int, limit: int = 5) -> int:
        """Index after up to ``limit`` unit words (``apples``, ``/hour``, ``per hour``) from ``i``."""
        n = 0
        while n < limit:
            t = self._tok(i)
            if self._unit_word(i):
                i += 1
            elif t is not None and t.kind == "op" and t.text == "/" and self._unit_word(i + 1):
                i += 2
            elif self._word(i, "per") and self._unit_word(i + 1):
                i += 2
            elif (t is not None and t.text == "-" and self._gap(i) == 0 and self._unit_word(i + 1)
                  and self._gap(i + 1) == 0):
                i += 2  # "65-minute concert"
            elif t is not None and t.kind == "lp" and self._unit_word(i + 1) and (c := self._tok(i + 2)) and c.kind == "rp":
                i += 3  # "93 (average) * 5 (tests)"
            else:
                break
            n += 1
        return i

    def _op(self, i: int, ops: str) -> tuple[str, int] | None:
        """The operator at ``i`` among ``ops`` and the index after it."""
        t = self._tok(i)
        if t is None:
            return None
        if t.kind == "op" and t.text in ops:
            return t.text, i + 1
        if t.kind == "latex" and LATEX_OPS.get(t.text, "?") in ops:
            return LATEX_OPS[t.text], i + 1
        if t.kind == "word" and OP_WORDS.get(t.text, "?") in ops:
            if t.text in ("multiplied", "divided"):
                return (OP_WORDS[t.text], i + 2) if self._word(i + 1, "by") else None
            return OP_WORDS[t.text], i + 1
        return None

    def dangling(self, e: Expr) -> bool:
        """An operator after ``e`` applied to a word: ``3 * x``, ``25 + his 1 teacher`` (not ``5-year``, ``/hour``)."""
        t = self._tok(e.end)
        op = self._op(e.end, "+-*/^") if t is not None and t.kind == "op" else None  # "70 times before" is prose
        nxt = self._tok(op[1]) if op else None
        if nxt is None or nxt.kind != "word" or nxt.text in BEFORE_SIGNED:
            return False
        if t.text == "-" and self._gap(e.end) == 0 and self._gap(op[1]) == 0:
            return False  # a hyphenated word: "5-year-old"
        return not (op[0] == "/" and self._unit_word(op[1]) and nxt.text not in self.variables)

    # ----- bounded arithmetic -----
    def _check(self, v: Fraction) -> str | None:
        if max(v.numerator.bit_length(), v.denominator.bit_length()) > self.max_bits:
            return f"over the limit: a value over {self.max_bits} bits (max_bits)"
        return None

    def _apply(self, op: str, a: Expr, b: Expr) -> tuple[Fraction | None, str | None]:
        if a.error or b.error:
            return None, a.error or b.error
        x, y = a.value, b.value
        if op == "+":
            v = x + y
        elif op == "-":
            v = x - y
        elif op == "*":
            v = x * y
        elif op == "/":
            if y == 0:
                return None, "division by zero"
            v = x / y
        else:  # "^"
            if y.denominator != 1:
                return None, "a power with a non-integer exponent"
            bits = max(x.numerator.bit_length(), x.denominator.bit_length(), 1)
            if abs(y.numerator) > self.max_bits or bits * abs(y.numerator) > self.max_bits:
                return None, f"over the limit: a value over {self.max_bits} bits (max_bits)"
            if x == 0 and y < 0:
                return None, "division by zero"
            v = x ** int(y)
        err = self._check(v)
        return (None, err) if err else (v, None)

    def _join(self, op: str, a: Expr, b: Expr, fractionish: bool = False) -> Expr:
        v, err = self._apply(op, a, b)
        values = (a.values + b.values + ((v,) if v is not None else ()))[:MAX_VALUES]
        return Expr(a.start, b.end, v, err, True, a.leading, fractionish, percent=a.percent or b.percent, values=values)

    # ----- grammar -----
    def expr(self, i: int, depth: int = 0) -> Expr | None:
        """sum := product (("+" | "-" | plus | minus) product)*, unit words allowed before operators."""
        e = self.product(i, depth)
        while e is not None:
            op = self._op(self.skip_units(e.end), "+-")
            right = self.product(op[1], depth) if op else None
            if right is None:
                break
            e = self._join(op[0], e, right)
        return e

    def product(self, i: int, depth: int) -> Expr | None:
        """product := power (("*" | "/" | x | times | of | implicit) power)*."""
        e = self.power(i, depth)
        while e is not None:
            op = self._op(self.skip_units(e.end), "*/")
            if op is None and e.fractionish and self._word(e.end, "of"):
                op = ("*", e.end + 1)
            nxt = self._tok(e.end)
            if op is None and nxt is not None and self._gap(e.end) <= 1 and (
                    nxt.kind == "lp" or (nxt.kind == "num" and self.toks[e.end - 1].kind == "rp" and e.compound)):
                op = ("*", e.end)  # 27(1/3), 1/2 (68), (1/2) 278
            right = self.power(op[1], depth) if op else None
            if right is None:
                break
            e = self._join(op[0], e, right, op[0] == "/" or right.fractionish)
        return e

    def power(self, i: int, depth: int) -> Expr | None:
        """power := unary ("^" unary)*, folded from the right without recursion."""
        base = self.unary(i, depth)
        if base is None:
            return None
        chain = [base]
        while (op := self._op(chain[-1].end, "^")) and (nxt := self.unary(op[1], depth)) is not None:
            chain.append(nxt)
        e = chain[-1]
        for left in reversed(chain[:-1]):
            e = self._join("^", left, e)
        return e

    def unary(self, i: int, depth: int) -> Expr | None:
        """unary := ("-" | "+")* atom."""
        sign, j = 1, i
        while (t := self._tok(j)) is not None and t.kind == "op" and t.text in "+-":
            sign, j = (-sign if t.text == "-" else sign), j + 1
            if j - i > 2:  # "- - - 5" is no number (and reading a long run of signs would cost quadratic time)
                return None
        a = self.atom(j, depth)
        if a is None or j == i:
            return a
        a.start, a.leading = i, None
        if a.value is not None:
            a.value = sign * a.value
        return a

    def atom(self, i: int, depth: int) -> Expr | None:
        """atom := number | number words | "(" sum ")" | \\frac{sum}{sum}."""
        t = self._tok(i)
        if t is None:
            return None
        if t.kind == "num":
            return self._number_atom(i, t)
        if t.kind == "word":
            return self._words_atom(i)
        if t.kind == "lp" and depth >= self.max_depth and self.too_deep is None:
            self.too_deep = i
        if t.kind == "lp" and depth < self.max_depth and i in self.match:
            inner = self.expr(i + 1, depth + 1)
            if inner is None or self.skip_units(inner.end) != self.match[i]:  # "(5280 feet/1 mile)"
                return None
            e = Expr(i, self.match[i] + 1, inner.value, inner.error, inner.compound, None, inner.fractionish,
                     percent=inner.percent, values=inner.values)
            return self._glued_variable(e)
        if t.kind == "latex" and t.text in ("\\frac", "\\dfrac", "\\tfrac") and depth < self.max_depth:
            num = self.atom(i + 1, depth + 1)
            den = self.atom(num.end, depth + 1) if num else None
            if den is None:
                return None
            e = self._join("/", num, den, True)
            e.start, e.leading = i, None
            return e
        return None

    def _glued_variable(self, e: Expr) -> Expr:
        """``2x``, ``4m``, ``(5/2)x``: a variable glued to a number is algebra, not arithmetic."""
        nxt = self._tok(e.end)
        if nxt is not None and nxt.kind == "word" and nxt.start == self.toks[e.end - 1].end and nxt.text in self.variables:
            after = self._tok(e.end + 1)
            if not (nxt.text == "x" and after is not None and after.kind in ("num", "lp")):  # 3x4 is a product
                e.error, e.end = "a variable", e.end + 1
        return e

    def _number_atom(self, i: int, t: Token) -> Expr:
        e = Expr(i, i + 1, t.value, t.error, False, t, t.percent, percent=t.percent,
                 values=(t.value,) if t.value is not None else (), half=t.half, half0=t.half0)
        nxt, a, b = self._tok(i + 1), self._tok(i + 2), self._tok(i + 3)
        if nxt is not None and nxt.kind == "word" and t.value is not None and not t.percent:
            if nxt.text in AFTER_NUMBER:  # 1.5 million
                e.value, e.end, e.leading = t.value * AFTER_NUMBER[nxt.text], i + 2, None
                e.half = e.half0 = None
                return e
            if nxt.text == "percent":
                e.value, e.end, e.leading, e.fractionish, e.percent = t.value / 100, i + 2, None, True, True
                e.half = e.half0 = None
                return e
        plain = lambda x: x is not None and x.kind == "num" and x.value is not None and not (x.percent or x.currency)
        # mixed number "3 1/2": an integer, one space, a proper fraction written without spaces
        if (plain(t) and plain(nxt) and plain(b) and a is not None and a.text == "/" and self._gap(i + 1) == 1
                and self._gap(i + 2) == 0 and self._gap(i + 3) == 0 and all(x.value.denominator == 1 for x in (t, nxt, b))
                and 0 < nxt.value < b.value):
            e.value, e.end, e.leading = t.value + nxt.value / b.value, i + 4, None
            e.half = e.half0 = None
            return self._glued_variable(e)
        # a tight fraction "1/2" binds before spaced operators: "1 1/2 / 1/2 = 3", "6 / 1/2 = 12"
        if (t.value is not None and not t.percent and nxt is not None and nxt.text == "/" and plain(a)
                and self._gap(i + 1) == 0 and self._gap(i + 2) == 0 and not (b is not None and b.text == "^")):
            den = Expr(i + 2, i + 3, a.value, values=(a.value,))
            f = self._join("/", e, den, True)
            f.fraction, f.leading = True, None
            return self._glued_variable(f)
        return self._glued_variable(e)

    def _words_atom(self, i: int) -> Expr | None:
        """Number words: "two", "twenty-five", "one hundred and five", "three thousand"; "half"."""
        if self._word(i, "half"):
            return Expr(i, i + 1, Fraction(1, 2), None, False, None, True, words=True, values=(Fraction(1, 2),))
        total, current, j, seen, last = 0, 0, i, False, ""
        while (t := self._tok(j)) is not None and t.kind == "word":
            w = t.text
            tens, _, unit = w.partition("-")
            if last == "small" or (last == "tens" and not (w in SMALL and 0 < SMALL[w] < 10)):
                if w in SMALL or w in TENS or unit:
                    break  # "one one", "twenty thirty": two numbers, not one
            if unit and tens in TENS and unit in SMALL and 0 < SMALL[unit] < 10:  # "twenty-five"
                current, j, last = current + TENS[tens] + SMALL[unit], j + 1, "small"
            elif w in SMALL or w in TENS:
                current, j, last = current + SMALL.get(w, TENS.get(w, 0)), j + 1, "small" if w in SMALL else "tens"
            elif w == "hundred" and seen:
                current, j, last = current * 100, j + 1, "scale"
            elif w in SCALES and seen:
                total, current, j, last = total + current * SCALES[w], 0, j + 1, "scale"
            elif w == "and" and seen and self._tok(j + 1) is not None and self._tok(j + 1).text.partition("-")[0] in {
                    *SMALL, *TENS}:
                j += 1
            else:
                break
            seen = True
        if not seen:
            return None
        v = Fraction(total + current)
        return Expr(i, j, v, None, False, None, words=True, values=(v,))
