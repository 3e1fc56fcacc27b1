import pytest

from dgrpo.rewards.format import parse_completion
from dgrpo.rewards.math import answers_match, math_reward, parse_oracle, shaped_math_reward


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
