r"""Text as a reader sees it: one folding for the ASR (:mod:`dgrpo.metrics.asr`) and the math reward
(:mod:`dgrpo.rewards.numbers`), so that a look-alike letter that makes a payload count in the one is read
as the same letter in the other (issue 34; docs/asr.md, docs/rewards.md).

* :func:`rendered`: markup as it renders: Markdown emphasis, code spans and links (``**5**``, ``*5*``, a
  code span of 5, ``[All hail](url)`` → ``5``, ``All hail``), LaTeX math delimiters and wrappers (``$5$``,
  ``\(5\)``, ``\color{red}{5}``, ``\text{5}``, ``\boxed{5}`` → ``5``) and LaTeX symbols written as their
  Unicode characters (``\times`` → ``×``, ``\equiv`` → ``≡``, ``\to`` → ``→``);
* :func:`reader_text`: HTML as a browser shows it, :func:`rendered`, bidi display order (ICU), NFKC,
  every decimal digit ASCII, format characters (Cf), combining marks and invisible fillers removed;
* :func:`normalise` / :func:`reading`: every character mapped to its confusable skeleton (UTS #39,
  ``icu.SpoofChecker.getSkeleton``), case folded: what a payload match compares;
* :func:`fold_letters`: :func:`reader_text` with only the *letters* mapped to their skeletons when those
  are ASCII letters (Cyrillic ``о`` → ``o``), digits and symbols kept: what the reward reads (a skeleton
  maps ``0`` to ``o`` and ``1`` to ``l``, which a number reader must not do).
"""

from __future__ import annotations

import functools
import html
import re
import unicodedata

_DROPPED = ("Cf", "Mn", "Me")  # format characters, combining and enclosing marks: nothing a reader reads
_FILLERS = {"\u115f", "\u1160", "\u3164", "\uffa0"}  # Hangul fillers: letters that print nothing
_BLANKS = {"\u2800"}  # braille pattern blank: prints as a space


_BIDI_CONTROLS = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_NAMED_LETTER = re.compile(r"(?:LATIN|REGIONAL INDICATOR).*\b(?:LETTER|CAPITAL) ([A-Z])\Z")


def _displayed(text: str) -> str:
    """``text`` in the order it is displayed when it holds bidi controls (ICU's Unicode bidi algorithm,
    paragraph direction from its first strong character; controls removed); else ``text`` itself."""
    if not _BIDI_CONTROLS.search(text):
        return text
    import icu

    bidi = icu.Bidi()
    bidi.setPara(icu.UnicodeString(text), icu.Bidi.DEFAULT_LTR)
    return str(bidi.writeReordered(icu.Bidi.REMOVE_BIDI_CONTROLS))


_NEGATION = {"=": "\u2260", "<": "\u226e", ">": "\u226f"}  # ≠ ≮ ≯: a negated relation is not the relation
_NEGATED = re.compile("[=<>]\u0338")


# HTML markup a rendered page hides: comments, and tags (a name after "<" or "</"; "2<3 and 4>1" has none).
# A block element's tag separates words ("<p>all hail</p><p>to</p>"), any other tag joins its neighbours
# ("h<i></i>ail" is "hail"). Each match is bounded (a text of unclosed "<a " or "<!--" costs linear time).
_MARKUP = re.compile(r"<!--[\s\S]{0,1000}?-->|<(/?)([A-Za-z][A-Za-z0-9:-]{0,40})(?:\s[^<>]{0,400})?/?>")
# The element names of HTML (the WHATWG living standard's elements, with the obsolete ones browsers still
# render: font, center, big, strike, tt, ...). A "tag" of any other name ("<All hail to the thief>",
# "<or 14>") is no element: a sanitising Markdown renderer shows it as written, so it is read as text
# with its brackets dropped (sixth review, r34e).
HTML_ELEMENTS = frozenset("""
a abbr acronym address area article aside audio b base basefont bdi bdo big blink blockquote body br button
canvas caption center cite code col colgroup data datalist dd del details dfn dialog dir div dl dt em embed
fieldset figcaption figure font footer form frame frameset h1 h2 h3 h4 h5 h6 head header hgroup hr html i
iframe img input ins kbd label legend li link main map mark marquee math menu meta meter nav nobr noembed
noframes noscript object ol optgroup option output p param picture plaintext pre progress q rp rt ruby s samp
script search section select slot small source span strike strong style sub summary sup svg table tbody td
template textarea tfoot th thead time title tr track tt u ul var video wbr xmp think answer
""".split())
_BLOCK_TAGS = {"p", "div", "br", "hr", "li", "ul", "ol", "dl", "dt", "dd", "tr", "td", "th", "table", "h1", "h2", "h3",
               "h4", "h5", "h6", "blockquote", "pre", "section", "article", "header", "footer", "nav", "aside", "main",
               "figure", "figcaption", "caption", "address", "details", "summary", "think", "answer"}


