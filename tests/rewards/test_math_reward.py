import time
from fractions import Fraction

import pytest

from dgrpo.rewards import math as math_module
from dgrpo.rewards.format import parse_completion

from dgrpo.rewards.math import answers_match, math_reward, numbers_in, one_number, parse_oracle, shaped_math_reward


def test_two_think_blocks_fail():
    assert math_reward("<think>a</think><think>b</think><answer>c</answer>", "c") == 0.0
    assert parse_completion("<think>a</think><think>b</think><answer>c</answer>") is None


def test_newlines_and_units_allowed():
    assert math_reward("<think>\nx\n</think>\n<answer>\n54 cows\n</answer>", "54") == 1.0


@pytest.mark.parametrize("text", [
    "<answer>54</answer><think>x</think>",        # wrong order
    "<think>x</think>",                           # no answer
    "Sure! <think>x</think><answer>54</answer>",  # text outside the blocks
    "<think>x</think><answer>54</answer><answer>54</answer>",
    "<think>x<answer>54</answer></think>",
])
def test_format_violations(text):
    assert math_reward(text, "54") == 0.0


def test_oracle_parsing():
    assert parse_oracle("She pays 5-8=-3\n#### -3") == "-3"
    assert parse_oracle("#### 1,234") == "1234"
    with pytest.raises(ValueError):
        parse_oracle("no final line")


def test_number_equivalence():
    assert answers_match("$1,234.00", "1234")
    assert answers_match("54.0", "54")
    assert answers_match("-3", "-3")
    assert not answers_match("55", "54")
    assert not answers_match("no number", "54")


def test_wrong_answer_gets_zero():
    assert math_reward("<think>3+4=8</think><answer>8</answer>", "7") == 0.0


def test_malformed_oracle_raises():
    with pytest.raises(ValueError):
        math_reward("<think>x</think><answer>1</answer>", "not a number")


@pytest.mark.parametrize("completion, w, expected", [
    ("<think>2+3=5</think><answer>5</answer>", 0.5, 1.0),        # correct: full reward whatever w
    ("<think>2+3=6</think><answer>6</answer>", 0.5, 0.5 / 1.5),  # well formatted, wrong: w / (1 + w)
    ("<think>2+3=6</think><answer>6</answer>", 1.0, 0.5),
    ("the answer is 5", 0.5, 0.0),                                # neither
    ("<think>2+3=6</think><answer>6</answer>", 0.0, 0.0),        # w = 0: the binary reward
])
def test_shaped_math_reward_adds_a_normalised_format_reward(completion, w, expected):
    assert shaped_math_reward(completion, "5", w) == pytest.approx(expected, abs=1e-12)
    if w == 0.0:
        assert shaped_math_reward(completion, "5", w) == math_reward(completion, "5")


@pytest.mark.parametrize("w", [-0.1, float("nan"), float("inf"), 1e16])
def test_shaped_math_reward_refuses_bad_weights(w):
    with pytest.raises(ValueError, match="format_weight"):
        shaped_math_reward("<think>x</think><answer>5</answer>", "5", w)


# One answer, or no reward (issue 34): the answer block must state exactly one value.
@pytest.mark.parametrize("answer, gold", [
    ("1331 and 1728", "1728"), ("1331 or 1728", "1728"), ("1728 or 1331", "1728"), ("between 10 and 12", "12"),
    ("12, no wait 13", "13"), ("12,13", "13"), ("12-13", "13"), ("12 (or 13)", "12"), ("twelve or 13", "13"),
    ("3 + 4 = 7", "7"), ("1728; 1331", "1728"), ("1.2.3", "3"), ("5/0", "5"), ("1e9999", "9999"),
])
def test_a_hedge_or_a_list_earns_nothing(answer, gold):
    assert not answers_match(answer, gold)
    assert math_reward(f"<think>x</think><answer>{answer}</answer>", gold) == 0.0


