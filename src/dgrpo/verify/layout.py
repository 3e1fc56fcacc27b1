"""Layout the step checker looks through: a line break, quote, backtick, markdown emphasis or tag between
a relation and its sides must not hide an arithmetic claim (:func:`undecorate`).

Three layers, each measured on real text (docs/step_checker.md):

* :func:`blank_markup` (on the text): markup a reader reads through — HTML comments and tags with their
  attributes, LaTeX delimiters ``\\( \\) \\[ \\]`` and ``\\text{..}``-style wrappers, ``~~``, ``|``, character
  entities — becomes spaces of the same length (so spans still map back to the original text); what a
  comment or tag held is checked as text of its own;
* :func:`undecorate` (on the tokens): line breaks, quotes, backticks, emphasis around a relation (a word
  relation too: ``2 + 2 is\\n5``);
* :func:`number_through_markup`: failing closed, a computed left side whose right side still does not
  parse is checked against the first number after the relation past whatever markup is left on its line.
"""

from __future__ import annotations

import html
import re

from dgrpo.verify.tokens import EQ_WORDS, Token

_QUOTES = frozenset('"“”„‘’\'`«»')


_HIDING = r"\\(?:phantom|hphantom|vphantom|cancel|bcancel|xcancel|sout|st)\{"  # invisible or struck-out LaTeX
_MARKUP = re.compile(
    r"<!--!?-?>"                                          # an empty comment a browser closes at once
    r"|<!--(.*?)(?:--!?>|$)"                               # an HTML comment (to the end if never closed)
    r"|</?[A-Za-z][A-Za-z0-9:-]*(\s[^<>\n]{0,1000})?/?>"  # an HTML tag and its attributes (not GSM8K's <<a=b>>)
    r"|" + _HIDING + r"([^{}\n]{0,200})\}"                 # \phantom{4}, \cancel{4}: held, checked on its own
    r"|\\[()\[\]]|~~|\||&(?![#A-Za-z])"                  # LaTeX \( \) \[ \], strike-through, table bars, align &
    r"|\\\\|\\(?=[-=+*/<>\n])"                            # LaTeX's \\ (a line break), markdown's \= \+, a line-end \
    r"|\\(?:left|right|[bB]igg?[lr]?|quad|qquad|displaystyle|textstyle|,|;|!)(?![A-Za-z])"  # sizing and spacing
    r"|\\(?:text|mathrm|textbf|mathbf|boxed|underline|emph)\{"  # a LaTeX wrapper's opening (its "}": _WRAPPED)
    r"|\\(?:textcolor|color)\{[A-Za-z]{0,20}\}"             # a colour (what it colours: _WRAPPED)
    r"|&(?:[A-Za-z]+|#[0-9]{1,7}|#[xX][0-9A-Fa-f]{1,6});",  # a character entity: &nbsp; &equals; &#61;
    re.DOTALL)
_BLOCK = re.compile(r"</?(?:think|answer|br|p|div|li|tr|td|th|h[1-6])\b|\\\\", re.IGNORECASE)  # and LaTeX's \\
_WRAPPED = re.compile(r"\\(?:text|mathrm|textbf|mathbf|boxed|underline|emph|(?:textcolor|color)\{[A-Za-z]{0,20}\})"
                     r"\{([^{}\n]{0,200})\}")
_ESCAPED = re.compile(r"\\([%$])|(\d)(?:\{,\}|\\,)(\d{3})")  # \% \$, and 1{,}500 / 1\,500 digit grouping


def blank_markup(text: str) -> tuple[str, list[tuple[int, int]]]:
    """``text`` with markup replaced by spaces of the same length (line breaks kept; a character entity by the
    character it stands for, folded like the text), and the spans of what the markup held (a comment's
    text, a tag's attributes, what ``\\phantom`` or ``\\cancel`` hides).

    The blanked text is what a reader reads: ``2 + 2 = <!-- 4 --><span class="a">5</span>`` reads
    ``2 + 2 = 5`` and ``\\(\\text{five}\\)`` reads ``five``. A model trained on the completion learns the
    hidden text too, so the step checker checks each held span as text of its own (a false claim inside
    ``<!-- 2 + 2 = 5 -->`` is still found). The result has ``len(text)`` characters, position for position.
    """
    from dgrpo.verify.normalize import normalize

    text = _ESCAPED.sub(lambda m: " " + m.group(1) if m.group(1) else m.group(2) + m.group(3) + " " * (len(m.group()) - 4), text)
    text = _WRAPPED.sub(lambda m: " " * (m.start(1) - m.start()) + m.group(1) + " ", text)
    held: list[tuple[int, int]] = []

    def blank(m: re.Match) -> str:
        s = m.group()
        if s.startswith("&") and len(s) > 1:
            ch = normalize(html.unescape(s))[0]  # &times; is "*", &#x2464; "5", &shy; nothing
            return (ch if len(ch) == 1 else " ") + " " * (len(s) - 1)
        for g in (1, 2, 3):
            if m.group(g):
                held.append(m.span(g))
        out = "".join("\n" if c == "\n" else " " for c in s)
        return "\n" + out[1:] if _BLOCK.match(s) else out  # the answer format's and block tags end a line

    return _MARKUP.sub(blank, text), held


def continued(toks: list[Token], k: int) -> bool:
    """A repeating-decimal mark goes on from the number ending at ``toks[k]``: ``10.\\overline{3}``,
    ``100.\\bar{3}``, ``0.\\dot{6}`` are not 10, 100 and 0 (any other LaTeX command after a number, ``\\quad``,
    ``\\implies``, leaves the number a result)."""
    k += k < len(toks) and toks[k].text == "."
    return k < len(toks) and toks[k].kind == "latex" and toks[k].text in ("\\overline", "\\bar", "\\dot")