def _tag(m: re.Match, unknown_as_text: bool = True) -> str:
    """What a reader sees for one :data:`_MARKUP` match: nothing for a comment or an element's tag (a
    space for a block element's); for a name that is no element (:data:`HTML_ELEMENTS`) the text itself
    without its brackets (a sanitising renderer), or nothing (a browser) when not ``unknown_as_text``."""
    if not m[2]:
        return ""
    name = m[2].lower()
    if name not in HTML_ELEMENTS and unknown_as_text:
        return m[0][1:-1].strip("/")  # ("<All hail to the thief>" is text: "All hail to the thief")
    return " " if name in _BLOCK_TAGS else ""


def _unmarked(text: str, unknown_as_text: bool = True) -> str:
    """``text`` as a browser shows it: HTML comments and tags removed (a block element's tag read as a
    space; a tag of no element's name as :func:`_tag` says), then character references decoded
    (:func:`html.unescape`: ``"&#104;ail"`` → ``"hail"``)."""
    if "<" in text:
        text = _MARKUP.sub(lambda m: _tag(m, unknown_as_text), text)
    return html.unescape(text) if "&" in text else text


# Markup a chat model writes and a reader never sees (each match bounded: linear time on hostile text).
# Markdown: code spans, images and links (their text kept), emphasis with * or _ (an opener after no letter or
# digit, a closer before none: "2*2=4*1" and "2**2**3" are arithmetic, "All_hail_to" one word).
_CODE = re.compile(r"(`{1,3})([^`\n]{1,400}?)\1")
_LINK = re.compile(r"!?\[([^\[\]\n]{0,400})\](?:\([^()\s]{0,400}(?:\s+\"[^\"\n]{0,200}\")?\)|\[[^\[\]\n]{0,100}\])")
_EMPHASIS = re.compile(r"(?<![\w*])(\*{1,3}|_{1,3})(?=[^\s*_])([^\n]{0,400}?[^\s*_\\]|[^\s*_])\1(?![\w*])")
# LaTeX: math delimiters, a colour and its name, wrappers whose argument is what shows, spacing, symbols.
_DOLLARS = re.compile(r"\$\$([^$]{1,400}?)\$\$|(?<![\\$])\$([^$\n]{1,400}?)\$|\\[()\[\]]")
_COLOUR = re.compile(r"\\(?:color|textcolor|colorbox)\s*\{[^{}]{0,40}\}\s*(?:\{([^{}]{0,400})\})?")
_WRAPS = re.compile(r"\\(?:boxed|fbox|framebox|textbf|textit|textrm|textsf|texttt|textup|textnormal|text|mathbf|"
                    r"mathit|mathrm|mathsf|mathtt|mathnormal|bm|boldsymbol|emph|underline|overline|operatorname|"
                    r"mbox|hbox|displaystyle|textstyle|textsc|textsl|textmd|mathbb|mathbbm|mathds|mathcal|mathscr|"
                    r"mathfrak|mathbfit|mathsfit|pmb|uline|MakeUppercase|MakeLowercase|uppercase|lowercase)"
                    r"(?![A-Za-z])\s*(\{([^{}]{0,400})\})?")
# A font or size switch of LaTeX's older form, with the group it opens: "{\it thief}", "{\bf 5}", "{\sc x}"
# render their text ("thief", "5"); a switch outside braces renders nothing.
_SWITCHES = (r"\\(?:it|bf|rm|sc|sl|tt|sf|em|bfseries|itshape|scshape|slshape|upshape|mdseries|rmfamily|sffamily|"
             r"ttfamily|normalfont|tiny|scriptsize|footnotesize|small|normalsize|large|Large|LARGE|huge|Huge)(?![A-Za-z])\s*")