@pytest.mark.parametrize("answer, gold", [
    ("54 cows", "54"), ("$1,234.00", "1234"), ("x = -7.", "-7"), ("\\boxed{18}", "18"), ("\\frac{3}{4}", "0.75"),
    ("3/4", "3/4"), ("54.0", "54"), ("１２", "12"), ("−3", "-3"), ("7%", "7"), ("The answer is 12.", "12"),
    ("2.5e3", "2500"),
])
def test_one_value_with_words_and_units_around_it_is_credited(answer, gold):
    assert answers_match(answer, gold)
    assert math_reward(f"<think>x</think><answer>{answer}</answer>", gold) == 1.0


def test_numbers_are_read_as_exact_fractions():
    assert numbers_in("$1,234.50 and 3/4 of -2.5e3") == [Fraction(2469, 2), Fraction(3, 4), Fraction(-2500)]
    assert numbers_in("1331, 1728") == [1331, 1728] and numbers_in("1,2345") == [1, 2345]  # thousands: groups of 3
    assert one_number("54 cows") == 54 and one_number("no number") is None and one_number("1 or 2") is None


def test_a_huge_number_counts_but_equals_nothing_and_costs_nothing():
    huge = "9" * 50_000  # past Python's 4,300-digit int limit: never parsed
    assert numbers_in(huge) == [None]
    assert not answers_match(huge, "9") and not answers_match(huge + " or 9", "9")


def test_a_symbolic_oracle_is_compared_by_math_verify_and_refuses_hedges():
    assert answers_match("x + 1", "1 + x")
    assert not answers_match("x + 1 or x + 2", "x + 1") and not answers_match("x + 2, x + 1", "x + 1")


def test_the_program_reward_and_the_ensemble_vote_use_the_same_rule():
    from dgrpo.rewards.code import output_matches
    from dgrpo.robust.voting import canonical_number

    assert output_matches("The answer is 7\n", "7") and not output_matches("6 or 7\n", "7")
    assert canonical_number("6 or 7") is None and canonical_number("7 apples") == "7"


# The review of the first pass (issue 34): hedges still paid, honest answers refused, a false match.
@pytest.mark.parametrize("answer, gold", [
    ("at least 12", "12"), ("more than 12", "12"), ("more than 11", "12"), ("12 or more", "12"), ("12 or so", "12"),
    ("at most 12", "12"), ("≥ 12", "12"), ("about 12", "12"), ("≈12", "12"),
    ("±3", "3"), ("12 ± 1", "12"), ("+/- 3", "3"),
    ("not 12", "12"), ("not 12, 13", "13"), ("it isn't 13", "13"),
    ("twelve or 13", "13"), ("12 thousand", "12"), ("12 and a half", "12"),
    ("\\frac12", "12"),  # LaTeX's \frac12 is 1/2, never 12
    ("–5", "5"),  # an en dash before a digit is a minus: -5
    ("$12$ or $13$", "13"), ("$12$ $13$", "13"), ("\\boxed{12} \\boxed{13}", "13"),
    ("5²", "5"), ("5²", "52"),  # 25, not 5 and not the digits 52
    ("√5", "5"), ("5π", "5"), ("5 squared", "5"),
    ("y²+2=5", "5"), ("y²+2=5", "3"), ("y² = 5", "5"), ("2y²", "2"),  # an equation is no answer
])
def test_a_bound_a_negation_a_power_or_a_second_span_earns_nothing(answer, gold):
    assert not answers_match(answer, gold)
    assert math_reward(f"<think>x</think><answer>{answer}</answer>", gold) == 0.0


def test_two_different_math_spans_are_two_answers_for_a_symbolic_oracle():
    assert answers_match("$x+1$", "$1+x$")
    assert not answers_match("$x+2$ $x+1$", "$1+x$")  # (the first pass paid this: math-verify read the last span)


