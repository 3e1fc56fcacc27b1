"""Reading the numbers an answer block writes, for the one-answer rule (:mod:`dgrpo.rewards.math`).

:func:`plain` rewrites the typographic forms of one number into ASCII a regex reads: vulgar fractions
(``½`` → ``1/2``, ``1½`` → ``3/2``), unit powers dropped (``54 m²`` → ``54 m``) while any other
superscript stays a power (``5²`` → ``5^2``, ``y²`` → ``y^2``: never the digits ``52``), NFKC, unit
powers in ASCII dropped too (``18 cm^2``, ``18 m2``, ``3 s^-1`` → ``18 cm``, ``18 m``, ``3 s``), LaTeX
fractions (``\\frac{3}{4}``, ``\\frac12`` → ``3/4``, ``1/2``), a dash or minus sign before a digit as a
minus (``–5`` → ``-5``), ``minus 5`` / ``negative 5`` → ``-5``, scientific notation written with a
power of ten (``1.2 × 10^3``, ``1.2×10³`` → ``1.2e3``).

:func:`numbers_in` lists every number as an exact :class:`~fractions.Fraction` (thousands grouped by
commas or by spaces, ``1,728`` and ``1 728``). :func:`hedged` says whether the text qualifies its
number instead of stating it: a range or bound (``at least 12``, ``more than 11``, ``12 or so``,
``over 12``, ``13+``, ``13 and up``, ``13 max``, ``12..13``, ``≥``, ``±``), doubt (``13?``, ``13-ish``,
``13 if I'm right``), a negation (``not 12``), an approximation (``about 12``, ``≈``), a function or constant
applied to it (``√5``, ``5π``, ``5 squared``), or a number in words (``twelve``, ``half``, ``a dozen``;
``one`` as a pronoun, ``that one``, and a number word in a compound adjective, ``18 one-dollar bills``,
are not numbers). Bounds and approximations are one vocabulary whatever joins them (``13 or above``,
``13 and above``, ``beyond 13``, ``13-odd``, ``close to 13``, ``13 (estimate)``, ``13 - x``), and every
Unicode math symbol (category Sm) but ``= + - × ÷ / ⋅`` qualifies (``≳13``). :func:`plain` first decodes
HTML character references (``&gt;13`` is ``>13``) and removes format characters (``o\u200bver``), then folds
the text as the ASR does (:func:`dgrpo.text.fold.fold_letters`: Markdown and LaTeX as rendered, NFKC, every
look-alike letter its ASCII skeleton, ``оver`` with a Cyrillic ``о`` is ``over``).
Only English number words are read: ``13 oder vierzehn`` states one number (docs/rewards.md).
:func:`unrestated` reads a whole number restated in words in brackets as one value when the words spell it
(``Thirteen (13)``, ``13 (thirteen)``; ``fourteen (13)`` stays two).
"""

from __future__ import annotations

import html
import re
import unicodedata
from fractions import Fraction

from dgrpo.text.fold import fold_letters

MAX_DIGITS = 100  # longest number (characters, separators included) read as a value

_SUPER = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻", "0123456789+-")
_SUP = "⁰¹²³⁴⁵⁶⁷⁸⁹"
# A superscript after a unit of length or time that follows a number: "54 m²", "9.8 m/s²", "3 cm³" (the
# power is the unit's). After anything else (a variable, "2y²") it is a power.
_UNIT = (r"(?:[kcmdµμn]?m|in|inch(?:es)?|ft|feet|foot|yd|yards?|mi|miles?|(?:kilo|centi|milli)?met(?:er|re)s?|"
         r"units?|s|sec|seconds?|h|hr|hours?|min|minutes?|kg|g|N|J)")
