"""Layout the step checker looks through: a line break, quote, backtick, markdown emphasis or tag between
a relation and its sides must not hide an arithmetic claim (:func:`undecorate`).

A list, not a proof: attacked by hand after it was written, these still hid a claim (the completion was
accepted with the claim unparsed) — tags with attributes (``<span class="a">5</span>``), HTML comments
(``=<!-- -->5``), LaTeX delimiters (``\\(5\\)``), strike-through (``~~5~~``), ``|5|``, ``#5``, ``==5==``,
``= > 5``, and emphasis after a word relation (``2 + 2 is **5**``). So the checker also fails closed
(:func:`number_through_markup`): when a computed left side meets a right side that does not parse, the
first number after the relation, past any markup on the same line, is the claimed result."""

from __future__ import annotations

from dgrpo.verify.tokens import Token

_QUOTES = frozenset('"“”„‘’\'`«»')


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


def number_through_markup(toks: list[Token], j: int, window: int = 24) -> tuple[Token, bool] | None:
    """The first number at or after ``toks[j]`` that only markup separates from a relation, with whether a
    minus sign touches it; None when a line break, a word outside an HTML-style tag (``<...>``), or
    ``window`` tokens come first.

    Markup is every token that is not a number, a word or a line break: tags and their attributes, HTML
    comments, LaTeX delimiters, ``~~``, ``|``, ``#``, ``==``, ``>``. A word ends the search (``2 + 3 =
    the pens of 2 days`` claims nothing) except inside a tag, so ``= <span class="a">5</span>`` is ``= 5``;
    so does a number an operator continues (``= (6 * x) - ...`` is algebra).
    """
    in_tag = False
    for k in range(j, min(len(toks), j + window)):
        t = toks[k]
        if "\n" in t.text:
            return None
        if t.kind == "num":
            after = toks[k + 1: k + 3]
            if len(after) == 2 and (after[0].kind == "op" or after[0].text == "x") and after[1].kind in ("num", "word", "lp"):
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
