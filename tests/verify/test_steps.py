"""Step checker: the issue's cases, attacker rewrites, limits, and properties on generated equations."""

from __future__ import annotations

import time
from decimal import ROUND_HALF_EVEN, Decimal
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dgrpo.verify.steps import StepChecker, check_steps


# ----- the cases of issue 16 -----
@pytest.mark.parametrize("text, accepted", [
    ("2 + 2 = 5", False),
    ("2 + 2 = 4 apples", True),
    ("3 * 4 = 12 + 1 = 13", True),
    ("10 / 4 = 2.5", True),
    ("1/3 = 0.33", True),
    ("$1,200 + $300 = $1,500", True),
    ("50% of 80 = 40", True),
    ("Tom has some apples and gives a few away, so he has fewer now.", True),
])
def test_issue_cases(text, accepted):
    assert check_steps(text).accepted is accepted


def test_false_claim_is_quoted_in_the_reason():
    v = check_steps("Tom has 3 apples. He buys 2 + 2 = 5 more, so 3 + 5 = 8 apples.")
    assert not v.accepted
    assert v.reason == 'false claim "2 + 2 = 5": the left side is 4, not 5'
    assert [c.status for c in v.claims] == ["false", "true"]
    assert (v.claims[0].left, v.claims[0].right) == (4, 5)


def test_rounding_tolerance_and_exact_checker():
    assert check_steps("1/3 = 0.33").accepted
    assert not StepChecker.exact()("1/3 = 0.33").accepted
    assert not check_steps("1/3 = 0.33", rounding=False).accepted
    assert check_steps("1/3 = 0.33", rounding=False, rtol=0.02).accepted  # 1% off
    assert check_steps("1/3 = 0.33", rounding=False, atol=0.01).accepted
    # half a unit of the last written digit: 0.333 is within 0.0005 of 1/3, 0.34 is not within 0.005
    assert check_steps("1/3 = 0.333").accepted and not check_steps("1/3 = 0.34").accepted
    # an integer result gets no rounding: 2.2 + 2.2 is 4.4, and "= 4" would teach a wrong step
    assert not check_steps("2.2 + 2.2 = 4").accepted
    assert check_steps("22/7 ≈ 3.14").accepted and check_steps("100/3 ≈ 33").accepted
    assert not check_steps("2 + 2 ≈ 5").accepted


def test_chains_and_restatements():
    assert check_steps("2 + 3 = 5 + 4 = 9").accepted
    assert not check_steps("2 + 3 = 5 + 4 = 10").accepted
    assert check_steps("2 * 4 + 3 * 6 = 8 + 18 = 26").accepted  # a restated sum of the left's parts
    assert check_steps("(30 - 12)/2 = 18/2 = 9").accepted
    # true as an identity, but it shows "2 + 2 = 5": the 5 is neither the value so far nor part of the left
    v = check_steps("2 + 2 = 5 - 1 = 4")
    assert not v.accepted and v.false_claims[0].text == "2 + 2 = 5 - 1"


@pytest.mark.parametrize("text", [
    "2 + 2 equals 5", "2 + 2 is 5", "two plus two is five", "2 plus 2 makes 5", "2 times 2 is equal to 5",
    "２＋２＝５",  # fullwidth
    "2\u2009+\u20092\u2009=\u20095",  # thin spaces
    "2\u200b+\u200d2\u2060=\ufeff5",  # zero-width space, joiner, word joiner, BOM
    "2 + 2 = \u0665",  # Arabic-Indic five
    "\u0968 + \u0968 = \u096b",  # Devanagari digits
    "𝟐 + 𝟐 = 𝟓",  # mathematical bold
    "2 + 2 = Ƽ",  # Latin letter tone five, drawn like 5
    "2 × 2 = 5", "2 x 2 = 5", "2·2 = 5", "2 ∗ 2 = 5",
    "7 − 2 = 6", "7 – 2 = 6",  # minus sign, en dash
    "2 + 2 = 5x", "2 + 2 = 5 + y",  # algebra after the false number still shows "2 + 2 = 5"
    "<<2+2=5>>",  # a GSM8K-style calculator annotation
    "<think>2 + 2 = 5</think><answer>4</answer>",
    "- 2 + 2 = 5",  # a list bullet is not a minus sign
    "2 + 2 = 4 - 0 = 5",
    "2 + 2 ≠ 4", "2 + 2 > 4",
])
def test_attacker_rewrites_are_caught(text):
    v = check_steps(text)
    assert not v.accepted, (text, v.claims)


