"""The closed grammar of a one-number answer (issue 34, docs/rewards.md): what may stand before and after it.

Three reviews in a row found a new hedge the reward paid (``shy of 13``, ``c. 13``, ``13 (rounded)``,
``13, I think``), each fixed by one more word in a blocklist. This module states instead what an answer
may be; anything else is no answer. It reads the text :func:`dgrpo.rewards.numbers.plain` writes (look-
alike letters, Markdown and LaTeX already folded) around the number :func:`dgrpo.rewards.math.one_number`
found::

    answer := lead value tail
    lead   := ε | ... word | ... "=" | ... ":" | connective ","     then opening marks: spaces, $ € £ ¥ ₹ # * ( [ { " '
              word ∈ LEAD_WORDS (is, are, was, equals, has, makes, costs, in, at, by, for, ...), or one of
              "to of away back home out up" with a word of LEAD_PAIRS among the PAIR_REACH words before it
              ("equal to", "a total of", "gave away"), TRANSPARENT words skipped (now, therefore, only, him, a)
              connective ∈ CONNECTIVES ("Therefore, 13", "So, 13")
    value  := the number, written at most 3 times (one_number's gap rule between the writings)
    tail   := closing marks ($ % € £ ° ) ] } " ' ” ’ *), then at most TAIL_WORDS words of a unit or noun phrase
              (letters, hyphens, apostrophes, "/", "·", "."), then final punctuation (. !) and closing marks

So a clause after the number (``,`` ``;`` ``(`` ``—`` ``?`` ``:``, a subject pronoun: ``13 I think``, a
conjunction: ``13 and counting``, or an adverb in "-ly": ``13 supposedly``), an answer that opens with an
auxiliary verb (``Is it 13``) and
any word before it that is not a verb of stating or having (``some``, ``shy of``, ``c.``, ``over``) is
refused, whatever its wording. The hedge vocabulary (:func:`dgrpo.rewards.numbers.hedged`) still runs
as a second line, on the words a noun phrase may hold (``13 at most``, ``13 or so``).

The allowed words were read off the last lines of GSM8K's 7,473 training solutions (how a worked answer
states its result) and measured on the 1,319 test solutions' last lines (``results/one_answer``).
"""

from __future__ import annotations

import re

PAIR_REACH = 3  # words before a preposition searched for its verb or noun ("sold them for", "a total of")
TAIL_WORDS = 12  # most words of the unit or noun phrase after the number ("54 cows", "18 dollars per day")