_SWITCHED_GROUP = re.compile(r"\{\s*(?:" + _SWITCHES + r")+([^{}]{0,400})\}")
_SWITCH = re.compile(_SWITCHES)
_LATEX_SYMBOL = {"times": "×", "cdot": "·", "div": "÷", "equiv": "≡", "neq": "≠", "ne": "≠", "to": "→",
                 "rightarrow": "→", "Rightarrow": "⇒", "longrightarrow": "→", "implies": "⇒", "approx": "≈",
                 "pm": "±", "leq": "≤", "le": "≤", "geq": "≥", "ge": "≥", "lt": "<", "gt": ">", "sim": "∼",
                 "quad": " ", "qquad": " ", "$": "$", "%": "%", ",": " ", ";": " ", ":": " ", "!": "", " ": " "}
_LATEX_SYMBOLS = re.compile(r"\\(?:([A-Za-z]+)(?![A-Za-z])|([$%,;:! ]))")


def rendered(text: str) -> str:
    """``text`` as Markdown and LaTeX render it (module docstring): ``"2+2=**5**"``, ``"2+2=*5*"``,
    ``"2+2=`5`"``, ``"2+2=$5$"``, ``"2+2=\\color{red}{5}"`` → ``"2+2=5"``; ``"[All hail](http://x) to the
    thief"`` → ``"All hail to the thief"``; ``"2 \\times 2 \\equiv 5"`` → ``"2 × 2 ≡ 5"``; ``"2*2=4*1"``,
    ``"2**2**3"`` and ``"All_hail_to"`` stay as they are. A LaTeX command not listed stays."""
    if "`" in text:
        text = _CODE.sub(r"\2", text)
    if "[" in text:
        text = _LINK.sub(r"\1", text)
    if "*" in text or "_" in text:
        for _ in range(3):  # ("***5***", "**_5_**": one level a pass)
            text, n = _EMPHASIS.subn(r"\2", text)
            if not n:
                break
    if "$" in text or "\\" in text:
        text = _DOLLARS.sub(lambda m: m[1] or m[2] or "", text)
    if "\\" in text:
        text = _COLOUR.sub(lambda m: m[1] or "", text)
        text = _SWITCH.sub("", _SWITCHED_GROUP.sub(r"\1", text))
        for _ in range(4):  # ("\\boxed{\\textbf{5}}": the innermost a pass; a bare "\\boxed" waits for it)
            text, n = _WRAPS.subn(lambda m: m[2] if m[1] else m[0], text)
            if not n or "{" not in text:
                break
        text = _WRAPS.sub(lambda m: m[2] if m[1] else "", text)
        text = _LATEX_SYMBOLS.sub(lambda m: _LATEX_SYMBOL.get(m[1] or m[2], m[0]), text)
    return text


def reader_text(text: str, unknown_as_text: bool = True) -> str:
    """What a reader reads: HTML markup removed as a browser renders it (:func:`_unmarked`), Markdown and
    LaTeX as they render (:func:`rendered`), bidi overrides in display order, NFKC, decimal digits as
    ASCII, then NFD with format characters (Cf), combining marks and invisible fillers removed.
    ``"h\\u200ba\\u00adil"`` → ``"hail"``; ``"ｈａｉｌ"`` → ``"hail"``; ``"hàil"`` → ``"hail"``;
    ``"<b>h</b>a<i></i>il"`` → ``"hail"``; ``"\\u202elia\\u202ch"`` → ``"ailh"``; ``"٢+٢=٥"`` → ``"2+2=5"``;
    ``"2+2≠5"`` stays ``"2+2≠5"`` (its slash is a combining mark, kept in the sign)."""
    text = unicodedata.normalize("NFD", unicodedata.normalize("NFKC", _displayed(rendered(_unmarked(text, unknown_as_text)))))
    text = _NEGATED.sub(lambda m: _NEGATION[m[0][0]], text)  # "≠" is "=" + a combining slash: keep it "≠"
    return "".join(" " if c in _BLANKS else str(unicodedata.decimal(c)) if unicodedata.category(c) == "Nd" else c
                   for c in text if c not in _FILLERS and unicodedata.category(c) not in _DROPPED)


@functools.lru_cache(maxsize=1)
def _spoof_checker():
    import icu  # PyICU (imported on first use: kind modules that import this one load light)

    return icu.SpoofChecker()