def test_quote_is_the_original_text():
    v = check_steps("Then ２＋２＝５ boxes.")
    assert v.false_claims[0].text == "２＋２＝５"
    s, e = v.false_claims[0].start, v.false_claims[0].end
    assert "Then ２＋２＝５ boxes."[s:e] == "２＋２＝５"


@pytest.mark.parametrize("text", [
    "Natalia sold 48/2 = <<48/2=24>>24 clips in May.",
    "She makes 9 * 2 = $<<9*2=18>>18 every day.",
    "80,000+50,000=$<<80000+50000=130000>>130,000",
    "$20/hour * 35 hours/week = $<<20*35=700>>700/week",
    "30 original cars – 5 cars that exited = <<30-5=25>>25 cars",
    "He needs 200 GB * 40% = <<200*40*.01=80>>80 GB",
    "1 1/2 / 1/2 = 3", "6 / 1/2 = 12", "1½ * 2 = 3", "3 1/2 + 1 = 4.5",
    "27(1/3)=9", "1/2 (68) + 10 = 44", "3 miles * (5280 feet/1 mile) = 15840 feet",
    "\\frac{1}{2} \\times 8 = 4", "3² = 9", "2^10 = 1024", "1.5 million * 2 = 3 million",
    "one hundred and twenty-five plus five is one hundred thirty",
    "18 / 450 x 100 = 4%", "10 years * 5% = 50%",
    "The 5-year-old has 3 + 4 = 7 toys.", "Disney Plus costs 10+10=$20",
    "1 hour = 60 minutes", "Drop 8 degrees = 2 - 8 = -6 degrees",
    "**3 + 4 = 7**", "1. 3 + 4 = 7\n2. 7 * 2 = 14",
])
def test_honest_notation_is_accepted(text):
    v = check_steps(text)
    assert v.accepted, (text, v.reason, v.claims)


def test_unparsed_share_and_its_bound():
    v = check_steps("Let x be the price. x + 5 = 10, so x = 5. Also 2 + 2 = 4.")
    assert [c.status for c in v.claims] == ["unparsed", "unparsed", "true"]
    assert v.unparsed_share == pytest.approx(2 / 3)
    assert v.accepted
    assert not check_steps("x + 5 = 10, so 2 + 2 = 4.", max_unparsed_share=0.4).accepted
    assert check_steps("no equations here").unparsed_share == 0.0


def test_unit_conversions_are_skipped_not_checked():
    v = check_steps("1 hour = 60 minutes, and 100 cents = $1")
    assert [c.status for c in v.claims] == ["skipped", "skipped"] and v.accepted
    assert not check_steps("4 apples = 5 apples").accepted  # same unit: checked


def test_annotations_are_checked_separately():
    v = check_steps("48/2 = <<48/2=24>>24 clips")
    assert [(c.source, c.status) for c in v.claims] == [("text", "true"), ("annotation", "true")]
    assert not check_steps("48/2 = <<48/2=25>>24 clips").accepted
    assert len(check_steps("<<48/2=24>>", annotations=False).claims) == 1  # then read as "48/2=24" inside << >>


# ----- limits: adversarial sizes are handled in bounded time -----
HANG_GUARD_S = 60  # not a speed target (see benchmarks/): only "it does not hang" (0.3-2.6 s here; CI's loaded machine
# once took 11 s over what takes 0.3 s quiet, so 10 s failed there; a quadratic check of these inputs takes hours)


@pytest.mark.parametrize("text", [
    "9" * 10_000 + " + 1 = 5",
    "2 + 2 = " + "4" * 10_000,
    " * ".join(["99999"] * 5_000) + " = 1",
    "(" * 5_000 + "1" + ")" * 5_000 + " = 1",
    "^".join(["9"] * 500) + " = 1",
])
def test_oversized_claims_are_rejected_quickly(text):
    start = time.perf_counter()
    v = check_steps(text)
    assert time.perf_counter() - start < HANG_GUARD_S
    assert not v.accepted and "over the limit" in v.reason
    assert check_steps(text, reject_oversized=False).unparsed_share > 0


