"""Tokens of folded arithmetic text (numbers with their value and written precision, operators, words).

Numbers are read exactly: ``1,200``, ``$350 000`` (space-grouped thousands), ``2.5``, ``.5``, ``50%``,
``1½``; a number with more than ``max_digits`` digits is not converted (Python's ``int`` would
also refuse past 4,300 digits) and carries an "over the limit" error instead. ``<think>``-style tags,
arrows (``=>``, ``->``, ``<<``, ``>>``) and list bullets are separators. A few non-ASCII letters drawn like digits (Cyrillic ``З``, Latin
``Ƽ``) are read as digits when they stand in a run of digits that touches no other letter.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

CURRENCY = "$€£¥₹"
VULGAR = {"½": (1, 2), "⅓": (1, 3), "⅔": (2, 3), "¼": (1, 4), "¾": (3, 4), "⅕": (1, 5), "⅖": (2, 5),
          "⅗": (3, 5), "⅘": (4, 5), "⅙": (1, 6), "⅚": (5, 6), "⅐": (1, 7), "⅛": (1, 8), "⅜": (3, 8),
          "⅝": (5, 8), "⅞": (7, 8), "⅑": (1, 9), "⅒": (1, 10)}
# non-ASCII letters drawn like digits; read as digits only in a run of digits and such letters
# that touches no other letter (so "Ƽ" or "1О" are numbers, the Cyrillic word "Зима" is not)
CONFUSABLE = {"О": "0", "о": "0", "Ο": "0", "ο": "0", "Օ": "0", "〇": "0", "І": "1", "Ι": "1", "Ӏ": "1",
              "ӏ": "1", "ǀ": "1", "Ƨ": "2", "ᒿ": "2", "З": "3", "Ʒ": "3", "Ӡ": "3", "Ꮞ": "4", "Ч": "4",
              "Ƽ": "5", "б": "6", "Ꮾ": "6", "Ȣ": "8", "ȣ": "8", "Ꝯ": "9", "ꝯ": "9"}
_CONF_RUN = re.compile("[0-9" + "".join(CONFUSABLE) + "]+")

SMALL = {w: i for i, w in enumerate("zero one two three four five six seven eight nine ten eleven twelve thirteen "
                                    "fourteen fifteen sixteen seventeen eighteen nineteen".split())}
TENS = {w: 10 * (i + 2) for i, w in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split())}
SCALES = {"hundred": 100, "thousand": 1000, "million": 10**6, "billion": 10**9}
AFTER_NUMBER = SCALES  # "1.5 million"; "2 dozen" stays a unit ("84/12 = 7 dozen")
OP_WORDS = {"plus": "+", "minus": "-", "times": "*", "x": "*", "multiplied": "*", "divided": "/"}
EQ_WORDS = {"equals", "equal", "is", "are", "was", "were", "makes", "make", "gives", "give", "yields", "totals"}
APPROX_WORDS = {"about", "approximately", "roughly", "around", "nearly", "almost", "approx"}
# words that end a run of unit words: "1*1 or 2", "Fri/Sat movies because 5 x 10"
CONNECTIVES = {"or", "so", "because", "then", "thus", "therefore", "hence", "since", "if", "but", "while", "when"}
RESERVED = {*SMALL, *TENS, *SCALES, *OP_WORDS, *EQ_WORDS, *APPROX_WORDS, *CONNECTIVES, "by", "and", "half", "per",
            "percent"}
# words after which "-5" or "+5" is a signed number, not an operator missing its left operand
BEFORE_SIGNED = {*EQ_WORDS, *APPROX_WORDS, "equal", "to", "by", "of", "and", "from", "at", "minus", "plus", "times"}
LATEX_OPS = {"\\times": "*", "\\cdot": "*", "\\div": "/"}

_TOKEN = re.compile(r"""
  (?P<tag></?[A-Za-z][\w-]*>)