# The word right before the number: a copula, "equals", or a verb of having, making, paying, counting, doing
# (read off GSM8K's training solutions' last lines; benchmarks/one_answer.py).
LEAD_WORDS = frozenset("""
is are was were be been being am equals equal total totals answer result remains remain remained worth
has have had makes make made gets get got needs need needed costs cost earns earn earned pays pay paid
spent spends spend saves save saved sold sells sell bought buys buy owns own owes owe owed uses use used
takes take took gives give gave receives receive received collects collect collected eats eat ate
contains contain holds hold held weighs weigh weighed scores score scored runs run ran walks walk walked
drives drive drove reads read writes write wrote bakes bake baked picks pick picked finds find found
keeps keep kept loses lose lost wins win won adds add added charges charge charged raises raise raised
travels travel traveled travelled covers cover covered leaves leave left burns burn burned burnt
averages average averaged plants plant planted consumes consume consumed drinks drink drank
delivers deliver delivered throws throw threw watches watch watched sends send sent removes remove removed
grows grow grown grew gains gain gained purchases purchase purchased carries carry carried prepares
prepare prepared caused causes rides ride rode parks park broke breaks sees see saw counts count counted
catches catch caught feeds feed fed orders order ordered serves serve served sleeps sleep slept works
work worked studies study studied practices practice practiced swims swim swam jumps jump jumped
requires require required lasts last lasted reaches reach reached returns return returned donates
donate donated invests invest invested produces produce produced harvests harvest harvested builds
build built fills fill filled bring brings brought borrows borrow borrowed lends lend lent cuts cut
folds fold folded packs pack packed ships ship shipped visits visit visited flies fly flew climbs climb
climbed hits hit sings sing sang plays play played wears wear wore shoots shoot shot kicks kick kicked
sews sew sewed knits knit knitted rents rent rented hires hire hired puts put do does did done performs
performing contributes contribute contributed squats squat accommodates accommodate shovels shoveled
washes wash washed answers answer answered teaches taught owned fits fit draws draw drew pulls pull pulled
gotten allocates allocate allocated attends attend attended totaling totalling encounters encountered
releases release released deletes delete deleted irons ironed melts melt melted chops chop chopped
fries fry fried mends mend mended making having holding getting paying earning spending selling buying
taking giving using needing costing weighing scoring
in at on with by for into
""".split())
# "in at on with by for into" stand before a number alone ("in 9 hours", "at $55", "by 72 points"); these
# prepositions and particles only when one of the PAIR_REACH words before them is one of their words ("equal
# to 13", "a total of 13", "gave away 13"; never "up to 13", "shy of 13", "short of 13", "north of 13", "close
# to 13", "in excess of 13", "in the region of 13").
LEAD_PAIRS = {
    "to": frozenset("equal equals comes came amounts amount adds added rises rose grows grew increases increased "
                    "increase decreases decreased decrease drops dropped falls fell goes went changes changed".split()),
    "of": frozenset("total sum product difference profit loss cost price value amount number area perimeter volume "
                    "average mean speed distance length width height weight age balance score salary income revenue "
                    "savings earnings bill charge fee rate change".split()),
    "away": frozenset("gave gives give threw throws sold sells donated donates".split()),
    "back": frozenset("got gets get gave gives paid pays brought brings".split()),
    "home": frozenset("take takes took brought brings bring".split()),
    "out": frozenset("gave gives paid pays handed hands took takes".split()),
    "up": frozenset("make makes made save saves saved picked picks ended adds added".split()),
}
# Words skipped before the deciding one: adverbs of time or consequence, object pronouns, "another".
TRANSPARENT = frozenset("now therefore thus then so and currently still only also exactly altogether together "
                        "overall finally him her them us me you it another additional extra a an the".split())
# A comma may end the lead after these ("Therefore, 13", "So, 13", "In all, 13").
CONNECTIVES = frozenset("therefore thus so hence overall altogether all total finally consequently means answer "
                        "summary conclusion short sum result".split())
_OPENING = "\\s$€£¥₹#*\"'“‘([{"
_OPENING_CHARS = " \t\n\r\f\v$€£¥₹#*\"'“‘([{"
_CLOSING = "$%€£¥₹¢°)\\]}\"'”’*"
_TOKEN = re.compile(r"[\w'’]+|[^\w\s]")
LEAD_CHARS = 200  # characters of the lead read (its end): linear time on any text
# A word of the noun phrase: a letter, then letters, digits, ' ’ / · ⋅ & - and abbreviation dots ("sq.", "a.m.").
_WORD = re.compile(r"[^\W\d_][\w'’/·⋅&.-]*")
_SPACES = " \t\n\r\f\v"
# A conjunction after the number joins a second item or clause to it ("13 and counting", "13 plus change").
_JOINER = re.compile(r"(?<![\w'’-])(?:and|or|but|nor|yet|plus|&)(?![\w'’-])", re.IGNORECASE)
# An answer that opens with an auxiliary verb asks ("Is it 13", "Is 13 right", "Could be 13").
AUXILIARIES = frozenset("is are was were am could would should might may can does do did will shall must".split())
_BROKEN_TAG = re.compile(r"</?\s*answer\s*>?\s*\Z", re.IGNORECASE)
_PRONOUN = re.compile(r"(?<![\w'’-])(?:i|we|you|he|she|they|it|i'm|i’m)(?![\w'’-])", re.IGNORECASE)