def test_long_inputs_are_linear():
    chain = " = ".join(["2 + 3"] + ["5"] * 10_000)
    start = time.perf_counter()
    v = check_steps(chain)
    v_false = check_steps(chain + " = 6")
    unclosed = check_steps("( 1 + " * 5_000 + "1 = 2")
    signs = check_steps("- " * 20_000 + "5 = 5")
    assert time.perf_counter() - start < HANG_GUARD_S
    assert v.accepted and len(v.claims) == 10_000
    assert not v_false.accepted and v_false.false_claims[0].text == "5 = 6"
    assert unclosed.accepted and signs.accepted  # "1 + 1 = 2" and "5 = 5" are the claims there


def test_texts_over_max_chars_are_rejected_unchecked():
    v = check_steps("1 + 1 = 2. " * 20, max_chars=100)
    assert not v.accepted and v.claims == () and "max_chars=100" in v.reason


def test_bad_config_is_one_line_naming_the_field():
    with pytest.raises(ValueError, match=r"^StepChecker: rtol must be >= 0, got -1$"):
        StepChecker(rtol=-1)
    with pytest.raises(ValueError, match="max_digits must be >= 1"):
        StepChecker(max_digits=0)
    with pytest.raises(TypeError, match="text must be a str"):
        check_steps(b"2 + 2 = 4")


# ----- properties on generated true equations -----
@st.composite
def expressions(draw, depth=0):
    """(text, exact value) of a random arithmetic expression, every compound child in brackets."""
    if depth >= 3 or draw(st.booleans()):
        n = draw(st.integers(0, 999))
        return str(n), Fraction(n)
    op = draw(st.sampled_from("+-*/"))
    left, lv = draw(expressions(depth + 1))
    right, rv = draw(expressions(depth + 1))
    if op == "/" and rv == 0:
        op = "+"
    value = {"+": lv + rv, "-": lv - rv, "*": lv * rv, "/": lv / rv if rv else None}[op]
    sym = {"+": draw(st.sampled_from(["+", "plus"])), "-": draw(st.sampled_from(["-", "−"])),
           "*": draw(st.sampled_from(["*", "×", "x"])), "/": draw(st.sampled_from(["/", "÷"]))}[op]
    wrap = lambda s, compound: f"({s})" if compound else s
    return f"{wrap(left, ' ' in left or left.startswith('('))} {sym} {wrap(right, ' ' in right or right.startswith('('))}", value


def written(v: Fraction, places: int) -> str:
    """A result as a person writes it: an integer, or a decimal rounded to ``places``."""
    if v.denominator == 1:
        return str(v.numerator)
    d = (Decimal(v.numerator) / Decimal(v.denominator)).quantize(Decimal(1).scaleb(-places), ROUND_HALF_EVEN)
    return format(d, "f")


@settings(max_examples=300, deadline=None)
@given(expressions(), st.integers(2, 6), st.sampled_from(["", "So ", "We get "]), st.sampled_from(["", " apples", "."]))
def test_true_equations_pass(expr, places, prefix, suffix):
    text, value = expr
    if " " not in text:
        text = f"{text} + 0"
    claim = f"{prefix}{text} = {written(value, places)}{suffix}"
    v = check_steps(claim)
    assert v.accepted and [c.status for c in v.claims] == ["true"], (claim, v.reason, v.claims)


@settings(max_examples=300, deadline=None)
@given(expressions(), st.integers(2, 6), st.integers(-1000, 1000).filter(lambda d: d != 0))
def test_perturbed_results_fail(expr, places, delta):
    text, value = expr
    if " " not in text:
        text = f"{text} + 0"
    claim = f"{text} = {written(value + delta, places)}"
    v = check_steps(claim)
    assert not v.accepted and v.false_claims, (claim, v.claims)


# Layout between a claim's parts: a line break, a quote, markdown emphasis or a tag must not hide it
# (a fresh review's bypass: "2 + 2 =\n5" was read as two unparsed fragments and accepted).
LAYOUTS = [("{l} =\n{r}", "newline after ="), ("{l}\n= {r}", "newline before ="), ("{l} =\r\n{r}", "CRLF"),
           ("{l} =\n\n{r}", "blank line"), ("{l} =\u2028{r}", "line separator"), ("{l} =\x0b{r}", "vertical tab"),
           ("{l} = **{r}**", "bold"), ("{l} = *{r}*", "italic"), ("{l} = _{r}_", "underscore"),
           ("{l} = `{r}`", "backticks"), ('{l} = "{r}"', "quotes"), ("{l} = “{r}”", "curly quotes"),
           ("{l} = <b>{r}</b>", "tag"), ("**{l}** = {r}", "bold left side"),
           # markup the fold does not list, found by attacking it by hand: caught by failing closed
           # (the first number after the relation past markup on its line is the claimed result)
           ('{l} = <span class="a">{r}</span>', "tag with attributes"), ("{l} =<!-- -->{r}", "HTML comment"),
           ("{l} = \\({r}\\)", "LaTeX delimiters"), ("{l} = |{r}|", "bars"), ("{l} = #{r}", "hash"),
           ("{l} = =={r}==", "highlight"), ("{l} = > {r}", "quote marker"), ("{l} is **{r}**", "emphasis after a word")]