_UNIT_POWER = re.compile(rf"((?<![\d.,])\d[\d.,]*\s*(?:{_UNIT}[{_SUP}⁻]*\s*[/·⋅*]\s*|{_UNIT}\s+)*{_UNIT})[⁻⁺]?[{_SUP}]+(?![A-Za-z])")
_POWER = re.compile(rf"[⁻⁺]?[{_SUP}]+")  # any other superscript: a power
# The same unit power in ASCII, after NFKC: "18 cm^2", "9.8 m/s^2", "3 s^-1", "18 m2", "5 in3" (a bare digit
# only 2 or 3, written against the unit). "2y^2" and "5^2" keep their power: no unit before it.
_ASCII_POW = r"(?:\s*\^\s*(?:\{\s*[-+]?\d\s*\}|\(\s*[-+]?\d\s*\)|[-+]?\d)|(?<=[A-Za-z])[23])"
_UNIT_POWER_ASCII = re.compile(rf"((?<![\d.,])\d[\d.,]*\s*(?:{_UNIT}(?:{_ASCII_POW})?\s*[/·⋅*]\s*|{_UNIT}\s+)*{_UNIT})"
                               rf"{_ASCII_POW}(?![\w^]|\.\d)")
_VULGAR = re.compile(r"(?:(?<![\d.,])(\d+)[ \u00a0]?)?([\u00bc-\u00be\u2150-\u215e\u2189])")
_FRAC = re.compile(r"\\[dt]?frac\s*(?:\{\s*([^{}]*?)\s*\}|(\d))\s*(?:\{\s*([^{}]*?)\s*\}|(\d))")
_DASH_MINUS = re.compile(r"(?<![\d\w])[\u2010\u2012\u2013\u2212\ufe58\ufe63](?=\s?[\d.])")
_WORD_MINUS = re.compile(r"\b(?:minus|negative)\s+(?=[\d.])", re.IGNORECASE)
_BLANK_RUN = re.compile(r"\s{3,}")  # three or more blanks read as two (never one: "1  728" stays two numbers)
_SCI = re.compile(r"((?<![\d.,])\d+(?:[.,]\d+)*)\s*(?:×|x|\*|·|⋅|\\times|\\cdot)\s*10\s*\^\s*\{?\s*([-+]?\d{1,3})\s*\}?")
# One written number: digits (thousands in groups of exactly 3 after a comma or a space), decimals, an
# exponent and an optional "/ denominator". "1331, 1728" is two numbers, "1,234.5" and "1 728" one.
_GROUPED = r"\d{1,3}(?:,\d{3})+(?!\d)|\d{1,3}(?:[ \u00a0\u2009\u202f]\d{3})+(?![\d,])"
_DIGITS = rf"(?:{_GROUPED}|\d+)(?:\.\d+)?|\.\d+"
LITERAL = re.compile(rf"(?<![\d.])(?P<sign>[-+]?)(?P<num>{_DIGITS})(?:[eE](?P<exp>[-+]?\d{{1,3}}))?"
                     rf"(?:\s*/\s*(?P<den>{_DIGITS}))?(?![\d])")
# A number in words. "one" after a determiner is a pronoun ("that one"), removed first.
_PRONOUN_ONE = re.compile(r"\b(?:that|this|the|which|each|every|any|some|another|right|correct|same|last|first)\s+one\b",
                          re.IGNORECASE)
_WORD = (r"(?:zero|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|"
         r"fifteen|sixteen|seventeen|eighteen|nineteen|twenty|thirty|forty|fifty|sixty|seventy|eighty|"
         r"ninety|hundreds?|thousands?|millions?|billions?|half|halves|quarters?|thirds?|dozens?|twice|"
         r"double|triple|thrice)")
_WORDS = re.compile(rf"\b{_WORD}\b", re.IGNORECASE)
# A number word hyphenated to a word that is no number, a compound adjective: "18 one-dollar bills", "12
# two-liter bottles", "3 twenty-five-cent coins" (removed before the words are looked for). "twenty-five",
# "one-half", "twelve-ish" stay numbers.
_COMPOUND = re.compile(rf"\b(?:{_WORD}[-\u2010\u2011])+(?!{_WORD}\b|ish\b)[^\W\d_]+", re.IGNORECASE)
# Bounds and approximations as a vocabulary, not one phrase each (fourth review of issue 34, where "13 or
# above" was refused and "13 and above" paid): a bound word before the number ("beyond 13", "exceeding 13");
# a bound or comparative after it joined by "and", "&" or a hyphen ("13 and above", "13-plus"); a loose
# suffix ending the answer ("13 plus", "13-odd", "13 something"; "13 odd numbers" is a count); an
# approximation, estimate or stated bound anywhere ("close to", "ballpark", "(estimate)", "lower bound");
# a comparative typo ("more then"); the number in an expression with a variable ("13 - x", "13 minus y").
_BOUND_BEFORE = (r"over|under|above|below|beyond|past|exceeding|exceeds?|surpassing|surpass(?:es)?|upwards\s+of|"
                 r"north\s+of|south\s+of|in\s+excess\s+of|atleast|atmost|min|no\s+(?:more|less|fewer)")
