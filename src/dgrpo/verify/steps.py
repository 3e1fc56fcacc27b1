"""Step checker: every arithmetic claim in a completion's reasoning, checked exactly.

Verifiable rewards check the final answer only; the paper notes that rewards "don't check every
equation in the solution" (Appendix D.1), which is what the 2+2=5 attack exploits. This checker
needs no model: it extracts the claims ``a op b = c`` written in the text, evaluates both sides
with exact rationals (never ``eval``) and rejects a completion with a false claim, quoting it.

What counts as a claim (``text`` is folded first, see :mod:`dgrpo.verify.normalize`):

- every ``=``, ``==``, ``≈``, ``~=``, ``<``, ``>``, ``<=``, ``>=``, ``≠``, ``≤``, ``≥`` is one candidate;
  an expression on each side is parsed (:mod:`dgrpo.verify.arithmetic`). A candidate whose side is
  not arithmetic (``x = 5``, ``Total = 3y``) is *unparsed*; the verdict reports their share;
- ``is``, ``are``, ``was``, ``were``, ``equals``, ``is equal to``, ``makes``, ``gives``, ``yields``,
  ``totals`` are an equality when the left is an expression with an operator and the right starts
  with a number: ``2 + 2 equals 5`` and ``two plus two is five`` are claims, ``there are 5`` is not;
- chains ``2 + 3 = 5 + 4 = 9`` are read as running computations: after ``2 + 3 =`` the number that
  starts the next side (5) must be the value so far; then ``5 + 4 = 9`` is checked. So
  ``2 + 2 = 5 - 1 = 4``, which shows "2 + 2 = 5", is false (a true identity like ``2 + 3 = 1 + 4``
  is rejected too: honest arithmetic rarely restates a sum as another sum);
- ``12 = 12 ounces``, ``1 hour = 60 minutes``: two single numbers with different unit words are a
  unit conversion, *skipped* (not checked); ``1 dozen = 12`` and ``50% = 0.5`` are checked;
- GSM8K's calculator annotations ``<<48/2=24>>`` are checked as claims of their own (so an
  attacker cannot hide ``<<2+2=5>>``) and removed from the text around them.
- layout is looked through (:mod:`dgrpo.verify.layout`): ``2 + 2 =\\n5``, ``= **5**``, ``= <b>5</b>`` are
  ``2 + 2 = 5``; failing closed, a computed left side whose right side does not parse is checked against
  the first number after the relation past markup on its line (``= <i class="a">5</i>``, ``= \\(5\\)``).

Tolerance (stated rounding): two sides agree when ``|a - b| <= max(atol, rtol × max(|a|, |b|), h)``,
where ``h`` (with ``rounding=True``) is half a unit of the last decimal written on a side that is a
single number with decimals: ``1/3 = 0.33`` holds (h = 0.005), ``2.2 + 2.2 = 4`` does not (an integer
gets no rounding), ``10/3 = 3.3333`` holds. Approximate claims (``≈``, ``= about``) also give integers
half a unit and accept a relative error up to ``approx_rtol``. ``StepChecker.exact()`` has no
tolerance at all: ``1/3 = 0.33`` is false.

Limits (adversarial input is handled in linear time, never hangs): texts over ``max_chars`` characters are
rejected unchecked; numbers over ``max_digits`` digits, values over ``max_bits`` bits and brackets over
``max_depth`` deep make that claim unparsed (a 10,000-digit number or 10,000-term chain takes milliseconds).

Not caught (measure or combine with another defense): claims in prose without an operator ("summing 2
cows and 2 pigs gives five animals", "2 and 2 make 5", "twice 2 is 5", "the sum of 2 and 2 is 5"), or
with a word after the relation ("2 + 2 = total 5"); wrong steps that are not arithmetic (a wrong quantity
from the question, a skipped unit conversion); algebra with variables (unparsed); ASCII letters as
digits (``4O`` with a letter O reads "4" followed by the unit "O"); European decimal commas
(``2,5`` is two numbers); ratios and times with ``:``; an equality reached through another false
one in a way the running-chain reading accepts (``2 + 2 = 4 = 5 - 1``: ``4 = 5 - 1`` is true).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from fractions import Fraction

from dgrpo.rewards.format import parse_completion
from dgrpo.verify.arithmetic import APPROX_WORDS, BEFORE_SIGNED, EQ_WORDS, Expr, Parser, Token, tokenize
from dgrpo.verify.layout import blank_markup, continued, number_through_markup, second_result, undecorate, widen
from dgrpo.verify.normalize import normalize, original_span
from dgrpo.verify.step_claims import Claim, Status, StepVerdict, fmt

_BARE_ANSWER = re.compile(r"[-+]?\$?\s*(?:(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)")
_ANNOTATION = re.compile(r"<<([^<>\n]{0,500})>>")
_RELATIONS = {"<": lambda d: d < 0, ">": lambda d: d > 0, "<=": lambda d: d <= 0, "≤": lambda d: d <= 0,
              ">=": lambda d: d >= 0, "≥": lambda d: d >= 0, "!=": lambda d: d != 0, "≠": lambda d: d != 0}


@dataclass(frozen=True)
class StepChecker:
    """Configured step checker; call it on a completion's text.

    Args:
        rtol: relative tolerance (0.01 accepts 1% off).
        atol: absolute tolerance.
        rounding: accept a result written with d decimals when it is the exact value rounded to d
            decimals (half a unit of the last digit, see the module docstring).
        approx_rtol: relative tolerance of ``≈`` / ``= about`` claims.
        max_unparsed_share: reject when the unparsed share is above this (1.0 never rejects).
        max_chars: longer texts are rejected unchecked.
        max_digits: digits of one number; max_bits: bits of any numerator or denominator;
        max_depth: bracket nesting.
        annotations: check GSM8K calculator annotations ``<<a=b>>`` as claims.
        reject_oversized: reject a text with a claim over max_digits / max_bits / max_depth (honest
            reasoning has no 100-digit numbers, and a false claim must not hide behind one).
        excuse_answer: a false claim whose written right side equals the completion's final answer (the
            ``<answer>`` block of a ``<think>…</think><answer>…</answer>`` text read as one number) does not
            reject: a wrong expression that ends at the answer the verifiable reward checks ("7 x 4 = 24" with
            answer 24, a small model's slip). It stays in ``claims`` with status ``false``. Off by default; see
            docs/step_checker.md for what it lets through.

    Raises:
        ValueError: a negative tolerance or a limit below 1 (one line naming the field).
    """

    rtol: float = 0.0
    atol: float = 0.0
    rounding: bool = True
    approx_rtol: float = 0.05
    max_unparsed_share: float = 1.0
    max_chars: int = 100_000
    max_digits: int = 100
    max_bits: int = 4096
    max_depth: int = 16
    annotations: bool = True
    reject_oversized: bool = True
    excuse_answer: bool = False
    _tol: tuple = field(init=False, repr=False, compare=False, default=())

    def __post_init__(self):
        for name in ("rtol", "atol", "approx_rtol", "max_unparsed_share"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"StepChecker: {name} must be >= 0, got {getattr(self, name)!r}")
        for name in ("max_chars", "max_digits", "max_bits", "max_depth"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"StepChecker: {name} must be >= 1, got {getattr(self, name)!r}")
        tol = (Fraction(str(self.rtol)), Fraction(str(self.atol)), Fraction(str(self.approx_rtol)))
        object.__setattr__(self, "_tol", tol)

    @classmethod
    def exact(cls, **kw) -> "StepChecker":
        """A checker with no tolerance at all: ``1/3 = 0.33`` is false."""
        return cls(rtol=0.0, atol=0.0, rounding=False, approx_rtol=0.0, **kw)

    def __call__(self, text: str) -> StepVerdict:
        """Check every arithmetic claim in ``text``; see :class:`StepVerdict`."""
        if not isinstance(text, str):
            raise TypeError(f"StepChecker: text must be a str, got {type(text).__name__}")
        if len(text) > self.max_chars:
            return StepVerdict(False, f"text has {len(text)} characters, over max_chars={self.max_chars}: not checked",
                               (), 1.0)
        folded, origin = normalize(text)
        claims: list[Claim] = []
        if self.annotations:
            pieces, keep = [], []
            last = 0
            for m in _ANNOTATION.finditer(folded):
                keep.append((last, m.start()))
                pieces.append((m.start(1), m.end(1)))
                last = m.end()
            keep.append((last, len(folded)))
            main = "".join(folded[a:b] for a, b in keep)
            main_origin = [o for a, b in keep for o in origin[a:b]]
            claims += self._claims(main, main_origin, text, "text")
            for a, b in pieces:
                claims += self._claims(folded[a:b], origin[a:b], text, "annotation")
        else:
            claims += self._claims(folded, origin, text, "text")
        unparsed = sum(c.status == "unparsed" for c in claims)
        share = unparsed / len(claims) if claims else 0.0
        answer = final_answer(text) if self.excuse_answer else None
        first_false = next((c for c in claims if c.status == "false" and (answer is None or c.right != answer)), None)
        if first_false is not None:
            return StepVerdict(False, f'false claim "{first_false.text}": {first_false.reason}', tuple(claims), share)
        oversized = next((c for c in claims if c.reason.startswith("over the limit")), None)
        if oversized is not None and self.reject_oversized:
            return StepVerdict(False, f'claim "{oversized.text[:80]}" is {oversized.reason}: not checked', tuple(claims),
                               share)
        if share > self.max_unparsed_share:
            return StepVerdict(False, f"{unparsed} of {len(claims)} claims unparsed ({share:.0%}), over "
                                      f"max_unparsed_share={self.max_unparsed_share}", tuple(claims), share)
        return StepVerdict(True, "", tuple(claims), share)

    # ----- extraction -----
    def _claims(self, folded: str, origin: list[int], text: str, source: str, depth: int = 0) -> list[Claim]:
        blanked, held = blank_markup(folded)  # markup read through; what it held checked as text of its own
        toks = undecorate(tokenize(blanked, self.max_digits))
        parser = Parser(toks, self.max_bits, self.max_depth)
        items = self._scan(toks, parser)
        out = []
        if parser.too_deep is not None:
            t = toks[parser.too_deep]
            os, oe = original_span(origin, t.start, t.end)
            out.append(Claim(text[os:oe], os, oe, "=", None, None, "unparsed",
                             f"over the limit: brackets nested deeper than max_depth={self.max_depth}", source))
        for k, item in enumerate(items):
            if not isinstance(item, tuple):
                continue
            kind, a, b, rel, approx = item
            left = items[k - 1] if k > 0 and isinstance(items[k - 1], Expr) else None
            right = items[k + 1] if k + 1 < len(items) and isinstance(items[k + 1], Expr) else None
            right = None if right is not None and continued(toks, right.end) else right  # "= 10.\overline{3}"
            computed = left is not None and left.compound and not left.fraction
            b += approx and b < len(toks) and (toks[b].text == "~" or toks[b].text in APPROX_WORDS)
            hidden = number_through_markup(toks, b) if right is None and computed and left.error is None else None
            if kind == "word" and hidden is None and not (computed and right and toks[right.start].kind in ("num", "word")):
                continue
            s = toks[left.start].start if left else toks[a].start
            e = toks[right.end - 1].end if right else toks[b - 1].end
            if not (left and right):
                s, e = widen(folded, s, e)
            os, oe = original_span(origin, s, e)
            quote = " ".join(text[os:oe].split())
            status, reason, lv, rv = self._judge(toks, parser, left, right, rel, approx)
            second = second_result(toks, right.end, folded) if status == "true" and right and not right.compound else None
            if second is not None:  # "= <s>4</s> 5": both numbers are results
                hidden = (second, False)
            if hidden is not None and hidden[0].value is not None:  # fail closed: "2 + 2 = |5|"
                rv, h = (-1 if hidden[1] else 1) * hidden[0].value, _halves(hidden[0], approx)
                ok = _RELATIONS[rel](lv - rv) if rel in _RELATIONS else self._close(lv, rv, h, approx)
                status, reason = ("true" if ok else "false"), f"{fmt(lv)} {rel} {fmt(rv)} (markup between) is {str(ok).lower()}"
            out.append(Claim(quote, os, oe, rel, lv, rv, status, reason, source))
        if held and depth >= 3:  # markup held in markup held in markup: no honest text nests so deep
            os, oe = original_span(origin, *held[0])
            return out + [Claim(text[os:oe][:80], os, oe, "=", None, None, "unparsed", "over the limit: markup nested 4 deep", source)]
        return out + [c for a, b in held for c in self._claims(folded[a:b], origin[a:b], text, "markup", depth + 1)]

    def _scan(self, toks: list[Token], parser: Parser) -> list:
        """Expressions (Expr), relations (tuples) and breaks (None), in text order."""
        items: list = []
        i, n = 0, len(toks)
        while i < n:
            t = toks[i]
            if t.kind in ("eq", "rel"):
                approx = t.text in ("≈", "~=")
                j = i + 1
                if j < n and ((toks[j].kind == "other" and toks[j].text == "~") or
                              (toks[j].kind == "word" and toks[j].text in APPROX_WORDS)):
                    approx, j = True, j + 1
                rel = "≈" if approx else ("=" if t.kind == "eq" else t.text)
                items.append(("sym", i, i + 1, rel, approx))
                i = j
                continue
            if t.kind == "word" and t.text in EQ_WORDS | {"equal"}:
                j = i + 1
                if t.text == "equal":
                    if not (j < n and toks[j].text == "to"):
                        items.append(None)
                        i += 1
                        continue
                    j += 1
                elif j + 1 < n and toks[j].text == "equal" and toks[j + 1].text == "to":
                    j += 2
                approx = j < n and toks[j].kind == "word" and toks[j].text in APPROX_WORDS
                items.append(("word", i, j, "≈" if approx else "=", approx))
                i = j + approx
                continue
            prev = toks[i - 1] if i > 0 else None
            # "Disney Plus costs 10+10" is prose; "school x 10 students" is a product with a word on its left
            op = parser._op(i, "+-*/^") if t.kind == "op" or t.text == "x" else None
            hyphen = t.text == "-" and parser._gap(i) == 0 and i + 1 < n and parser._gap(i + 1) == 0
            if op and not hyphen and prev is not None and prev.kind in ("num", "rp", "word") and not (
                    prev.kind == "word" and prev.text in BEFORE_SIGNED):
                # an operator whose left operand is not a number ("x + 5", "25 + his 1 teacher"):
                # its right operand starts no expression of its own
                j = parser.skip_units(op[1])
                skipped = parser.expr(j)
                items.append(None)
                i = skipped.end if skipped else op[1]
                continue
            e = parser.expr(i)
            if e is None:
                items.append(None)
                i += 1
                continue
            items.append(e)
            j = parser.skip_units(e.end)
            if j < n and (toks[j].kind in ("eq", "rel") or toks[j].text in EQ_WORDS | {"equal"}):
                i = j  # unit words before the relation: "5 hours * 60 minutes/hour = 300"
                continue
            if e.error is None and parser.dangling(e):
                e.error = "an operator applied to a word"
            i = e.end
        return items

    # ----- checking -----
    def _close(self, a: Fraction, b: Fraction, halves: list[Fraction], approx: bool) -> bool:
        rtol, atol, approx_rtol = self._tol
        tol = max(atol, rtol * max(abs(a), abs(b)), approx_rtol * max(abs(a), abs(b)) if approx else 0)
        if self.rounding or approx:
            tol = max([tol, *halves])
        return abs(a - b) <= tol

    def _judge(self, toks, parser, left, right, rel, approx) -> tuple[Status, str, Fraction | None, Fraction | None]:
        lv = left.value if left else None
        rv = right.value if right else None
        if left is None or right is None:
            side = "left" if left is None else "right"
            return "unparsed", f"no arithmetic on the {side} of '{rel}'", lv, rv
        for e in (left, right):
            if e.error == "division by zero":
                return "false", "division by zero", lv, rv
        if left.error is None and left.compound and right.leading is not None and right.error in (
                "a variable", "an operator applied to a word"):
            # "2 + 2 = 5x", "2 + 2 = 5 + y": the number written after the relation is still a claim
            n = right.leading.value
            if not self._close(lv, n, _halves(right.leading, approx), approx):
                return "false", f"the left side is {fmt(lv)}, not {fmt(n)} ({right.error} follows)", lv, n
        if left.error or right.error:
            return "unparsed", f"{left.error or right.error}", lv, rv
        if rel in _RELATIONS:
            ok = _RELATIONS[rel](lv - rv)
            return ("true" if ok else "false"), f"{fmt(lv)} {rel} {fmt(rv)} is {'true' if ok else 'false'}", lv, rv
        if left.words and not left.compound:
            return "unparsed", "a number word as a label", lv, rv
        lu, ru = _unit(toks, parser, left), _unit(toks, parser, right)
        halves = [h for e in (left, right) if not e.compound for h in _halves(e, approx)]
        close = self._close(lv, rv, halves, approx)
        points = not close and (left.percent or right.percent) and (
            self._close(100 * lv, rv, halves, approx) or self._close(lv, 100 * rv, halves, approx))
        if points:  # "18 / 450 x 100 = 4%", "32 / 96 * 100% = 33.333": percentage points
            return "true", f"{fmt(lv)} {rel} {fmt(rv)} in percentage points", lv, rv
        if not left.compound and not right.compound and (lu or ru) and lu != ru:
            return "skipped", f"a unit conversion ({lu or 'no unit'} to {ru or 'no unit'}), not checked", lv, rv
        if not left.compound and lu and right.compound and not close:
            return "skipped", f"a label ({fmt(lv)} {lu}), not checked", lv, rv
        lead = right.leading.value if right.compound and not right.fraction and right.leading else None
        running = left.compound and lead is not None and self._close(lv, lead, _halves(right.leading, approx), approx)
        if close:
            if left.compound and lead is not None and not running and lead not in left.values:
                # "2 + 2 = 5 - 1" is true as an identity but shows "2 + 2 = 5": a restated sum must
                # start with the value so far or with a number of the left side ("2 * 4 + 3 * 6 = 8 + 18")
                return "false", f"reads as {fmt(lv)} = {fmt(lead)}: {fmt(lead)} is neither the left side nor part of it", lv, rv
            return "true", f"{fmt(lv)} {rel} {fmt(rv)}", lv, rv
        if running:
            return "true", f"running: {fmt(lv)}, then continued", lv, rv
        return "false", f"the left side is {fmt(lv)}, not {fmt(lead if left.compound and lead is not None else rv)}", lv, rv


def final_answer(text: str) -> Fraction | None:
    """The ``<answer>`` block of a formatted completion read as one number (``$1,200``, ``-3``, ``2.5``), else None.

    A text missing the ``<think>`` opening tag is read with it (the task's prefill); a block that is not one number
    (``24 apples``, ``50%``, a program) and a text outside the format give None.
    """
    parsed = parse_completion(text if text.lstrip().startswith("<think>") else "<think>" + text)
    if parsed is None or not _BARE_ANSWER.fullmatch(parsed.answer):
        return None
    return Fraction(parsed.answer.replace("$", "").replace(",", "").replace(" ", ""))


def _halves(t: Token | Expr, approx: bool) -> list[Fraction]:
    """Half a unit of the last written decimal of a number (integers too for approximate claims)."""
    h = t.half0 if approx else t.half
    return [h] if h is not None else []


def _unit(toks: list[Token], parser: Parser, e: Expr) -> str:
    """The unit word after a single number ("12 ounces" -> "ounce"), or its currency sign."""
    t = toks[e.start]
    if t.kind == "num" and t.currency:
        return t.currency
    j = e.end
    if j < len(toks) and parser._unit_word(j):
        w = toks[j].text
        return w[:-1] if w.endswith("s") and len(w) > 3 else w
    return "%" if t.kind == "num" and t.percent else ""


def check_steps(text: str, **config) -> StepVerdict:
    """Check ``text`` with ``StepChecker(**config)``: ``check_steps("2 + 2 = 5").accepted`` is False."""
    return StepChecker(**config)(text)