@pytest.mark.parametrize("answer, gold", [
    ("54 m²", "54"), ("54m²", "54"), ("9.8 m/s²", "9.8"), ("12 cm³", "12"), ("54 meters squared", "54"),
    ("the right one is 12", "12"), ("this one: 12", "12"),  # ("one" after a determiner is a pronoun)
    ("1.2e3", "1200"), ("1.2E+3", "1200"), ("1.2 × 10^3", "1200"), ("1.2×10³", "1200"), ("1.2 \\times 10^{3}", "1200"),
    ("½", "0.5"), ("1½", "1.5"), ("1 ½ cups", "3/2"), ("\\frac12", "0.5"), ("\\frac{1}2", "1/2"),
    ("1 728", "1728"), ("1 000 000", "1000000"),
    ("25%", "25"), ("25 %", "25"), ("25\\%", "25"), ("25 percent", "25"), ("25", "25%"),
    ("–5", "-5"), ("minus 5", "-5"), ("12 left over", "12"),
])
def test_one_value_in_its_usual_typography_is_credited(answer, gold):
    assert answers_match(answer, gold)
    assert math_reward(f"<think>x</think><answer>{answer}</answer>", gold) == 1.0


def test_typographic_numbers_read_as_their_values():
    assert numbers_in("½ and 1½ and 2 ¾") == [Fraction(1, 2), Fraction(3, 2), Fraction(11, 4)]
    assert numbers_in("1 728 and 1,728 and 12 34") == [1728, 1728, 12, 34]  # groups of exactly 3
    assert numbers_in("5²") == [5, 2] and numbers_in("54 m²") == [54]
    assert numbers_in("–5 then 3–4") == [-5, 3, 4] and numbers_in("\\frac12") == [Fraction(1, 2)]


@pytest.mark.parametrize("answer, expected", [
    ("(1, 2)", True), ("x = 1, y = 2", True), ("[1, 2]", True), ("(2, 1)", False), ("(1, 2) or (3, 4)", False),
    ("(1, 2, 3)", False), ("1", False), ("about (1, 2)", False),
])
def test_a_tuple_oracle_is_matched_by_the_same_numbers_in_order(answer, expected):
    assert answers_match(answer, "(1, 2)") is expected


@pytest.mark.parametrize("text", ["1 " * 20_000, "9" * 50_000 + " m²", "1." * 20_000 + "x10^3", "1 m/" * 10_000 + "s²",
                                  "\\boxed{" * 10_000, "$1" * 20_000, "1, " * 20_000])
def test_reading_a_long_answer_takes_linear_time(text):
    import time

    start = time.process_time()
    assert not answers_match(text, "1") and not answers_match(text, "(1, 2)")
    assert time.process_time() - start < 10.0  # (a quadratic regex takes minutes on these 20,000-40,000 characters)


