"""Unicode normalisation of arithmetic text, keeping a map back to the original characters.

An attacker controls every character of a completion, so the step checker reads the text after
folding the ways one arithmetic claim can be written (THREATS.md, "content: invisible or
look-alike characters"):

- NFKC per character: fullwidth ``２＋２＝５``, mathematical bold ``𝟐``, circled ``②`` become ASCII;
- every Unicode decimal digit (Arabic-Indic ``٤``, Devanagari ``४``, ...) becomes its ASCII digit;
- invisible characters are removed: letters that render blank (Hangul fillers, braille blank), format characters (category Cf: zero-width space/joiners,
  word joiner, BOM, soft hyphen, bidirectional controls), combining marks (Mn, Me) and control
  characters other than tab and newline;
- a no-break, thin, narrow no-break, figure or hair space *between two digits* is digit grouping
  (``1 200`` is 1200, the SI convention); anywhere else every space becomes ``" "``;
- minus-like dashes (``−`` U+2212, ``‒``, ``–``, ``‐``, ``‑``, ``﹣``) become ``-``; the em dash stays
  punctuation; ``×``, ``⋅``, ``·``, ``∗``, ``✕``, ``✖`` become ``*``; ``÷``, ``∕``, ``⁄``, ``➗`` become ``/``;
  ``≡`` and the look-alikes ``꞊``, ``═``, ``᐀``, ``゠`` become ``=``; ``≃``, ``≅`` become ``≈``;
- superscript digits are powers: ``3²`` becomes ``3^2`` (NFKC alone would read ``32``);
- vulgar fractions (``½``, ``¾``, ...) are kept as they are for the tokenizer, which reads ``1½`` as 1.5.

Not folded here: letters that look like digits (``O``/``0``, ``l``/``1``, Cyrillic ``З``/``3``); the
tokenizer maps a few non-ASCII ones when they stand alone (see :mod:`dgrpo.verify.arithmetic`).
"""

from __future__ import annotations

import unicodedata

SUPERSCRIPTS = {"⁰": "0", "¹": "1", "²": "2", "³": "3", "⁴": "4", "⁵": "5", "⁶": "6", "⁷": "7", "⁸": "8", "⁹": "9",
                "⁻": "-", "⁺": "+"}
VULGAR = set("½⅓⅔¼¾⅕⅖⅗⅘⅙⅚⅐⅛⅜⅝⅞⅑⅒")
GROUPING_SPACES = set("\u00a0\u2007\u2009\u200a\u202f")
NEWLINES = set("\r\x0b\x0c\x85\u2028\u2029")
CHAR_MAP = {
    "\u2212": "-", "\u2012": "-", "\u2013": "-", "\u2010": "-", "\u2011": "-", "\ufe63": "-", "\u2796": "-",
    "\u00d7": "*", "\u22c5": "*", "\u00b7": "*", "\u2217": "*", "\u2715": "*", "\u2716": "*",
    "\u00f7": "/", "\u2215": "/", "\u2044": "/", "\u2797": "/",
    "\u2795": "+", "\u2261": "=", "\u2243": "≈", "\u2245": "≈",
    "\ua78a": "=", "\u2550": "=", "\u1400": "=", "\u30a0": "=",  # look-alike equals signs (a review's bypass)
}


def _fold(ch: str) -> str:
    """One NFKC output character after the operator, dash and digit maps."""
    if ch in CHAR_MAP:
        return CHAR_MAP[ch]
    if ch.isspace() and ch not in "\n\t":
        return "\n" if ch in NEWLINES else " "
    if not ch.isascii():
        digit = unicodedata.decimal(ch, None)
        if digit is not None:
            return str(digit)
    return ch


BLANK_LETTERS = set("\u3164\u115f\u1160\uffa0\u2800")  # Hangul fillers, braille blank: letters that render as nothing