_BOUND_AFTER = (r"above|over|under|below|beyond|up|upwards?|down|downwards?|more|less|fewer|higher|lower|greater|"
                r"bigger|smaller|larger|plus|change|so|thereabouts")
_SUFFIX = r"plus|odd|something|ish|beyond|upwards?|thereabouts"
_APPROX = (r"estimat\w*|est\b\.?|appr\b\.?|apx|approx\w*|ballpark|close\s+to|near|neighbou?rhood|order\s+of|"
           r"bounds?\b|limit|at\s+(?:best|worst|minimum|maximum)|unsure|uncertain|exceed\w*|excess|surpass\w*|"
           r"beyond|minus|atleast|atmost|thereabouts|give\s+or\s+take|"
           # fifth review: a shortfall, an abbreviated circa, "some 13", a rounding, a belief
           r"shy\s+of|short\s+of|c\.(?=\s*[-+$\d.])|ca\.|some(?=\s+[-+$\d.])|round(?:ed|ing)?\b|"
           r"i\s+(?:think|believe|suppose|reckon|assume)\b|tentative|provisional|unconfirmed|unverified|doubtful|"
           r"questionable|preliminary|guesstimat\w*|in\s+theory|theoretically|hmm+\b|uhm*\b|umm+\b|give\s*/\s*take|"
           r"right\s*[?.!]*\s*\Z|rough\b")  # (seventh review, r34f: "13 (rough)", "Rough total: 13")
# Every mathematical symbol (Unicode category Sm) is a relation or an operator on the number ("≳13",
# "⋝13", "≫13", "n ⪯ 13"), except those an answer writes plainly: "=", "+" and "-" (read by the rules
# above), "<" and ">" (a tag's leftover, read above), "×", "÷", "/", "⋅", "∙", "∗", the fraction slash.
_PLAIN_SM = set("=+-<>|/\u00d7\u00f7\u2215\u22c5\u2219\u2217\u2044\u2212")
_SYMBOLS = "".join(chr(c) for c in range(0x2000, 0x2c00) if unicodedata.category(chr(c)) == "Sm"
                   and chr(c) not in _PLAIN_SM) + "\u00ac\u301c\u2053"
# A bound, range, approximation, negation, alternative, function or constant around the number ("<" of a
# tag's leftover, "</answer", is none).
_QUALIFIER = re.compile(
    r"\b(?:or|either|between|maybe|perhaps|possibly|probably|likely|approx(?:imately)?|about|around|roughly|"
    r"nearly|almost|circa|than|least|most|up\s+to|not|never|neither|nor|except|instead|guess|sqrt|root|log|ln|"
    r"sin|cos|tan|pi|infinity|upwards?|max|maximum|minimum|tops|if|unless)\b|n't\b|"
    r"\b(?:over|under|above|below)\s+(?=[-+]?[\d.$\\])|"  # a bound before a number ("12 left over" is none)
    r"\d\s*(?:squared|cubed)\b|\d\s*-?\s*ish\b|\d\s*\+(?!\s*[\d(.])|\d\s*(?:\.\.+|…)\s*-?\d|\?|\band\s+up\b|"
    r"[<>](?![/A-Za-z])|[≤≥≦≧⩽⩾≈≃≅≒~∼≠±∓√∛∜∞π]|\+\s*/?\s*-|"
    r"\\(?:pm|mp|approx|sim|simeq|cong|le|leq|leqslant|ge|geq|geqslant|lt|gt|ne|neq|sqrt|pi|infty|log|ln|sin|cos|"
    r"tan)(?![A-Za-z])|"
    rf"\b(?:{_BOUND_BEFORE})\s+(?=[-+]?[\d.$\\])|\d\s*(?:[-\u2010\u2011]\s*|(?:and|&)\s+)(?:{_BOUND_AFTER})\b|"
    rf"\d\s*[-\u2010\u2011]\s*(?:{_SUFFIX})\b|\d\s+(?:{_SUFFIX})\b(?!\s*[^\W\d_])|\b(?:{_APPROX})|"
    r"\b(?:more|less|fewer|greater|higher|lower|bigger|smaller|larger)\s+then\b|"
    rf"\d\s*[-*/^]\s*[^\W\d_](?![^\W\d_])|[{re.escape(_SYMBOLS)}]", re.IGNORECASE)