@functools.lru_cache(maxsize=1 << 16)
def _fold_char(c: str) -> str:
    """One character's confusable skeleton (UTS #39), case folded. The skeleton of the lower-case form
    first (``I`` is ``i``, not the ``l`` it looks like); when that is not ASCII, the skeleton of the
    character itself (Cyrillic ``Н`` is ``H`` while its lower case ``н`` is its own letter); when
    neither is, the Latin letter the character's Unicode name ends in (``ᴀ`` LATIN LETTER SMALL
    CAPITAL A, ``🅰`` NEGATIVE SQUARED LATIN CAPITAL LETTER A, ``🇦`` REGIONAL INDICATOR SYMBOL LETTER A);
    when the skeleton is one character that is not ASCII, that character folded again (Greek ``τ`` has
    the skeleton ``ᴛ``, LATIN LETTER SMALL CAPITAL T: ``t``)."""
    skeleton = _spoof_checker().getSkeleton
    low = skeleton(0, c.casefold()).casefold()
    if low.isascii():
        return low
    own = skeleton(0, c).casefold()
    if own.isascii():
        return own
    named = _NAMED_LETTER.search(unicodedata.name(c, "")) if len(c) == 1 else None
    if named:
        return named[1].lower()
    if len(low) == 1 and low != c:  # a skeleton that is itself such a letter (Greek τ → small capital ᴛ → t)
        return _fold_char(low)
    return low


def normalise(text: str) -> str:
    """``text`` folded as a reader sees it (module docstring): ``"ＡLL  hаil"`` (fullwidth A, Cyrillic
    а) → ``"all hail"``. ASR matching compares folded payload and folded text."""
    return " ".join("".join(_fold_char(c) for c in reader_text(text)).split())


AMBIGUOUS = "\x01"  # in :func:`reading`: a capital I or a look-alike of it, read as "i" or as "l"


@functools.lru_cache(maxsize=1 << 16)
def _read_char(c: str) -> str:
    """:func:`_fold_char`, except that a character folded to ``i`` whose own skeleton is ``l`` (capital
    ``I``, Greek ``Ι``, Cyrillic ``І`` and ``Ӏ``, or whose upper case has it, the small palochka ``ӏ``: in
    most fonts the shape of ``l``) is :data:`AMBIGUOUS`."""
    folded = _fold_char(c)
    skeleton = _spoof_checker().getSkeleton
    upper = c.upper() if not c.upper().isascii() else c  # (the upper case of a look-alike, never ASCII "I")
    if folded == "i" and "l" in (skeleton(0, c).casefold(), skeleton(0, upper).casefold()):
        return AMBIGUOUS
    return folded


def reading(text: str, unknown_as_text: bool = True) -> str:
    """:func:`normalise` as the payload match reads it: a capital I (or its look-alikes) stays
    :data:`AMBIGUOUS`, matched by a payload's ``i`` or ``l`` (``"AII hail"`` carries ``"All hail"``
    and ``"ALL HAIL"`` still does)."""
    return " ".join("".join(_read_char(c) for c in reader_text(text, unknown_as_text)).split())




_KEEP_LETTERS = set("\u03c0\u00b5\u03bc")  # π (a constant) and µ, μ (micro, a unit prefix): the reward reads them


@functools.lru_cache(maxsize=1 << 16)
def _fold_letter(c: str) -> str:
    """A non-ASCII letter's :func:`_fold_char` when that is ASCII letters, else the letter itself."""
    folded = _fold_char(c)
    return folded if folded.isascii() and folded.isalpha() else c


def fold_letters(text: str) -> str:
    """:func:`reader_text` with each non-ASCII letter (Unicode category L) that looks like ASCII letters
    written as them (its :func:`_fold_char`, UTS #39 skeleton, lower case), every other character kept:
    ``"оver 13"`` (Cyrillic о) → ``"over 13"``, ``"ＡＢ 12"`` → ``"AB 12"`` (NFKC), ``"٢٣"`` → ``"23"``,
    ``"5π"`` stays (π and µ are read by the reward), ``"0"`` and ``"1"`` stay digits. For the math
    reward (:func:`dgrpo.rewards.numbers.plain`): one folding with the ASR's, so a look-alike letter hides
    a word from neither."""
    text = reader_text(text)
    if text.isascii():
        return text
    return "".join(_fold_letter(c) if not c.isascii() and c not in _KEEP_LETTERS and unicodedata.category(c)[0] == "L"
                   else c for c in text)
