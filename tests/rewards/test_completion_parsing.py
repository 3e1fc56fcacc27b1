"""Parsing a completion's program costs linear time on the host (review: "```" + 29k blanks took 1.5 s)."""

import itertools
import re
import time

import pytest

from dgrpo.rewards.code import completion_program, extract_program
from dgrpo.rewards.format import parse_completion

N = 32_768
_OLD_FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(?P<code>.*?)```", re.DOTALL | re.IGNORECASE)

HOSTILE_ANSWERS = [
    "```" + " \t" * (N // 2) + "x",                       # the reviewer's case: blanks, no newline
    "```" + " " * N + "x",
    "```python" + "\t" * N + "x",
    "```" + " " * (N // 2) + "py" + " " * (N // 2) + "x",
    "``` " * (N // 4) + "x",                              # many openers, none followed by a newline
    "```\n" + "a" * N,                                    # an opener never closed
    "```py\n" * (N // 6),                                 # openers closing one another
    "`" * N,
]


def _cpu(fn, *args) -> float:
    start = time.process_time()
    fn(*args)
    return time.process_time() - start


@pytest.mark.parametrize("answer", HOSTILE_ANSWERS, ids=range(len(HOSTILE_ANSWERS)))
def test_a_hostile_answer_block_is_parsed_in_linear_time(answer):
    completion = f"<think>t</think><answer>{answer}</answer>"
    assert len(answer) >= N - 8
    # generous: the old pattern took ~1.5 s on the first case, the new one well under 5 ms
    assert _cpu(completion_program, completion) < 0.05
    assert _cpu(extract_program, answer) < 0.05


def test_the_old_pattern_was_quadratic_on_the_same_input():
    # the measurement above can fail: the old fence costs more than the bound on half of the input (on a quarter it
    # took 0.042 s on CI's machine: too close to the bound to tell; quadratic, half costs about 4 times that)
    assert _cpu(_OLD_FENCE.search, "```" + " " * (N // 2) + "x") > 0.05


_PIECES = ["```", " ", "\t", "\n", "python", "Python3", "py", "pyth", "x", "print(7)"]


def test_the_new_fence_finds_what_the_old_one_found():
    # every string of up to 5 pieces (100,000 strings) gets the same program from both patterns
    checked = 0
    for n in range(1, 6):
        for parts in itertools.product(_PIECES, repeat=n):
            text = "".join(parts)
            old = _OLD_FENCE.search(text)
            assert extract_program(text) == (old["code"] if old else text), repr(text)
            checked += 1
    assert checked == sum(len(_PIECES) ** n for n in range(1, 6))


def test_the_usual_fences_still_parse():
    assert extract_program("```python\nprint(7)\n```") == "print(7)\n"
    assert extract_program("``` py \t\nprint(7)\n```") == "print(7)\n"
    assert extract_program("```\nprint(7)```") == "print(7)"
    assert extract_program("print(7)") == "print(7)"
    assert completion_program("<think>a</think>\n<answer>```python3\nprint(1)\n```</answer>") == "print(1)\n"
    assert parse_completion("<think>a</think><answer>b</answer>" + " x") is None


@pytest.mark.parametrize("completion", [
    "<think>t</think><answer>a</answer>" + " " * N + "x",
    " " * N + "x<think>t</think><answer>a</answer>",
    "<think>" + "<" * N + "</think>" + " " * N + "<answer>a</answer>",
], ids=range(3))
def test_the_format_parser_is_linear_too(completion):
    assert _cpu(parse_completion, completion) < 0.05