def second_result(toks: list[Token], k: int, folded: str) -> Token | None:
    """A number that only markup separates from the single-number right side ending at ``toks[k]``
    (``= <s>4</s> 5``, ``= \\(4\\) 5``, ``= <!-- 4 -->5`` read ``= 4 5``): a second result, checked too.
    Markup there is required (``folded``, the text before :func:`blank_markup`), and a second number that
    names a thing or starts an expression is not a result: ``= 6 $5 bills``, ``= **12** 5-minute intervals``,
    ``= <b>4</b> 2 + 3 = 5`` (so a decoy followed by a noun, ``= <s>4</s> 5 apples``, is not caught)."""
    if k < len(toks) and toks[k].kind == "num" and folded[toks[k - 1].end:toks[k].start].strip():
        after = toks[k + 1] if k + 1 < len(toks) else None
        named = after is not None and (after.kind in ("word", "op") or after.text == "x")  # "**15** 4-packs", "2 + 3"
        return None if named else toks[k]
    return None


def widen(folded: str, s: int, e: int, width: int = 24) -> tuple[int, int]:
    """Some context around an unparsed claim, within its line."""
    a = folded.rfind("\n", 0, s) + 1
    b = folded.find("\n", e)
    b = len(folded) if b < 0 else b
    return max(a, s - width), min(b, e + width)


def _decoration(t: Token) -> bool:
    """Layout around a number that a reader looks through: a line break or other whitespace the tokenizer
    keeps, a quote or backtick, an HTML-style tag, a markdown emphasis marker (``*``, ``_``)."""
    return (t.text.isspace() or t.text in _QUOTES or (t.kind == "sep" and t.text.startswith("<"))
            or (t.kind in ("op", "other") and t.text in ("*", "_")))


def undecorate(toks: list[Token]) -> list[Token]:
    """``toks`` without the decoration (:func:`_decoration`) that touches a relation or wraps the number
    on its other side: ``2 + 2 =\\n5``, ``2 + 2\\n= 5``, ``2 + 2 = **5**``, ``2 + 2 = "5"`` and
    ``2 + 2 = <b>5</b>`` are the claim ``2 + 2 = 5`` (a layout trick must not hide a false step; a ``*``
    next to ``=`` cannot be a product). Decoration elsewhere is kept: it still ends an expression."""
    drop: set[int] = set()
    for k, t in enumerate(toks):
        if t.kind == "word" and t.text in EQ_WORDS:  # a word relation: line breaks around it ("2 + 2 is\n5")
            for step in (-1, 1):
                j = k + step
                while 0 <= j < len(toks) and toks[j].text.isspace():
                    drop.add(j)
                    j += step
            continue
        if t.kind not in ("eq", "rel"):
            continue
        j = k - 1  # before the relation: "2 + 2\\n= 5", "**2 + 2** = 5"
        while j >= 0 and _decoration(toks[j]):
            drop.add(j)
            j -= 1
        j, opened = k + 1, 0  # after it: "=\\n5", "= **5"
        while j < len(toks) and _decoration(toks[j]):
            drop.add(j)
            opened += not toks[j].text.isspace()
            j += 1
        if opened and j + 1 < len(toks) and toks[j].text in ("-", "+") and toks[j + 1].kind == "num":
            j += 1  # a signed result: "= **-1**"
        if opened and j < len(toks) and toks[j].kind == "num":  # as many closing marks: "5**", '5"', "5</b>"
            j += 1
            while opened and j < len(toks) and _decoration(toks[j]) and not toks[j].text.isspace():
                drop.add(j)
                opened -= 1
                j += 1
    return [t for k, t in enumerate(toks) if k not in drop] if drop else toks


def number_through_markup(toks: list[Token], j: int) -> tuple[Token, bool] | None:
    """The first number at or after ``toks[j]`` that only markup separates from a relation, with whether a
    minus sign touches it; None when a line break, a ``?``, or a word outside an HTML-style tag (``<...>``)
    comes first. (Linear: a scan starts only after a computed left side, so it stops at the latest at the
    number that starts the next one.)

    Markup is every token that is not a number, a word or a line break: tags and their attributes, HTML
    comments, LaTeX delimiters, ``~~``, ``|``, ``#``, ``==``, ``>``. A word ends the search (``2 + 3 =
    the pens of 2 days`` claims nothing) except inside a tag, so ``= <span class="a">5</span>`` is ``= 5``;
    so does a number an operator or a LaTeX command continues (``= (6 * x) - ...`` is algebra,
    ``\\(10.\\overline{3}\\)`` a repeating decimal).
    """
    in_tag = False
    for k in range(j, len(toks)):
        t = toks[k]
        if "\n" in t.text:
            return None
        if t.text == "?":
            return None  # an unknown: "15 + 27 = ? (3 points)"
        if t.kind == "num":
            after = toks[k + 1: k + 3]
            if continued(toks, k + 1) or len(after) == 2 and (
                    after[0].kind == "op" or after[0].text == "x") and after[1].kind in ("num", "word", "lp", "latex"):
                return None  # an expression goes on: "27 - 9 = (6 * x) - (3 * x)" is algebra, not a hidden result
            minus = k > j and toks[k - 1].text == "-" and toks[k - 1].end == t.start
            return t, minus
        if t.kind == "rel" and t.text == "<" and k + 1 < len(toks) and toks[k + 1].start == t.end and toks[k + 1].kind in ("word", "sep"):
            in_tag = True
        elif t.kind == "rel" and t.text == ">":
            in_tag = False
        elif t.kind == "word" and not in_tag:
            return None
    return None
