"""Seventh review of issue 34 (r34f): honest answers the one-answer grammar refused, and symbolic answers
written number-first. Each expected reward is what a reader says the answer states: one value, the gold's
(1.0), or a hedge, a judgement or a second candidate (0.0)."""

import pytest

from dgrpo.rewards.math import math_reward


def reward(answer: str, gold: str = "13") -> float:
    return math_reward(f"<think>w</think><answer>{answer}</answer>", gold)


@pytest.mark.parametrize("answer", [
    "The answer is: 13", "The total is: 13", "The result is: 13",  # a clause the colon ends (docs: `is`, `:`)
    "13 is the answer", "13 is my final answer", "13 is the total number of cows",  # the answer named after it
    "They paid $13 for it.",  # "it" the object of a preposition
    "13 students are in the class.",  # a noun, a copula, a place
    "13 (apples)",  # a unit in brackets, as "13 apples"
    "Thirteen (13)", "13 (thirteen)", "The answer is thirteen (13).",  # one value in words and digits
])
def test_one_value_with_words_around_it_is_paid(answer):
    assert reward(answer) == 1.0


@pytest.mark.parametrize("answer", [
    "My guess is: 13", "It might be: 13", "I think it is: 13",  # a colon does not make a belief a statement
    "13 is a possible answer", "13 is the closest answer", "13 is the wrong answer", "13 is not the answer",
    "13 is the answer I think", "13 is the answer, probably", "13 is in the range", "13 is close",
    "13 for it, I think", "13 (rounded)", "13 (maybe)", "13 (or 14)", "13 (I think)",
    "fourteen (13)", "13 (fourteen)", "13 (thirteen or fourteen)", "thirteen or fourteen (13)", "13 (thirteen)?",
    "13 (thirteen) or 14", "thirteen",  # words of another value, a hedge, words alone
    "13 (rough)", "Rough total: 13", "The rough answer is 13",  # (brackets read as "13 rough": "rough" approximates)
])
def test_the_new_forms_do_not_let_hedges_through(answer):
    assert reward(answer) == 0.0


@pytest.mark.parametrize(("answer", "gold", "want"), [
    ("Forty-five (45) cows", "45", 1.0), ("one hundred and twenty (120)", "120", 1.0),
    ("-13 (thirteen)", "-13", 0.0),  # (-13 written, thirteen said: two values)
])
def test_a_number_restated_in_words_is_paid_only_when_the_words_spell_it(answer, gold, want):
    assert reward(answer, gold) == want


@pytest.mark.parametrize(("answer", "gold"), [
    ("$1+x$", "$x+1$"), ("$3 - x$", "$-x+3$"), ("$\\frac{1}{2} + x$", "$x + \\frac{1}{2}$"), ("$4 + \\pi$", "$\\pi + 4$"),
    ("The answer is $1+x$.", "$x+1$"),
])
def test_a_symbolic_answer_written_number_first_is_paid(answer, gold):
    assert reward(answer, gold) == 1.0


@pytest.mark.parametrize(("answer", "gold"), [
    ("$2+x$", "$x+1$"),  # another expression
    ("$1+x$ or $x+2$", "$x+1$"), ("1+x, x+2", "$x+1$"), ("$1+x$ (x+2)", "$x+1$"),  # a second candidate
    ("about $1+x$", "$x+1$"), ("$1+x$?", "$x+1$"),  # a hedge
    ("13+", "13"), ("13 - x", "13"),  # a number gold: a number joined to a variable still hedges
])
def test_a_symbolic_hedge_or_a_wrong_expression_is_refused(answer, gold):
    assert reward(answer, gold) == 0.0
