"""The python-solving task: oracle programs, the code reward and its failure cases."""

import dataclasses
import json
import time
from fractions import Fraction

import pytest

from dgrpo.config import ConfigError, load_config
from dgrpo.training.build import build_task
from dgrpo.rewards.code import code_reward, extract_program, output_matches
from dgrpo.tasks.python_math import (PYTHON_FEW_SHOT, PythonMathTask, arithmetic_steps, evaluate_expression,
                                     gsm8k_steps, write_program)

GSM8K = [
    {"question": "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
                 "How many clips did Natalia sell altogether in April and May?",
     "answer": "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nNatalia sold 48+24 = <<48+24=72>>72 clips "
               "altogether in April and May.\n#### 72"},
    {"question": "Weng earns $12 an hour for babysitting. Yesterday, she just did 50 minutes of babysitting. "
                 "How much did she earn?",
     "answer": "Weng earns 12/60 = $<<12/60=0.2>>0.2 per minute.\nWorking 50 minutes, she earned 0.2 x 50 = "
               "$<<0.2*50=10>>10.\n#### 10"},
    {"question": "A robe takes 2 bolts of blue fiber and half that much white fiber. How many bolts in total?",
     "answer": "It takes 2/2=1 bolt of white fiber\nSo the total is 2+1=3 bolts\n#### 3"},  # no calculator marks
]


@pytest.fixture(scope="module")
def task():
    return PythonMathTask(seed=3, difficulty=3, n_train=30, n_val=10)


def _completion(program: str, think: str = "compute") -> str:
    """A completion (after the <think> prefill) whose answer block is ``program``."""
    return f"{think}</think>\n<answer>\n```python\n{program}\n```\n</answer>"


def test_program_from_solution_steps():
    steps = arithmetic_steps("Tom has 3 + 4 = 7 apples. After losing 2, Tom has 7 - 2 = 5 apples. Each gets 10 / 5 = 2.")
    assert steps == [("3 + 4", "7"), ("7 - 2", "5"), ("10 // 5", "2")]
    assert write_program(steps[:2], "5") == "a = 3 + 4\nb = a - 2\nprint(b)\n"
    assert write_program([("48/2", "24"), ("48+24", "72")], "72") == "a = 48/2\nb = 48+a\nprint(round(b))\n"
    with pytest.raises(ValueError, match="no step computes"):
        write_program([("3 + 4", "7")], "8")


def test_dataset_expressions_are_parsed_never_run():
    assert evaluate_expression("3*1/2") == Fraction(3, 2)
    assert evaluate_expression("-(2+3)**2") == -25
    for bad in ("__import__('os').system('true')", "x * 2", "1/0", "2**1000"):
        with pytest.raises(ValueError):
            evaluate_expression(bad)


@pytest.mark.parametrize("difficulty", [1, 2, 3, 4])
def test_oracle_completions_earn_full_reward(difficulty):
    task = PythonMathTask(seed=1, difficulty=difficulty, n_train=3, n_val=1)
    for p in [*task.train, *task.val]:
        completion = task.oracle_completion(p)
        assert completion.startswith(p.solution)  # the <think> prefill is not repeated
        assert task.reward(completion, p) == 1.0


def test_gsm8k_file_source(tmp_path):
    path = tmp_path / "gsm8k.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in GSM8K))
    task = PythonMathTask(path=str(path), val_path=str(path), n_train=None, n_val=5)
    assert [p.answer for p in task.train] == ["72", "10"]  # the record without marks is left out
    assert task.oracle_program(task.train[1]) == "a = 12/60\nb = a*50\nprint(round(b))\n"
    assert "<<" not in task.train[0].solution
    assert all(task.reward(task.oracle_completion(p), p) == 1.0 for p in task.train)


def test_oracle_of_a_foreign_problem_is_an_error(task):
    other = PythonMathTask(seed=4, difficulty=3, n_train=30, n_val=10)
    with pytest.raises(ValueError, match="not a problem of this task"):
        task.oracle_program(other.train[0])


def test_reward_cases(task):
    p = task.train[0]
    ans = p.answer
    wrong = str(int(ans) + 1)
    assert task.reward(_completion(f"print({ans})"), p) == 1.0
    assert task.reward(_completion(f"print('{ans}   ')\nprint()\nprint('  ')"), p) == 1.0  # trailing spaces
    assert task.reward(f"x</think><answer>print({ans})</answer>", p) == 1.0  # no fence
    assert task.reward(_completion(f"print('The answer is', {ans})"), p) == 1.0
    assert task.reward(_completion(f"print({wrong})"), p) == 0.0
    assert task.reward(_completion(f"print({ans})\nraise ValueError('late')"), p) == 0.0
    assert task.reward(_completion(f"print({wrong})\nprint({ans})"), p) == 0.0  # several lines: exact only
    assert task.reward(f"print({ans})", p) == 0.0  # format broken
    assert task.reward(_completion(f"print({ans}"), p) == 0.0  # syntax error
    assert task.reward(_completion(""), p) == 0.0


def test_raising_program_gets_zero_even_when_nothing_is_expected():
    raising = "<think>x</think><answer>raise SystemExit(3)</answer>"
    silent = "<think>x</think><answer>x = 1</answer>"
    assert code_reward(raising, "") == 0.0
    assert code_reward(silent, "") == 1.0  # same (empty) output: only the exit status differs


def test_infinite_loop_gets_zero_within_the_limit():
    task = PythonMathTask(seed=3, difficulty=1, n_train=2, n_val=1, timeout_s=1.0)
    start = time.perf_counter()
    assert task.reward(_completion("while True:\n    pass"), task.train[0]) == 0.0
    assert time.perf_counter() - start < 4.0