@pytest.mark.parametrize("text", ["\\(" * 16384, "\\[" * 16384, "$$x" * 10922, "\\boxed{" * 4681])
def test_repeated_span_openers_are_scanned_once(text):
    """32k characters of math-span openers with no closer (review of issue 33: the old pattern took 2.6 s
    of host CPU on ``\\(`` x 16384, one scan to the end per opener); the bound is 5x the linear cost measured."""
    start = time.process_time()
    spans = list(math_module._SPANS.finditer(text))
    assert time.process_time() - start < 0.25
    assert len(spans) == (10922 // 2 if text.startswith("$$") else 0)  # "$$x$$" + "x": one span per two "$$x"


def test_spans_of_every_delimiter_are_found():
    text = r"so $12$ or \(13\) and \[ 14 \] and $$15$$ \boxed{16}"
    found = [g.strip() for m in math_module._SPANS.finditer(text) for g in m.groups() if g]
    assert found == ["12", "13", "14", "15", "16"]


@pytest.mark.parametrize("answer, gold", [
    ("over 13", "13"), ("under 13", "13"), ("above 13", "13"), ("below 13", "13"), ("13+", "13"),
    ("13 and up", "13"), ("13 upwards", "13"), ("13 max", "13"), ("13 tops", "13"), ("13 minimum", "13"),
    ("12..13", "12"), ("12…13", "12"), ("13-ish", "13"), ("13ish", "13"), ("13?", "13"), ("13 if I'm right", "13"),
])
def test_bounds_and_doubt_in_other_words_earn_nothing(answer, gold):
    """Second review of issue 34: each of these still earned 1.0 (the first number read as the answer)."""
    assert math_reward(f"<think>x</think><answer>{answer}</answer>", gold) == 0.0


@pytest.mark.parametrize("answer, gold", [("13 min", "13"), ("13 minutes", "13"), ("+13", "13"), ("13.", "13"),
                                          ("$13$", "13"), ("54 cows", "54")])
def test_the_new_hedge_words_leave_plain_answers_alone(answer, gold):
    assert math_reward(f"<think>x</think><answer>{answer}</answer>", gold) == 1.0


# Third review of issue 34: honest answers the one-answer rule refused, and the forms next to them it must still refuse.
@pytest.mark.parametrize("answer, gold", [
    ("18 cm^2", "18"), ("18 m2", "18"), ("18 m^2.", "18"), ("9.8 m/s^2", "9.8"), ("3 s^-1", "3"), ("5 in3", "5"),
    ("18 cm^{2}", "18"), ("18 one-dollar bills", "18"), ("12 two-liter bottles", "12"), ("18 half-dollar coins", "18"),
    ("13 or 13.0", "13"), ("13 (13.0)", "13"), ("$13$ or $13.0$", "13"), ("13 cows, i.e. 13", "13"),
    ("\\boxed{13} or \\boxed{13.0}", "13"),
])
def test_units_in_ascii_a_compound_adjective_and_one_value_written_twice_are_credited(answer, gold):
    assert math_reward(f"<think>x</think><answer>{answer}</answer>", gold) == 1.0


@pytest.mark.parametrize("answer, gold", [
    ("13 or 14", "13"), ("13 or 14", "14"), ("13 - 13", "13"), ("13 times 13", "13"), ("13 x 13", "13"),
    ("13:13", "13"), ("13 13", "13"), ("13 or 13?", "13"), ("13 or not 13", "13"), ("13 or 13.0 or more", "13"),
    ("at least 13 or 13", "13"), ("1 1 1 1", "1"), ("13, 13, 13, 13", "13"), ("12 or twelve", "12"),
    ("5^2", "5"), ("5^2", "25"), ("2y^2", "2"), ("5 m^2 + 3", "5"), ("twelve-ish", "12"), ("twenty-five", "25"),
    ("13 one-half", "13"),
])
def test_two_values_an_operation_or_a_hedge_between_repeats_still_earn_nothing(answer, gold):
    assert math_reward(f"<think>x</think><answer>{answer}</answer>", gold) == 0.0


def test_an_ascii_unit_power_is_dropped_and_any_other_power_kept():
    assert numbers_in("18 cm^2 and 18 m2") == [18, 18] and numbers_in("5^2 and 2y^2") == [5, 2, 2, 2]
    assert numbers_in("m2 is 18") == [2, 18]  # (no number before the unit: nothing is dropped)


# Fourth review of issue 34: single-number bounds and approximations that were paid (each holds one number, 13).
@pytest.mark.parametrize("answer", [
    "13 and above", "13 and over", "13 and under", "13 and beyond", "13 & up", "beyond 13", "exceeding 13", "past 13",
    "in excess of 13", "north of 13", "surpassing 13", "13 plus", "13-plus", "a lower bound of 13", "13 (upper bound)",
    "13 at best", "13 at worst", "&gt;13", "&lt;=13", "≳13", "⋝13", "≫13", "≪13", "n ⪯ 13", "〜13", "o\u200bver 13",
    "ov\u00ader 13", "atleast 13", "more then 13", "close to 13", "in the neighborhood of 13", "on the order of 13",
    "ballpark 13", "13-odd", "13 odd", "13 and change", "13-something", "13 something", "13 appr.", "13 apx",
    "13 (estimate)", "13 estimated", "est. 13", "13 (est.)", "13 (unsure)", "13 - x", "13 minus something",
])
def test_a_bound_or_an_approximation_in_any_wording_earns_nothing(answer):
    assert math_reward(f"<think>x</think><answer>{answer}</answer>", "13") == 0.0


@pytest.mark.parametrize("joiner", ["or", "and", "&"])
@pytest.mark.parametrize("word", ["above", "over", "under", "below", "beyond", "higher", "lower", "more", "less"])
def test_a_bound_after_the_number_is_refused_whatever_joins_it(joiner, word):
    """The vocabulary is one set: "13 or above" and "13 and above" differ by one word and are both refused."""
    assert math_reward(f"<think>x</think><answer>13 {joiner} {word}</answer>", "13") == 0.0


@pytest.mark.parametrize("answer, gold", [
    ("13 odd numbers", "13"), ("12 left over", "12"), ("13 more apples", "13"), ("13 years old", "13"),
    ("13-year-old", "13"), ("13 m/s", "13"), ("13 kg⋅m", "13"), ("&#49;3", "13"), ("1\u200b3", "13"),
    ("13 &times; 1 cows", "13"),
])
def test_the_bound_vocabulary_leaves_plain_answers_alone(answer, gold):
    expected = 0.0 if "&times;" in answer else 1.0  # (13 × 1 is an expression of two numbers: refused as before)
    assert math_reward(f"<think>x</think><answer>{answer}</answer>", gold) == expected


def test_a_second_value_in_another_language_is_not_read():
    """Documented limit (docs/rewards.md): only English number words are read; no library in the
    environment names number words of other languages, so "13 oder vierzehn" states one number."""
    assert math_reward("<think>x</think><answer>13 oder vierzehn</answer>", "13") == 1.0
    assert math_reward("<think>x</think><answer>13 or fourteen</answer>", "13") == 0.0


# Fifth review of issue 34 (r34d). A look-alike letter in a qualifier: the reward reads letters with the ASR's
# folding (dgrpo.text.fold), so each is the English word it shows. Built from known code points.
CYR = {"o": "\u043e", "e": "\u0435", "a": "\u0430"}  # Cyrillic о, е, а
GREEK_O = "\u03bf"


@pytest.mark.parametrize("answer", [
    f"{CYR['o']}ver 13", f"{CYR['a']}bout 13", f"n{CYR['e']}ar 13", f"13 {CYR['o']}r s{CYR['o']}", f"{CYR['a']}t l{CYR['e']}ast 13",
    f"r{CYR['o']}ughly 13", f"n{CYR['o']}t 13", f"{GREEK_O}ver 13", "\uff4f\uff56\uff45\uff52 13",  # Greek ο; fullwidth "over"
    f"{CYR['a']}pprox. 13", f"{CYR['o']}\u200bver 13",
])
def test_a_qualifier_written_with_look_alike_letters_earns_nothing(answer):
    assert math_reward(f"<think>x</think><answer>{answer}</answer>", "13") == 0.0


@pytest.mark.parametrize("answer", [
    "shy of 13", "just shy of 13", "short of 13", "c. 13", "ca. 13", "some 13", "13 (rounded)", "13, I think",
    "13 I think", "13 (rounded up)", "13, roughly", "13; 14 maybe",
    # forms no list names: the closed grammar refuses a lead word it does not allow and a clause after the number
    "tentatively 13", "supposedly 13", "perchance 13", "Plausibly, 13", "13, supposedly", "13 (tentative)", "13 \u2014 give or take",
    "13 \u2014 probably", "13: my best shot",
    "the answer is 13, that one",  # (a clause after the number: credited before the closed grammar)
    "13 supposedly", "13 presumably", "13 apparently", "13 allegedly", "13 cows, hopefully", "13 tentative",
    "13 guesstimate", "13 (provisional)", "13 in theory", "13 and counting", "13 give/take", "13 hmm", "13 and", "13 umm",
    "13 plus change", "13 right", "is it 13", "Is 13 right", "Could be 13", "Must be 13",
])
def test_a_hedge_in_words_no_list_names_earns_nothing(answer):
    assert math_reward(f"<think>x</think><answer>{answer}</answer>", "13") == 0.0


@pytest.mark.parametrize("answer, gold", [
    ("**13**", "13"), ("**13** cows", "13"), ("The answer is **13**.", "13"), ("*13*", "13"), ("$13$", "13"),
    ("The answer is 13.", "13"), ("Janet makes $18 every day at the farmers' market.", "18"),
    ("So the total amount of fabric is 3 bolts of fabric", "3"), ("a total of 13 cows", "13"), ("x = 13", "13"),
    ("Answer: 13", "13"), ("It's 13.", "13"), ("She sold them for $13.", "13"), ("It is equal to 13", "13"),
    ("13 dollars per day", "13"), ("13-year-old", "13"), ("\\boxed{13}", "13"), ("\\text{13 apples}", "13"),
    ("2\\,500", "2500"), ("The price increased by 13%", "13"), ("So, 13", "13"), ("Therefore, he has only 13 left.", "13"),
    ("That leaves Amelia with $13.", "13"), ("He gave away 13 toys", "13"), ("They will arrive in 13 hours.", "13"),
    ("13 </answer", "13"),
    ("13 jelly beans", "13"), ("13 um", "13"), ("13 dollars weekly", "13"), ("13 family members", "13"), ("only 13", "13"),  # (an honest SmolLM2 sample ends "<answer>5 </answer</answer>": a tag written twice)
])
def test_an_answer_the_grammar_reads_is_credited(answer, gold):
    assert math_reward(f"<think>x</think><answer>{answer}</answer>", gold) == 1.0


def test_bold_is_read_the_same_by_the_math_reward_and_the_program_check():
    """r34d N4: ``**13**`` was paid by the reward and refused by python_math's check (read as a power)."""
    from dgrpo.rewards.code import output_matches

    for line in ("**13**", "**13** cows", "The answer is **13**."):
        assert output_matches(line + "\n", "13") and answers_match(line, "13")
    assert not output_matches("2**2**2**40\n", "13")  # (a power tower is still no answer)


@pytest.mark.parametrize("answer, oracle", [
    ("$\\sqrt{2}$", "$\\sqrt{2}$"), ("$\\pi$", "$\\pi$"), ("$\\frac{\\pi}{2}$", "$\\frac{\\pi}{2}$"),
    ("$2\\sqrt{3}$", "$2\\sqrt{3}$"), ("\\boxed{\\sqrt{2}}", "$\\sqrt{2}$"), ("$\\log 2$", "$\\log 2$"),
    ("$\\sqrt{2}$", "$\\sqrt 2$"),
])
def test_a_symbolic_oracle_credits_its_own_functions_and_constants(answer, oracle):
    """r34d N3: an answer identical to its oracle earned 0 (the oracle's own √, π, log read as a hedge)."""
    assert math_reward(f"<think>x</think><answer>{answer}</answer>", oracle) == 1.0


@pytest.mark.parametrize("answer", ["about $\\sqrt{2}$", "$\\sqrt{2}$ or $\\sqrt{3}$", "at least $\\sqrt{2}$",
                                    "$\\sqrt{2}$, $\\sqrt{3}$", "$\\sqrt{3}$", "$\\sqrt{2} \\pi$"])
def test_a_symbolic_oracle_still_refuses_hedges_and_other_values(answer):
    assert math_reward(f"<think>x</think><answer>{answer}</answer>", "$\\sqrt{2}$") == 0.0


@pytest.mark.parametrize("text", ["13" + "\t \n" * 10_000 + ".", "13" + " " * 40_000 + "x,", "_a (" * 10_000 + "13",
                                  "a" * 50_000 + " 13", "13 " + "a." * 20_000 + ",", "and " * 20_000 + "13"])
def test_the_grammar_and_the_qualifiers_read_long_answers_in_linear_time(text):
    """A tail regex of the first draft took minutes on 4,000 blanks before ``x,``; the qualifier scan took 7 s on
    30,000 blanks (before this branch too). Measured 0.02-0.2 s each now."""
    import time

    start = time.process_time()
    math_reward(f"<think>x</think><answer>{text}</answer>", "13")
    assert time.process_time() - start < 3.0