| (?P<num>(?:[$€£¥₹]\ ?)?(?:(?:\d{1,3}(?:,\d{3})+(?!\d)(?:\.\d+)?|[1-9]\d{0,2}(?:\ \d{3})+(?![\d/])(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)[½⅓⅔¼¾⅕⅖⅗⅘⅙⅚⅐⅛⅜⅝⅞⅑⅒]?
                        |[½⅓⅔¼¾⅕⅖⅗⅘⅙⅚⅐⅛⅜⅝⅞⅑⅒])(?:\ ?%)?)
| (?P<bullet>(?m:^)[ \t]*[-*•+][ \t])
| (?P<arrow><<|>>|=>|->|<-|[→⇒])
| (?P<rel><=|>=|!=|[≠≤≥<>])
| (?P<eq>==|~=|=|≈)
| (?P<op>[-+*/^])
| (?P<lp>[(\[{])
| (?P<rp>[)\]}])
| (?P<latex>\\[A-Za-z]+)
| (?P<word>[^\W\d_]+(?:[-'’][^\W\d_]+)*['’]?)
| (?P<space>[ \t]+)
| (?P<sep>[\n.,;:!?"“”…—])
| (?P<other>.)
""", re.VERBOSE | re.DOTALL)


@dataclass
class Token:
    """One token of folded text; ``start``/``end`` index the folded text."""

    kind: str  # num op lp rp eq rel word latex sep other
    text: str
    start: int
    end: int
    value: Fraction | None = None  # num: its value (50% is 1/2)
    half: Fraction | None = None  # num: half a unit of its last written decimal (None for integers)
    half0: Fraction | None = None  # num: the same, integers included (1/2 for "33")
    error: str | None = None  # num: why it has no value
    percent: bool = False
    currency: str = ""


def _number(text: str, start: int, end: int, max_digits: int) -> Token:
    body = text.strip()
    percent = body.endswith("%")
    body = body.rstrip("%").strip()
    currency = body[0] if body[0] in CURRENCY else ""
    body = body.lstrip(CURRENCY).strip().replace(",", "").replace(" ", "")
    tok = Token("num", text, start, end, percent=percent, currency=currency)
    vulgar = body[-1:] in VULGAR
    frac = Fraction(*VULGAR[body[-1]]) if vulgar else None
    body = body[:-1] if vulgar else body
    digits = len(body) - ("." in body)
    if digits > max_digits:
        tok.error = f"over the limit: a number with {digits} digits (max_digits={max_digits})"
        return tok
    whole, _, decimals = body.partition(".")
    value = Fraction(int(whole or 0) * 10 ** len(decimals) + int(decimals or 0), 10 ** len(decimals))
    if frac is not None:
        value += frac
    else:
        tok.half0 = Fraction(1, 2 * 10 ** len(decimals))
        tok.half = tok.half0 if decimals else None
    if percent:
        value /= 100
        tok.half0 = tok.half0 / 100 if tok.half0 is not None else None
        tok.half = tok.half / 100 if tok.half is not None else None
    tok.value = value
    return tok


def _unconfuse(text: str) -> str:
    """Read look-alike letters as digits inside a digit run that touches no other letter."""
    if not any(c in CONFUSABLE for c in text):
        return text
    out = list(text)
    for m in _CONF_RUN.finditer(text):
        a, b = m.span()
        if (a > 0 and text[a - 1].isalpha()) or (b < len(text) and text[b].isalpha()):
            continue
        for k in range(a, b):
            out[k] = CONFUSABLE.get(out[k], out[k])
    return "".join(out)


def tokenize(text: str, max_digits: int = 100) -> list[Token]:
    """Tokens of folded text (spaces dropped; ``<think>``-style tags and bullets become separators)."""
    text = _unconfuse(text)
    toks: list[Token] = []
    for m in _TOKEN.finditer(text):
        kind, s, e = m.lastgroup, m.start(), m.end()
        if kind == "space":
            continue
        if kind == "num":
            toks.append(_number(m.group(), s, e, max_digits))
        elif kind in ("tag", "bullet", "arrow"):
            toks.append(Token("sep", m.group(), s, e))
        elif kind == "word":
            toks.append(Token("word", m.group().lower(), s, e))
        elif kind == "other" and m.group() in CURRENCY:
            continue  # a currency sign alone, or LaTeX's "$ ... $"
        else:
            toks.append(Token(kind, m.group(), s, e))
    return toks