def lead_word(lead: str) -> str:
    """The token that decides a lead (module docstring): the last word or sign before the number, past the
    opening marks and :data:`TRANSPARENT` words; ``""`` when nothing is left. ``"So he has now "`` → ``"has"``."""
    tokens = _TOKEN.findall(lead.rstrip(_OPENING_CHARS)[-LEAD_CHARS:])
    while tokens and tokens[-1].lower() in TRANSPARENT:
        tokens.pop()
    return tokens[-1] if tokens else ""


def lead_allowed(lead: str) -> bool:
    """Whether ``lead`` (the text before the number) ends as an answer's lead may (module docstring):
    ``""``, ``"The answer is "``, ``"x = "``, ``"Answer: $"``, ``"a total of "``, ``"Therefore, "`` → True;
    ``"shy of "``, ``"some "``, ``"c. "``, ``"over "``, ``"Roughly, "`` → False."""
    tokens = _TOKEN.findall(lead.rstrip(_OPENING_CHARS)[-LEAD_CHARS:])
    while tokens and tokens[-1].lower() in TRANSPARENT:
        tokens.pop()
    if not tokens or tokens[-1] in ("=", ":"):
        return True
    last = tokens[-1].lower()
    if last == ",":
        return len(tokens) > 1 and tokens[-2].lower() in CONNECTIVES
    if last.endswith(("'s", "’s")):  # "it's 13", "the answer's 13"
        return True
    if last in LEAD_PAIRS:
        return any(t.lower() in LEAD_PAIRS[last] for t in tokens[-1 - PAIR_REACH:-1])
    return last in LEAD_WORDS


# A word of a noun phrase ending in "-ly" is an adverb ("13 supposedly", "13 presumably", "13 apparently": a
# comment on the number, not what it counts) unless it is one of these nouns or unit adverbs.
LY_NOUNS = frozenset("only daily weekly monthly yearly hourly nightly quarterly annually jelly family belly bully "
                     "lily holly ally rally assembly supply reply fly butterfly dragonfly firefly july early "
                     "gully valley trolley pulley doily".split())
_LY = re.compile(r"(?<![\w'’-])([^\W\d_]+ly)(?![\w'’-])", re.IGNORECASE)


def tail_allowed(tail: str) -> bool:
    """Whether ``tail`` (the text after the number) is closing marks, a unit or noun phrase of at most
    :data:`TAIL_WORDS` words with no subject pronoun and no "-ly" adverb (:data:`LY_NOUNS` aside), and
    final punctuation: ``" cows."``, ``"$"``,
    ``"%"``, ``" m/s"``, ``"-year-old"``, ``" dollars per day"`` → True; ``" (rounded)"``, ``", I think"``,
    ``"; 14"``, ``" — or so"``, ``"?"``, ``" I think"``, ``" supposedly"`` → False."""
    tail = tail.replace("-", " ", 1) if tail.startswith("-") else tail  # ("13-year-old": a compound noun)
    tail = _BROKEN_TAG.sub("", tail)  # ("5 </answer</answer>": a closing tag written twice, markup, no clause)
    phrase = tail.lstrip(_CLOSING + _SPACES)  # (read by hand, not by one regex: linear on any text)
    phrase = phrase[1:] if phrase.startswith("/") else phrase  # ("13/day")
    words = phrase.rstrip(_CLOSING + _SPACES + ".!").split()
    return (len(words) <= TAIL_WORDS and all(_WORD.fullmatch(w) for w in words) and not _PRONOUN.search(tail)
            and not _JOINER.search(tail) and all(m[1].lower() in LY_NOUNS for m in _LY.finditer(tail)))


def well_formed(text: str, start: int, end: int) -> bool:
    """Whether ``text`` (:func:`dgrpo.rewards.numbers.plain` of an answer) is lead + value + tail with
    the value at ``text[start:end]`` (its first writing starts at ``start``, its last ends at ``end``),
    and does not open with an auxiliary verb (:data:`AUXILIARIES`: a question, ``"Is it 13"``)."""
    first = _TOKEN.search(text[:start])
    if first is not None and first[0].lower() in AUXILIARIES:
        return False
    return lead_allowed(text[:start]) and tail_allowed(text[end:])