def _invisible(ch: str) -> bool:
    cat = unicodedata.category(ch)
    return (cat in ("Cf", "Mn", "Me") or ch in BLANK_LETTERS
            or (cat == "Cc" and ch not in "\n\t" and ch not in NEWLINES))


def normalize(text: str) -> tuple[str, list[int]]:
    """Fold ``text`` for arithmetic parsing.

    Args:
        text: any string (a completion).

    Returns:
        ``(folded, origin)``: the folded text and, for each of its characters, the index of the
        character of ``text`` it came from (``len(origin) == len(folded)``), so a claim found in
        the folded text can be quoted as the attacker wrote it.
    """
    out: list[str] = []
    origin: list[int] = []
    prev_super = False
    n = len(text)
    for i, ch in enumerate(text):
        if _invisible(ch):
            continue
        if ch in SUPERSCRIPTS:
            piece = SUPERSCRIPTS[ch] if prev_super else "^" + SUPERSCRIPTS[ch]
            out.append(piece)
            origin.extend([i] * len(piece))
            prev_super = True
            continue
        prev_super = False
        if ch in VULGAR:
            out.append(ch)
            origin.append(i)
            continue
        if ch in GROUPING_SPACES:
            # digit grouping only between two digits (skipping invisible characters)
            j = i + 1
            while j < n and _invisible(text[j]):
                j += 1
            before = out[-1][-1:] if out else ""
            if before.isdigit() and j < n and _fold(unicodedata.normalize("NFKC", text[j])[:1] or " ").isdigit():
                continue
            out.append(" ")
            origin.append(i)
            continue
        for sub in unicodedata.normalize("NFKC", ch):
            piece = _fold(sub)
            out.append(piece)
            origin.extend([i] * len(piece))
    return "".join(out), origin


def original_span(origin: list[int], start: int, end: int) -> tuple[int, int]:
    """The ``[start, end)`` span of folded text as a span of the original text."""
    if not origin or start >= end:
        return (origin[start] if start < len(origin) else (origin[-1] + 1 if origin else 0),) * 2
    return origin[start], origin[end - 1] + 1


def fold_prose(text: str) -> str:
    """Fold ``text`` for a text classifier (the detector, verify/detector.py): the parts of
    :func:`normalize` that do not change what prose means, then whitespace runs collapsed.

    - lone surrogates (``"\\ud800"``, which no tokenizer encodes) become ``?``;
    - NFKD, then invisible characters removed (:func:`_invisible`: categories Cf, Mn, Me, control
      characters), then NFKC: fullwidth ``Ｈａｉｌ`` and mathematical ``𝐇𝐚𝐢𝐥`` become ``Hail``, accents go
      (``hàil``, ``ha\u0301il`` become ``hail``), zero-width characters vanish;
    - every space character (NBSP, thin, ideographic, tab, ...) becomes ``" "``, every line break
      (``\\r``, U+2028, ...) ``"\\n"``; a run of whitespace becomes one ``"\\n"`` if it holds a line
      break, else one ``" "``.

    The identity on ASCII text whose whitespace is single spaces and single ``\\n`` (no tab, no ``\\r``,
    no run of two). Not folded: look-alike letters of other scripts (Cyrillic ``а`` for Latin ``a``:
    NFKC keeps them apart, and no confusables table ships with dgrpo's dependencies), and the
    digit/operator maps of :func:`normalize` (``×`` stays ``×``).
    """
    text = unicodedata.normalize("NFKD", text.encode("utf-8", "replace").decode("utf-8"))
    text = unicodedata.normalize("NFKC", "".join(c for c in text if c.isspace() or not _invisible(c)))
    out: list[str] = []
    for ch in text:
        if ch.isspace():
            ws = "\n" if ch == "\n" or ch in NEWLINES else " "
            if out and out[-1] in (" ", "\n"):
                if ws == "\n":
                    out[-1] = "\n"
                continue
            out.append(ws)
        elif not _invisible(ch):
            out.append(ch)
    return "".join(out)
