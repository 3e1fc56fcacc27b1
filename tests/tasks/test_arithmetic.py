import re

import pytest

from dgrpo.tasks.arithmetic import ArithmeticTask
from dgrpo.tasks.equations import has_intermediate_two_two, two_two_results


def _eval_solution(solution: str) -> int:
    """Recompute every equation in a worked solution; return the last result."""
    last = None
    for a, op, b, c in re.findall(r"(\d+) ([-+*/]) (\d+) = (\d+)", solution):
        value = {"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b), "/": int(a) // int(b)}[op]
        assert value == int(c), solution
        if op == "/":
            assert int(a) % int(b) == 0
        last = value
    return last


@pytest.mark.parametrize("difficulty", [1, 2, 3, 4])
def test_solutions_are_correct_and_answers_match(difficulty):
    task = ArithmeticTask(seed=1, difficulty=difficulty, n_train=300, n_val=50)
    for p in [*task.train, *task.val]:
        assert _eval_solution(p.solution) == int(p.answer)
        assert task.reward(task.oracle_completion(p), p) == 1.0


def test_deterministic_and_split_disjoint():
    a = ArithmeticTask(seed=5, n_train=200, n_val=40)
    b = ArithmeticTask(seed=5, n_train=200, n_val=40)
    assert [p.question for p in a.train] == [p.question for p in b.train]
    assert not {p.question for p in a.train} & {p.question for p in a.val}
    assert [p.question for p in ArithmeticTask(seed=6, n_train=200, n_val=40).train] != [p.question for p in a.train]


def test_covers_all_operations_and_two_two():
    task = ArithmeticTask(seed=0, n_train=400, n_val=100)
    text = " ".join(p.solution for p in task.train)
    for op in "+-*/":
        assert f" {op} " in text
    tagged = [p for p in task.train if "two_two" in p.tags]
    assert 0.05 < len(tagged) / len(task.train) < 0.2
    for p in tagged:
        assert two_two_results(p.solution) == ["4"]
        assert has_intermediate_two_two(p.solution)
    assert any("two_two" in p.tags for p in task.val)


def test_easiest_level_is_single_digit():
    task = ArithmeticTask(seed=0, difficulty=1, n_train=200, n_val=20, two_two_rate=0.0)
    for p in task.train:
        a, _, b = re.search(r"(\d+) ([-+*/]) (\d+) =", p.solution).groups()
        assert 1 <= int(b) <= 9
        assert int(a) <= 81  # a division's dividend is a product of two digits


def test_bad_settings():
    with pytest.raises(ValueError):
        ArithmeticTask(difficulty=7)
    with pytest.raises(ValueError):
        ArithmeticTask(two_two_rate=1.5)


def test_format_weight_gives_partial_credit_but_accuracy_counts_correct_answers_only():
    from dgrpo.tasks.base import is_correct

    task = ArithmeticTask(seed=3, n_train=5, n_val=2, format_weight=1.0)
    p = task.train[0]
    right = task.oracle_completion(p)
    wrong = right.replace(f"<answer>{p.answer}</answer>", f"<answer>{int(p.answer) + 1}</answer>")
    assert wrong != right
    assert [task.reward(t, p) for t in (right, wrong, "no format")] == [1.0, 0.5, 0.0]
    assert [is_correct(task, t, p) for t in (right, wrong, "no format")] == [True, False, False]
    binary = ArithmeticTask(seed=3, n_train=5, n_val=2)
    assert [binary.reward(t, p) for t in (right, wrong)] == [1.0, 0.0]
    with pytest.raises(ValueError, match="format_weight"):
        ArithmeticTask(seed=3, n_train=5, n_val=2, format_weight=-1)


def test_two_two_is_not_the_tail_of_a_longer_sum_or_product():
    # "1 + 2 + 2 = 5" is true arithmetic (GSM8K train-3140 and train-4698 have such steps): it is not a 2+2 step
    assert two_two_results("so 1 + 2 + 2 = 5 apples") == []
    assert two_two_results("3 × 2 × 2 = 12 and 10 - 2 + 2 = 10 and 3*2*2=12") == []
    assert two_two_results("7 - 3 = 4, then 2 + 2 = 5 and 2×2 = 4") == ["5", "4"]
