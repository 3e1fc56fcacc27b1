"""The think/answer format (paper §3.1): exactly one think block, then exactly one answer block."""

import pytest

from dgrpo.rewards.format import Parsed, format_reward, parse_completion


@pytest.mark.parametrize("text, think, answer", [
    ("<think>3 + 4 = 7</think><answer>7</answer>", "3 + 4 = 7", "7"),
    ("\n  <think> a </think>\n\n<answer> 54 cows </answer>\n", "a", "54 cows"),  # whitespace around and between
    ("<think>line 1\nline 2</think>\n<answer>\n12\n</answer>", "line 1\nline 2", "12"),  # blocks span lines
])
def test_the_two_blocks_are_split_and_stripped(text, think, answer):
    assert parse_completion(text) == Parsed(think=think, answer=answer)
    assert format_reward(text) == 1.0


@pytest.mark.parametrize("text", [
    "7",                                                       # no tags
    "<think>a</think>",                                        # no answer
    "<answer>7</answer><think>a</think>",                      # wrong order
    "<think>a</think><think>b</think><answer>c</answer>",      # two think blocks
    "<think>a</think><answer>1</answer><answer>2</answer>",    # two answers: the checker cannot pick one
    "Sure! <think>a</think><answer>7</answer>",                # text before the blocks
    "<think>a</think>so<answer>7</answer>",                    # text between them
    "<think>a</think><answer>7</answer> thanks",               # text after them
    "<think>a<answer>7</answer></think>",                      # nested
])
def test_anything_else_breaks_the_format(text):
    assert parse_completion(text) is None
    assert format_reward(text) == 0.0