_COMMENT = re.compile(r"<!--([\s\S]{0,1000}?)-->")  # an HTML comment a browser hides (bounded: linear time)


def _vulgar(m: re.Match) -> str:
    num, den = unicodedata.normalize("NFKC", m[2]).split("\u2044")
    value = Fraction(int(num), int(den)) + int(m[1] or 0)
    return f"{value.numerator}/{value.denominator}"


def plain(text: str) -> str:
    """``text`` with one number's typographic forms rewritten in ASCII (module docstring).

    ``"54 m²"`` → ``"54 m"``; ``"5²"`` → ``"5^2"``; ``"1½"`` → ``"3/2"``; ``"\\frac12"`` → ``"1/2"``;
    ``"–5"`` → ``"-5"``; ``"1.2 × 10^3"`` → ``"1.2e3"``.
    """
    text = _COMMENT.sub(r" \1 ", text)  # (a comment's text is read: "13 <!-- or 14 -->" holds a second value, r34e)
    text = html.unescape(text)  # ("&gt;13" is ">13", as a browser shows it and as the ASR reads it)
    text = "".join(c for c in text if unicodedata.category(c) != "Cf")  # (zero-width, soft hyphen, joiners)
    text = _VULGAR.sub(_vulgar, text)
    for _ in range(8):  # "kg·m²/s²": one unit power a pass
        text, n = _UNIT_POWER.subn(r"\1", text, count=1)
        if not n:
            break
    text = _POWER.sub(lambda m: "^" + m[0].translate(_SUPER), text)
    text = fold_letters(text).replace("\u2044", "/")  # (the ASR's folding: NFKC, look-alike letters, markup)
    for _ in range(8):
        text, n = _UNIT_POWER_ASCII.subn(r"\1", text, count=1)
        if not n:
            break
    text = _FRAC.sub(lambda m: f"{m[1] or m[2]}/{m[3] or m[4]}", text)
    text = _WORD_MINUS.sub("-", _DASH_MINUS.sub("-", text))
    text = _SCI.sub(lambda m: f"{m[1]}e{m[2]}", text)
    return _BLANK_RUN.sub("  ", text)  # (a run of blanks costs the qualifier scan quadratic time: 30k cost 7 s)


def _value(digits: str) -> Fraction:
    return Fraction(re.sub(r"[, \u00a0\u2009\u202f]", "", digits))


def numbers_in(text: str, limit: int | None = None) -> list[Fraction | None]:
    """Every number ``text`` writes in digits, in order, as exact fractions (after :func:`plain`).

    ``"54 cows"`` → [54]; ``"$1,234.50"`` → [2469/2]; ``"1 728"`` → [1728]; ``"1331 and 1728"`` →
    [1331, 1728]; ``"\\frac{3}{4}"`` → [3/4]; ``"½"`` → [1/2]; ``"-2.5e3"`` → [-2500]; ``"5²"`` → [5, 2].
    A number of more than :data:`MAX_DIGITS` characters, or over a zero denominator, is listed as None:
    it counts as a number but equals none (a completion cannot make the reward parse 10,000 digits).
    ``limit``: stop after that many numbers (``one_number`` needs to know only whether there are two).
    """
    out: list[Fraction | None] = []
    for m in LITERAL.finditer(plain(text)):
        if limit is not None and len(out) >= limit:
            break
        out.append(read(m))
    return out


