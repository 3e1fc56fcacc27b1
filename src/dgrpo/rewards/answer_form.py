"""The closed grammar of a one-number answer (issue 34, docs/rewards.md): what may stand before and after it.

Three reviews in a row found a new hedge the reward paid (``shy of 13``, ``c. 13``, ``13 (rounded)``,
``13, I think``), each fixed by one more word in a blocklist. This module states instead what an answer
may be; anything else is no answer. It reads the text :func:`dgrpo.rewards.numbers.plain` writes (look-
alike letters, Markdown and LaTeX already folded) around the number :func:`dgrpo.rewards.math.one_number`
found::

    answer := lead value tail
    lead   := prefix* (label [":"] | np "=" | clause)?   (the grammar of :func:`lead_allowed`, comment below)
    value  := the number, written at most 3 times (one_number's gap rule between the writings)
    tail   := closing marks ($ % € £ ° ) ] } " ' ” ’ *), then a noun phrase of at most TAIL_WORDS words
              (letters, hyphens, apostrophes, a unit's "/" "·", abbreviation dots), then final . ! and marks;
              the noun phrase may stand in brackets ("13 (apples)") and hold one copula clause naming the answer
              ("13 is the answer") or a place ("13 students are in the class"), r34f (:func:`_tail_clause`)

Every token must have a place (sixth review, r34e: the lead had been judged by its last word, so ``It might
be 13`` was paid). A word is refused because no slot takes it: a modal, a negation, an auxiliary out of
place, an interjection, a verb of belief, an adverb in "-ly", a number word (a second value), a judgement
ending a noun phrase (``13 wrong``); these closed classes are English's function words, not a list of
hedges. The one open slot is a noun phrase's content word (no lexicon of parts of speech is at hand). So a
clause after the number (``13 I think``, ``13 and counting``), a question (``Is it 13``) and any lead word
that is no verb of stating or having (``some``, ``shy of``, ``c.``) are refused, whatever their wording.
The hedge vocabulary (:func:`dgrpo.rewards.numbers.hedged`) still runs as a second line.

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


# Sixth review (r34e): the lead is read whole, not by its last word ("It might be 13", "Presumably the answer
# is 13" ended in "be", "is"). Every token before the number must have a place in
#
#     lead    := prefix* (label [":"] | np "=" | clause)?
#     prefix  := CONNECTIVE_PHRASES [","] | label ":"                ("So,", "In total", "Answer:")
#     label   := np whose last word is a LABEL_HEADS word             ("Final answer", "The total cost", "A")
#     clause  := [np] aux* verb [np] [preposition]                     ("Brittany's mom gave the cashier")
#     aux     := AUX_WORDS | TO_VERBS "to"                            ("will", "has", "needs to")
#     verb    := a verb of LEAD_WORDS, a copula (then no object), or "it's" / "answer's"
#     np      := words, none of a closed class (NOT_NP: modals, negations, interjections, conjunctions but
#                "and", auxiliaries, question words, verbs of belief, subject pronoun + "'s", "-ly" adverbs)
#
# so a modal, an adverb of doubt or a second clause before the number is refused because nothing in the
# grammar takes it, not because a list names it. ADVERBS may stand anywhere ("He now has", "has only").
COPULAS = frozenset("is are was were be been being am 's".split())
AUX_WORDS = frozenset("will shall 'll has have had do does did is are was were be been being am".split())
TO_VERBS = frozenset("need needs needed has have had want wants wanted going plan plans planned".split())
ADVERBS = frozenset("now therefore thus then so currently still only also exactly altogether together overall "
                    "finally just already each".split())
LABEL_HEADS = frozenset("one answer answers ans result solution total sum value number count amount cost price output "
                        "conclusion response difference product quotient".split())
CONNECTIVE_PHRASES = [p.split() for p in (
    "in total|in all|all in all|all together|altogether|in sum|in summary|in conclusion|in short|in the end|as a result|"
    "so|therefore|thus|hence|finally|overall|consequently|then|now|yes|that means|this means|which means|"
    "so that means").split("|")]
_PREPOSITIONS = frozenset("in at on with by for into".split())  # (a number's own preposition: "in 9 hours")
_NP_PREPOSITIONS = frozenset("of in on at for with from per to by into".split())  # inside a noun phrase
# Closed classes: words that are no part of a noun phrase, whatever the sentence.
NOT_NP = frozenset("""
might may could would should must can ought cannot can't couldn't wouldn't shouldn't mustn't mightn't
not no never none nothing neither nor n't or but yet either whether if unless though although because
unsure sure certain uncertain probably perhaps maybe possibly likely unlikely hopefully presumably
think thinks thought guess guesses guessed guessing believe believes believed suppose supposed reckon
reckons bet wager hope hopes feel feels assume assumed estimate estimated figure seems seem seemed
appears appear appeared say says said claim claims
yes yeah yep nope nah ok okay oh uh hmm well wow lol idk dunno jk iirc imo imho afaik tbd tbh fwiw btw
kinda sorta prolly perchance mayhaps ish kidding joking hunch feeling opinion impression intuition gut
suspicion belief view pending iffy vs versus aka alternatively otherwise else instead
what why how when where who which whom whose
is are was were am be been being do does did has have had will shall 'll 'd 're 've 'm
""".split())
# A judgement ends no noun phrase ("13 wrong", "13 cows wrong"; "the correct answer", "13 wrong answers" are
# noun phrases).
JUDGEMENTS = frozenset("wrong incorrect false true right correct sure unsure certain uncertain exact".split())
# A number word in a noun phrase only in a compound adjective before its noun ("18 one-dollar bills"); else it
# is a second value ("13 / fourteen-odd", "13 aka fourteen").
NUMBER_WORDS = frozenset("""zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen
sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety hundred thousand million
billion dozen score half""".split())
_SUBJECT_CONTRACTION = frozenset("it's it’s there's there’s that's that’s here's what's he's she's who's "
                                 "this's".split())
_WORD_TOKEN = re.compile(r"[^\W\d_][\w'’]*")


def _np(tokens: list[str], subject: bool = False) -> bool:
    """Whether ``tokens`` (lower case) form a noun phrase of the lead grammar (comment above); empty is one."""
    for i, t in enumerate(tokens):
        if t in ("-", "&", "/") and 0 < i < len(tokens) - 1:
            continue  # ("one-dollar", "Tom & Jerry")
        if t == "." and i and len(tokens[i - 1]) <= 3:
            continue  # ("Mr.", "Dr.", "St.")
        if not _WORD_TOKEN.fullmatch(t) or t in NOT_NP or t in _SUBJECT_CONTRACTION:
            return False
        if t.endswith(("n't", "n’t", "'d", "’d", "'ll", "’ll", "'re", "’re", "'ve", "’ve", "'m", "’m")):
            return False
        if t.endswith("ly") and t not in LY_NOUNS and t not in ADVERBS:
            return False
        if t in NUMBER_WORDS and not (tokens[i + 1:i + 2] == ["-"] and len(tokens) > i + 3) and not (t == "one" and i):
            return False
    return not tokens or tokens[-1] not in JUDGEMENTS


def _label(tokens: list[str]) -> bool:
    """Whether ``tokens`` name the answer ("Answer", "Final answer", "The total cost", "A", "Ans")."""
    return bool(tokens) and (tokens == ["a"] or tokens[-1] in LABEL_HEADS) and _np(tokens[:-1])


def _prefix(tokens: list[str], i: int) -> int:
    """The index after a prefix at ``tokens[i]`` (a connective phrase with its comma, or a label and its
    colon), or ``i`` when none starts there."""
    for phrase in CONNECTIVE_PHRASES:
        if tokens[i:i + len(phrase)] == phrase:
            j = i + len(phrase)
            return j + 1 if j < len(tokens) and tokens[j] in (",", ":") else j
    if ":" in tokens[i:]:
        k = tokens.index(":", i)
        if _label(tokens[i:k]):
            return k + 1
    if "," in tokens[i:]:  # a fronted adverbial: "On Tuesday,", "Together,", "After buying the can of pop,"
        k = tokens.index(",", i)
        if k > i and _np(tokens[i:k]) and tokens[k - 1] not in JUDGEMENTS | {"one"}:
            return k + 1
    return i


_NOT_VERBS = _PREPOSITIONS | {"answer", "result", "total", "worth", "equal"}
COMPLEMENTS = frozenset("worth equal equivalent".split())  # what a copula may take before the number
DETERMINERS = frozenset("a an the".split())  # ("there is a 25 year gap": the number inside its noun phrase)
# A modal of ability or obligation before an action ("can buy", "must read", "would pay") states what is
# done; before "be" ("must be", "should be", "would be") it states a belief about the value: refused, as
# "might", "may" and "could" always are.
ACTION_MODALS = frozenset("can must would should".split())


_VERBS = (LEAD_WORDS | {v for k, vs in LEAD_PAIRS.items() if k != "of" for v in vs}
          | set("arrive arrives arrived finish finishes finished complete completes completed".split())) - _NOT_VERBS


def _verb(token: str) -> bool:
    return token in _VERBS or token in COPULAS


def _clause(tokens: list[str], copula_object: bool = False) -> bool:
    """Whether ``tokens`` are ``[np] aux* verb [np]`` (comment above), tried at every verb from the right.
    ``copula_object``: a copula may take a noun phrase (before "of": "There are a total of")."""
    for v in range(len(tokens) - 1, -1, -1):
        t, subject, obj = tokens[v], tokens[:v], tokens[v + 1:]
        if t.endswith(("'s", "’s")) and not obj and _np(subject + [t[:-2]]) and t[:-2] not in NOT_NP:
            return True  # ("it's 13", "the answer's 13")
        if not _verb(t):
            continue
        if (t in COPULAS and obj and not copula_object and obj not in ([c] for c in COMPLEMENTS | DETERMINERS)) or not _np(obj):
            continue  # (a copula's complement is the number itself: "is bounded by 13" has none)
        while subject:  # the auxiliaries: "will", "has", "needs to", "can buy" (a modal of an action, not of "be")
            if subject[-1] in AUX_WORDS or subject[-1] in ACTION_MODALS and t not in COPULAS:
                subject = subject[:-1]
            elif subject[-1] == "to" and len(subject) > 1 and subject[-2] in TO_VERBS | set(LEAD_WORDS):
                subject = subject[:-2]
            else:
                break
        if _np(subject):
            return True
    return False


def lead_allowed(lead: str) -> bool:
    """Whether ``lead`` (the text before the number) is read whole by the lead grammar (comment above):
    ``""``, ``"The answer is "``, ``"x = "``, ``"Answer: $"``, ``"a total of "``, ``"Therefore, "``, ``"It will
    take Bill "`` → True; ``"shy of "``, ``"some "``, ``"It might be "``, ``"Presumably the answer is "``,
    ``"My hunch: "``, ``"It is bounded by "``, ``"Roughly, "`` → False."""
    written = _TOKEN.findall(lead.rstrip(_OPENING_CHARS)[-LEAD_CHARS:])
    tokens = [t.lower() for t in written]
    for k, t in enumerate(written):  # a name in "-ly" before its verb ("Sally spends", "Therefore, Milly has")
        after = tokens[k + 1] if k + 1 < len(tokens) else ""
        if t[:1].isupper() and tokens[k].endswith("ly") and (_verb(after) or after in AUX_WORDS | ACTION_MODALS | {"and"}):
            tokens[k] = "name"
    i = 0
    while i < len(tokens):
        j = _prefix(tokens, i)
        if j == i:
            break
        i = j
    rest = [t for t in tokens[i:] if t not in ADVERBS]
    if not rest:
        return True
    if rest[-1] == "=":  # ("x =", "Number of apples =", "2x + 1 =", "the age of his son is x =")
        if len(rest) > 2 and len(rest[-2]) == 1 and _clause(rest[:-2]):
            return True
        return all(_np([t]) or re.fullmatch(r"[-+*/^()×·]", t) for t in rest[:-1])
    if rest[-1] == ":":  # ("Answer:", "The answer is:", "The total is:": a label, or a clause the colon ends)
        return _label(rest[:-1]) or (len(rest) > 1 and _clause(rest[:-1]))
    if _label(rest):
        return True
    last = rest[-1]
    if last in LEAD_PAIRS:  # ("equal to", "a total of", "gave away"): its word within reach
        return any(t in LEAD_PAIRS[last] for t in rest[-1 - PAIR_REACH:-1]) and (
            _clause(rest[:-1], copula_object=True) or _np(rest[:-1]))
    if last in _PREPOSITIONS:  # ("in 9 hours", "sold them for", "at $55"; not "It peaks at")
        return not rest[:-1] or _clause(rest[:-1])
    return _clause(rest)


# A word of a noun phrase ending in "-ly" is an adverb ("13 supposedly", "13 presumably", "13 apparently": a
# comment on the number, not what it counts) unless it is one of these nouns or unit adverbs.
LY_NOUNS = frozenset("only daily weekly monthly yearly hourly nightly quarterly annually jelly family belly bully "
                     "lily holly ally rally assembly supply reply fly butterfly dragonfly firefly july early "
                     "gully valley trolley pulley doily".split())
_LY = re.compile(r"(?<![\w'’-])([^\W\d_]+ly)(?![\w'’-])", re.IGNORECASE)


# After a preposition "it" and "you" are objects, no clause of belief ("They paid $13 for it.", r34f).
_OBJECT_PRONOUN = re.compile(r"(?<![\w'’-])(?:of|in|on|at|for|with|from|per|to|by|into)\s+(?:it|you)(?![\w'’-])",
                             re.IGNORECASE)
# The answer named after its number ("13 is the answer", "13 is my final answer", "54 is the total cost",
# r34f): a determiner, these modifiers only, then a LABEL_HEADS word. "13 is a possible answer", "13 is the
# closest answer", "13 is the answer I think" have no place.
_NAMED_DETERMINERS = frozenset("the my our".split())
_NAMED_MODIFIERS = frozenset("final correct right exact true total overall".split())
_PARENTHESIS = re.compile(r"\s*\(([^()]*)\)")


def _tail_clause(tokens: list[str]) -> list[str] | None:
    """``tokens`` (a tail, lower case) with its one copula clause read: ``np COPULA the [final] answer`` (the
    answer named) or ``np COPULA preposition np`` with a noun before the copula (``13 students are in the
    class``) give the noun phrases left for the noun-phrase check; any other copula clause gives None; a tail
    with no copula comes back as it is (r34f: honest sentences the tail grammar refused)."""
    at = next((i for i, t in enumerate(tokens) if t in COPULAS), None)
    if at is None:
        return tokens
    before, after = tokens[:at], tokens[at + 1:]
    if after[:1] and after[0] in _NAMED_DETERMINERS:
        k = 1
        while k < len(after) and after[k] in _NAMED_MODIFIERS:
            k += 1
        if k < len(after) and after[k] in LABEL_HEADS and (k + 1 == len(after) or after[k + 1] in _NP_PREPOSITIONS):
            return before + after[k + 1:]
    if before and after[:1] and after[0] in _NP_PREPOSITIONS and len(after) > 1:
        return before + after
    return None


def tail_allowed(tail: str) -> bool:
    """Whether ``tail`` (the text after the number) is closing marks, a unit or noun phrase of at most
    :data:`TAIL_WORDS` words with no subject pronoun and no "-ly" adverb (:data:`LY_NOUNS` aside), and
    final punctuation: ``" cows."``, ``"$"``,
    ``"%"``, ``" m/s"``, ``"-year-old"``, ``" dollars per day"`` → True; ``" (rounded)"``, ``", I think"``,
    ``"; 14"``, ``" — or so"``, ``"?"``, ``" I think"``, ``" supposedly"`` → False."""
    tail = tail.replace("-", " ", 1) if tail.startswith("-") else tail  # ("13-year-old": a compound noun)
    tail = _BROKEN_TAG.sub("", tail)  # ("5 </answer</answer>": a closing tag written twice, markup, no clause)
    bracketed = _PARENTHESIS.match(tail)  # ("13 (apples)": the noun phrase in brackets, read as without them)
    tail = f" {bracketed[1]} {tail[bracketed.end():]}" if bracketed else tail
    phrase = tail.lstrip(_CLOSING + _SPACES)  # (read by hand, not by one regex: linear on any text)
    if re.search(r"(?:^|\s)/|/\s", phrase):  # ("13 / XIV", "13 cows / several": a slash between two phrases)
        return False
    phrase = phrase[1:] if phrase.startswith("/") else phrase  # ("13/day", "13 km/h": a unit's slash)
    words = phrase.rstrip(_CLOSING + _SPACES + ".!").split()
    tokens = [t.lower() for t in _TOKEN.findall(" ".join(words))]
    if tokens[-2:] in (["are", "left"], ["is", "left"], ["were", "left"], ["was", "left"]):
        tokens = tokens[:-2] + ["left"]  # ("13 are left": the one verb phrase a count may end with)
    tokens = _tail_clause(tokens)
    if tokens is None:
        return False
    return (len(words) <= TAIL_WORDS and all(_WORD.fullmatch(w) for w in words)
            and not _PRONOUN.search(_OBJECT_PRONOUN.sub(" ", tail))
            and not _JOINER.search(tail) and all(m[1].lower() in LY_NOUNS for m in _LY.finditer(tail))
            and _np([t for t in tokens if t not in ("/", "·", "⋅", ".")]))  # (the closed classes: "13 nope", "13 idk")


def well_formed(text: str, start: int, end: int) -> bool:
    """Whether ``text`` (:func:`dgrpo.rewards.numbers.plain` of an answer) is lead + value + tail with
    the value at ``text[start:end]`` (its first writing starts at ``start``, its last ends at ``end``),
    and does not open with an auxiliary verb (:data:`AUXILIARIES`: a question, ``"Is it 13"``)."""
    first = _TOKEN.search(text[:start])
    if first is not None and first[0].lower() in AUXILIARIES:
        return False
    return lead_allowed(text[:start]) and tail_allowed(text[end:])