@pytest.mark.parametrize("attack", [
    # all but the fork loop would print the right answer if the sandbox let them through
    "import socket\ntry:\n    socket.create_connection(('127.0.0.1', 9))\nexcept OSError:\n    pass\nprint(ANSWER)",
    "open(TARGET, 'w').write('x')\nprint(ANSWER)",
    "import os\nwhile True:\n    os.fork()",
    "import subprocess\nsubprocess.run(['true'])\nprint(ANSWER)",
    "x = bytearray(10 * 1024 ** 3)\nprint(ANSWER)",
])
def test_misbehaving_programs_get_zero(task, tmp_path, attack):
    p = task.train[0]
    target = tmp_path / "escaped.txt"
    program = attack.replace("ANSWER", p.answer).replace("TARGET", repr(str(target)))
    assert task.reward(_completion(program), p) == 0.0
    assert not target.exists()


def test_chat_and_prefill(task):
    messages = task.chat(task.train[0])
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert messages[-1]["content"] == task.train[0].question
    for (question, answer), expected in zip(PYTHON_FEW_SHOT, ("5", "7")):  # the examples are right
        assert code_reward(answer, expected) == 1.0
    plain = PythonMathTask(seed=3, difficulty=1, n_train=2, n_val=1, few_shot=0, prefill_think=False)
    assert plain.completion_prefix == "" and len(plain.chat(plain.train[0])) == 2
    assert plain.oracle_completion(plain.train[0]).startswith("<think>")
    assert plain.reward(plain.oracle_completion(plain.train[0]), plain.train[0]) == 1.0


def test_output_matching_rules():
    assert extract_program("```python\nprint(7)\n```") == "print(7)\n"
    assert output_matches("7 \n\n", "7") and output_matches("7.0\n", "7")
    assert not output_matches("", "7") and not output_matches("8", "7")
    assert output_matches("hello  \n", "hello") and not output_matches("hello", "help")


def test_config_builds_the_task():
    cfg = load_config(overrides=["task.kind=python_math", "task.n_train=5", "task.n_val=2", "task.timeout_s=2", "seed=7"])
    task = build_task(cfg)
    assert task.name == "python_math" and len(task.train) == 5 and task.limits.timeout_s == 2
    assert [p.question for p in task.train] == [p.question for p in PythonMathTask(seed=7, n_train=5, n_val=2).train]
    with pytest.raises(ConfigError, match="timeout_s: Input should be greater than 0"):
        load_config(overrides=["task.kind=python_math", "task.timeout_s=0"])
    with pytest.raises(ConfigError, match="val_path needs path"):
        load_config(overrides=["task.kind=python_math", "task.val_path=x.jsonl"])


def test_gsm8k_steps_read_calculator_marks():
    assert gsm8k_steps(GSM8K[0]["answer"]) == [("48/2", "24"), ("48+24", "72")]
    assert gsm8k_steps(GSM8K[2]["answer"]) == []


# Programs of the kind a policy writes, with the reward each earns (worked out by hand for answer 12).
SAMPLED = [
    ("print(12)", 1.0),
    ("x = 3\ny = 4\nprint(x * y)", 1.0),
    ("print(float(3 * 4))", 1.0),  # "12.0" denotes 12
    ("total = sum([3, 4, 5])\nprint(total)", 1.0),
    ("def apples(a, b):\n    return a * b\n\nprint(apples(3, 4))", 1.0),
    ("import math\nprint(math.lcm(4, 6))", 1.0),
    ("from fractions import Fraction\nprint(Fraction(24, 2))", 1.0),
    ("import numpy as np\nprint(int(np.prod([3, 4])))", 1.0),
    ("import sympy as sp\nx = sp.symbols('x')\nprint(sp.solve(x - 12, x)[0])", 1.0),
    ("class Box:\n    n = 12\nprint(Box.n)", 1.0),
    ("items = [i for i in range(13)]\nprint(len(items) - 1)", 1.0),
    ("print(f'The answer is {3 * 4}')", 1.0),
    ("open('work.txt', 'w').write('12')\nprint(open('work.txt').read())", 1.0),
    ("print(13)", 0.0),  # wrong
    ("print(12)\nprint(13)", 0.0),  # several candidates
    ("x = input()\nprint(12)", 0.0),  # no stdin: EOFError
    ("import requests\nprint(12)", 0.0),  # not an allowed module
    ("print(12)\nimport sys\nsys.exit(1)", 0.0),
    ("import threading\nt = threading.Thread(target=print, args=(12,))\nt.start()\nt.join()", 0.0),  # no threads
]


def test_sampled_honest_programs_keep_their_rewards():
    task = PythonMathTask(seed=3, difficulty=1, n_train=2, n_val=1)
    problem = dataclasses.replace(task.train[0], answer="12")
    completions = [_completion(program) for program, _ in SAMPLED]
    assert task.rewards(completions, [problem] * len(SAMPLED)) == [r for _, r in SAMPLED]


def test_oracle_programs_of_many_problems_earn_full_reward():
    task = PythonMathTask(seed=11, difficulty=4, n_train=48, n_val=16)
    problems = [*task.train, *task.val]
    rewards = task.rewards([task.oracle_completion(p) for p in problems], problems)
    assert rewards == [1.0] * len(problems)
    assert [task.reward(task.oracle_completion(p), p) for p in problems[:3]] == rewards[:3]  # batch = one by one