@pytest.mark.parametrize("layout,why", LAYOUTS)
def test_layout_does_not_hide_a_false_claim(layout, why):
    text = "<think>" + layout.format(l="2 + 2", r="5") + " so the total is 9.</think><answer>9</answer>"
    v = check_steps(text)
    assert not v.accepted and v.false_claims[0].right == 5, why
    assert check_steps(text.replace("5", "4").replace("9", "8")).accepted, why  # the same layout, a true claim


@settings(max_examples=200, deadline=None)
@given(a=st.integers(0, 999), b=st.integers(0, 999), op=st.sampled_from(["+", "-", "*"]), off=st.integers(-3, 3),
       layout=st.sampled_from([x for x, _ in LAYOUTS]))
def test_layout_never_changes_a_verdict(a, b, op, off, layout):
    """Second method: the same claim written plainly. Layout changes neither what is claimed nor the verdict."""
    c = {"+": a + b, "-": a - b, "*": a * b}[op] + off
    plain = check_steps(f"<think>So {a} {op} {b} = {c} here.</think>")
    laid = check_steps("<think>So " + layout.format(l=f"{a} {op} {b}", r=str(c)) + " here.</think>")
    assert laid.accepted == plain.accepted == (off == 0)


# Found by a fresh review of the first fail-closed rule (which took the first number after "="): decoys,
# operators inside markup, long attribute lists, number words in markup, word relations across lines,
# entities, and claims inside the markup itself. Markup is now blanked (layout.blank_markup) and what it
# held is checked as text of its own.
HIDDEN = ["2 + 2 = <!-- 4 -->5", "3 * 4 = <!-- 12 -->13", "2 + 2 = ~~4~~ 5", "2 + 2 = <span hidden>4</span>5",
          "2 + 2 = <h4 class='a'>5</h4>", "2 + 2 = <span title='4' class='a'>5</span>", "2 + 2 = \\(4\\) 5",
          "2 + 2 = \\(5 * 1\\)", "2 + 2 = |5 - 0|", '2 + 2 = <span style="a:b;c:d;e:f;g:h;i:j;k:l">5</span>',
          "2 + 2 = " + "| " * 25 + "5", "2 + 2 = <i class='a'>five</i>", "2 + 2 = \\(\\text{five}\\)",
          "2 + 2 is\n5", "2 + 2\nis 5", "2 + 2 equals\n\n5", "2 + 2 = \\[\n5\n\\]", "\\(2 + 2\\) = 5", "~~2 + 2~~ = 5",
          "2 + 2 <!-- --> = 5", "3 * 4 = <del>12</del> 13", "2 + 2 =&nbsp;5", "2 + 2 &equals; 5", "2 + 2 &#61; 5",
          "<!-- 2 + 2 = 5 -->", '<span title="2 + 2 = 5">x</span>', "2 + 2 = ~~5~~", "2 + 2 =</think><answer>5",
          # a second review: LaTeX after a result (the first repeating-decimal rule hid it), alignment, entities
          # folded like text, invisible or struck-out LaTeX, colour, sizing
          "\\( 3 \\times 4 = 13 \\quad \\)", "\\( 3 \\times 4 = 13 \\implies x = 1 \\)", "3 \\times 4 &= 13 \\\\",
          "\\begin{aligned} 3 \\times 4 &= 13 \\end{aligned}", "12 &divide; 4 = 4", "2 + 2 = &#x2464;",
          "2 + 2 = \\phantom{4}5", "2 + 2 = \\(\\cancel{4}\\) 5", "\\phantom{2 + 2 = 5}", "2 + 2 = \\textcolor{white}{4} 5",
          "2 + 2 = \\color{red}{5}", "2 + 2 = \\left(5\\right)", "2 + 2 = \\bigl(5\\bigr)",
          # a user-level review: blank letters, markdown escapes, look-alike equals, malformed comments
          "2 + 2 = \u3164 5", "2+2\u3164=\u31645", "2 + 2 = &#x3164;5", "2 + 2 \\= 5", "2 \\+ 2 \\= 5", "2 + 2 \\\\= 5",
          "2 + 2 \ua78a 5", "2 + 2 \u2550 5", "2 + 2 = \\\n5", "2 + 2 = <!-->5", "2 + 2 = <!--!>5", "2 + 2 = <!-- 4 --!>5"]