def read(m: re.Match) -> Fraction | None:
    """The value of one :data:`LITERAL` match, or None (too many digits, a zero denominator)."""
    if len(m["num"]) > MAX_DIGITS or len(m["den"] or "") > MAX_DIGITS:
        return None
    value = _value(m["num"]) * Fraction(10) ** int(m["exp"] or 0)
    if m["den"] is not None:
        den = _value(m["den"])
        if den == 0:
            return None
        value /= den
    return -value if m["sign"] == "-" else value


_ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
         "seventeen eighteen nineteen").split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
_NUMBER_WORD = r"(?:[a-z]+teen|zero|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|twenty|thirty|forty|" \
               r"fifty|sixty|seventy|eighty|ninety|hundred)"
_SPELLED = rf"\b{_NUMBER_WORD}(?:[\s-]+(?:and\s+)?{_NUMBER_WORD})*"
# A whole number restated in words in brackets, either way round (seventh review, r34f): "Thirteen (13)",
# "13 (thirteen)". Kept only when the words spell the digits' value (:func:`spelled`), then read as the digits.
_RESTATED = re.compile(rf"(?P<w1>{_SPELLED})\s*\(\s*(?P<n1>(?<![\d.,])\d{{1,3}}(?![\d.,]))\s*\)"
                       rf"|(?P<n2>(?<![\d.,+-])\d{{1,3}}(?![\d.,]))\s*\(\s*(?P<w2>{_SPELLED})\s*\)", re.IGNORECASE)


def spelled(n: int) -> str:
    """``n`` (0 to 999) in English words, British "and" left out: 13 → ``"thirteen"``, 45 → ``"forty five"``,
    120 → ``"one hundred twenty"``."""
    if n < 20:
        return _ONES[n]
    if n < 100:
        return _TENS[n // 10] + (f" {_ONES[n % 10]}" if n % 10 else "")
    return f"{_ONES[n // 100]} hundred" + (f" {spelled(n % 100)}" if n % 100 else "")


def unrestated(text: str) -> str:
    """``text`` with each whole number that is restated in words in brackets written once, as digits
    (``"Thirteen (13)"``, ``"13 (thirteen)"`` → ``"13"``); a restatement of another value stays (``"fourteen
    (13)"``: two values, refused by the one-answer rule)."""
    def one(m: re.Match) -> str:
        words, digits = (m["w1"], m["n1"]) if m["w1"] else (m["w2"], m["n2"])
        said = " ".join(w for w in re.split(r"[\s-]+", words.lower()) if w != "and")
        return digits if said == spelled(int(digits)) else m[0]
    return _RESTATED.sub(one, text)


_CANONICAL = {"\\sqrt": "√", "sqrt": "√", "root": "√", "\\pi": "π", "pi": "π", "\\infty": "∞", "infinity": "∞"}


def qualifiers(text: str) -> set[str]:
    """The qualifiers :func:`hedged` finds in ``text``, each lower case with its spacing collapsed (``\\sqrt``
    and ``√``, ``\\pi`` and ``π`` as one): ``"about $\\sqrt{2}$"`` → ``{"about", "√"}``. A symbolic oracle
    may hold its own (``$\\sqrt{2}$``, ``$\\pi$``): an answer is refused for the ones the oracle lacks."""
    text = plain(text)
    found = {" ".join(m[0].lower().split()) for m in _QUALIFIER.finditer(text)}
    found |= {m[0].lower() for m in _WORDS.finditer(_COMPOUND.sub(" ", _PRONOUN_ONE.sub(" ", text)))}
    return {_CANONICAL.get(q, q) for q in found}


def hedged(text: str) -> bool:
    """Whether ``text`` qualifies its number rather than stating it (module docstring): ``"at least
    12"``, ``"not 12"``, ``"12 ± 1"``, ``"about 12"``, ``"√5"``, ``"twelve"`` → True; ``"54 cows"``,
    ``"the answer is 12, that one"`` → False."""
    text = plain(text)
    return bool(_QUALIFIER.search(text) or _WORDS.search(_COMPOUND.sub(" ", _PRONOUN_ONE.sub(" ", text))))
