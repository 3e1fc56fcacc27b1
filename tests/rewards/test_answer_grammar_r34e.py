"""Sixth review of issue 34 (r34e): the one-answer grammar reads the whole text around the number. A lead
or tail word that the grammar has no place for (a modal, an adverb of doubt, an interjection, a judgement,
a second value) refuses the answer; a symbolic answer may write nothing mathematical outside its one
expression. Each expected reward is what a reader says the answer states."""

import pytest

from dgrpo.rewards.answer_form import lead_allowed, tail_allowed
from dgrpo.rewards.math import math_reward


def reward(answer: str, gold: str = "13") -> float:
    return math_reward(f"<think>x</think><answer>{answer}</answer>", gold)


@pytest.mark.parametrize("answer", [
    "It might be 13", "The answer could be 13", "It may be 13", "It would be 13", "Presumably the answer is 13",
    "Supposedly the answer is 13", "Plausibly the answer is 13", "Tentatively, the answer is 13", "My hunch: 13",
    "My hunch is 13", "It is bounded by 13", "It is capped at 13", "It peaks at 13", "It is within 13",
    "There's a chance it's 13", "I'd wager it's 13", "Hopefully it's 13", "I'm not sure, but it's 13", "Not sure: 13",
    "It is a multiple of 13",
])
def test_a_lead_the_grammar_cannot_read_whole_is_refused(answer):
    assert reward(answer) == 0.0


@pytest.mark.parametrize("answer", [
    "13 wrong", "13 nope", "13 idk", "13 jk", "13 no", "13 guessing", "13 cows wrong", "13 incorrect", "13 lol",
    "13 <or 14>", "13 / fourteen-odd", "13 aka fourteen-something", "13 / XIV", "13 cows / several", "13 vs. fourteenth",
    "13 in my view", "13 <!-- or 14 -->",
])
def test_a_tail_that_is_no_noun_phrase_or_holds_a_second_value_is_refused(answer):
    assert reward(answer) == 0.0


@pytest.mark.parametrize("answer", [
    "13", "The answer is 13.", "So the answer is 13", "Therefore, the total is 13.", "In total there are 13 students.",
    "There will be 13 students left.", "It will take Bill 13 days.", "Brittany's mom gave the cashier 13 dollars.",
    "She needs to buy 13 more apples.", "He still needs 13 dollars.", "Final Answer: The final answer is 13",
    "The total number of cookies Jim baked is 13.", "They sold a total of 13 tickets.", "The store made a profit of $13.",
    "It is equal to 13", "It's 13.", "The answer's 13", "Answer: 13", "A: 13", "x = 13", "Number of apples = 13",
    "13 cows remaining", "13 are left.", "13 wrong answers", "18 one-dollar bills", "Yes, 13.", "In 13 days.",
    "The correct answer is 13", "13 km/h", "13 um",
])
def test_an_answer_the_grammar_reads_whole_is_still_paid(answer):
    gold = "18" if answer.startswith("18") else "13"
    assert reward(answer, gold) == 1.0


def test_the_lead_and_tail_rules_directly():
    assert lead_allowed("It will take Bill ") and lead_allowed("So, ") and lead_allowed("")
    assert not lead_allowed("It might be ") and not lead_allowed("Presumably the answer is ")
    assert tail_allowed(" cows.") and tail_allowed("") and tail_allowed(" are left")
    assert not tail_allowed(" wrong") and not tail_allowed(" nope") and not tail_allowed(" / several")


@pytest.mark.parametrize("answer, gold", [
    ("$x+1$ (x+2)", "$x+1$"), ("x+2 vs. $x+1$", "$x+1$"), ("$x+1$ alternatively x+2", "$x+1$"),
    ("$\\pi$ (2\\pi)", "$\\pi$"), ("$x^2$ otherwise x^3", "$x^2$"), ("It might be $x+1$", "$x+1$"),
])
def test_a_symbolic_answer_with_a_second_candidate_outside_its_span_is_refused(answer, gold):
    assert reward(answer, gold) == 0.0


@pytest.mark.parametrize("answer, gold", [
    ("$x+1$", "$x+1$"), ("The answer is $x+1$.", "$x+1$"), ("Final answer: $x+1$", "$x+1$"), ("\\boxed{x+1}", "$x+1$"),
    ("$\\frac{\\pi}{2}$", "$\\frac{\\pi}{2}$"), ("$2\\sqrt{3}$", "$2\\sqrt{3}$"),
])
def test_a_symbolic_answer_alone_in_its_span_is_still_paid(answer, gold):
    assert reward(answer, gold) == 1.0