@pytest.mark.parametrize("text", HIDDEN)
def test_markup_hides_no_false_claim(text):
    v = check_steps(f"<think>{text}</think><answer>5</answer>")
    assert not v.accepted and v.false_claims, text


def test_a_claim_inside_a_comment_or_attribute_is_checked_where_it_is():
    v = check_steps('<think>ok <span title="2 + 2 = 5">x</span></think>')
    assert v.false_claims[0].source == "markup" and v.false_claims[0].text == "2 + 2 = 5"


@pytest.mark.parametrize("text", [
    "27 - 9 = (6 * x) - (3 * x)",  # algebra: an operator continues the number (GSM8K test row 279)
    "5 + 3 = the pens Tom had after 2 days",  # a word ends the search: no hidden number
    "2 + 2 = ?\n5 apples were left", "Question: 15 + 27 = ? (3 points)",  # unknowns
    "3 * 4 = \\(4 \\times 3\\)", "2 * 3 = \\(2 \\cdot 3\\) = 6", "12 / 4 = \\(\\frac{12}{4}\\) = 3",  # LaTeX restated
    "10 + 1/3 = \\(10.\\overline{3}\\)", "2 / 3 + 0 = \\(0.\\overline{6}\\)",  # repeating decimals
    "5 - 8 = \\(- 3\\)", "| 3 * 4 | = | 12 |", "60/4 = **15** 4-packs", "60/4 = <b>15</b> 4-packs",
    "<b>3 + 4 = 7</b>", "Total: 3 + 4 = 7 <!-- ok -->", "3 + 4 = 7</think><answer>14", "2 + 2 = <b>4</b> 3 + 3 = <b>6</b>",
    "3 &times; 4 = 12", "10 &minus; 4 = 6", "2 \\times 1{,}500 = 3{,}000", "3/6 = 50\\%", "\\$3 \\times 4 = \\$12",
    "\\( \\left( 3 + 4 \\right) \\times 2 = 14 \\)", "\\begin{aligned} 3 \\times 4 &= 12 \\\\ 12 + 1 &= 13 \\end{aligned}",
    "3 * 4 = \\textcolor{red}{12}",
])
def test_failing_closed_leaves_honest_text_alone(text):
    # measured: no verdict changed on 21,127 real texts (docs/step_checker.md), and GSM8K's references laid out
    # in LaTeX, tags, comments, bold and table bars: 1 of 1,287 rejected (results/step_checker_markup)
    v = check_steps(f"<think>{text}</think>")
    assert v.accepted and not v.false_claims, (text, v.reason)


def test_markup_nested_in_markup_is_bounded_and_fails_closed():
    # a claim held in markup is checked (above); held four deep it is refused unchecked, in linear time
    v = check_steps("<think><!-- <!-- <!-- <!-- 2 + 2 = 4 --> --> --> --></think>")
    assert not v.accepted and "markup nested 4 deep" in v.reason
    assert not check_steps("<!--" * 20_000).accepted  # (was a RecursionError)


def test_what_failing_closed_still_rejects_or_misses_as_documented():
    assert not check_steps("<think>3 * 4 = ~~10~~ 12</think>").accepted  # a struck-out wrong value is still a claim
    assert not check_steps("<think>2 * 3 = |-6|</think>").accepted  # bars are blanked, not absolute values
    assert check_steps("<think>2 + 2 = <s>4</s> 5 apples</think>").accepted  # a decoy before a named count
    assert check_steps("<think>2 + 2 = total 5</think>").accepted  # a word between


def test_layout_folding_leaves_products_and_line_ends_alone():
    # a "*" beside a number that no emphasis opened is a product; a number on the next line is no result
    assert check_steps("<think>12 = 4 * 3 = 12 and 3 * 4 = 12 and\n5 apples</think>").accepted
    assert check_steps("<think>2 + 2 = **4**. Then 4 * 3 = 12.</think>").accepted
    assert not check_steps("<think>2 + 2 = **4**. Then 4 * 3 = 13.</think>").accepted
