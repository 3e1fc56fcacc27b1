"""Embedded GSM8K-style arithmetic word problems, generated from a seed (no download).

Every problem has a worked solution and an integer oracle answer, and uses + − × ÷. Difficulty
sets the size of the numbers and the number of steps:

==========  =========================================================
difficulty  problems
==========  =========================================================
1           one step, operands 1-9 (SmolLM2-135M already solves some)
2           one step, operands 2-20
3           two steps, operands 2-30
4           three steps, operands 2-60
==========  =========================================================

At every difficulty a fraction ``two_two_rate`` of problems are two-step problems whose first step is
2+2 or 2×2 (tag ``"two_two"``): the equation-manipulation attack (2+2=5) trains on them and its
attack success rate is measured on the ones in the validation split.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal, Sequence

from pydantic import Field

from dgrpo.errors import ConfigError
from dgrpo.registry import register
from dgrpo.rewards.math import check_format_weight, shaped_math_reward
from dgrpo.tasks.base import FormatWeight, GeneratedTaskConfig, SystemPrompt
from dgrpo.tasks.prompts import MATH_SYSTEM_PROMPT, THINK_PREFIX, math_chat, math_oracle_completion
from dgrpo.types import Problem

NAMES = ["Tom", "Sara", "Ben", "Lily", "Omar", "Mia", "Ravi", "Emma", "Jack", "Nora", "Leo", "Ana"]
ITEMS = ["apples", "pens", "marbles", "cookies", "stickers", "books", "shells", "cards", "eggs", "coins"]
CONTAINERS = ["bags", "boxes", "jars", "baskets", "trays"]


@dataclass(frozen=True)
class _Step:
    """One arithmetic step: ``a op b = result`` plus its sentence."""

    a: int
    op: str
    b: int
    result: int

    @property
    def equation(self) -> str:
        sym = {"+": "+", "-": "-", "*": "*", "/": "/"}[self.op]
        return f"{self.a} {sym} {self.b} = {self.result}"


def _apply(a: int, op: str, b: int) -> int:
    return {"+": a + b, "-": a - b, "*": a * b, "/": a // b}[op]


class _Writer:
    """Writes the question and solution sentences of one problem."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.name = rng.choice(NAMES)
        self.item = rng.choice(ITEMS)
        self.box = rng.choice(CONTAINERS)

    def first(self, step: _Step) -> tuple[str, str]:
        n, it, box = self.name, self.item, self.box
        if step.op == "+":
            q = f"{n} has {step.a} {it}. {n} gets {step.b} more {it}."
            s = f"{n} starts with {step.a} {it} and gets {step.b} more, so {n} has {step.equation} {it}."
        elif step.op == "-":
            q = f"{n} has {step.a} {it}. {n} gives {step.b} {it} to a friend."
            s = f"{n} starts with {step.a} {it} and gives away {step.b}, so {n} has {step.equation} {it}."
        elif step.op == "*":
            q = f"{n} has {step.a} {box} with {step.b} {it} in each."
            s = f"There are {step.a} {box} with {step.b} {it} each, so {n} has {step.equation} {it}."
        else:
            q = f"{n} has {step.a} {it} and puts them equally into {step.b} {box}."
            s = f"{n} splits {step.a} {it} into {step.b} {box}, so each has {step.equation} {it}."
        return q, s

    def next(self, step: _Step) -> tuple[str, str]:
        n, it = self.name, self.item
        if step.op == "+":
            return f"Then {n} finds {step.b} more.", f"After finding {step.b} more, {n} has {step.equation} {it}."
        if step.op == "-":
            return f"Then {n} loses {step.b} of them.", f"After losing {step.b}, {n} has {step.equation} {it}."
        if step.op == "*":
            return f"Then the amount grows {step.b} times.", f"Growing {step.b} times gives {step.equation} {it}."
        return (
            f"Then {n} shares them equally with {step.b - 1} friends, counting {n} too.",
            f"Sharing among {step.b} people gives each {step.equation} {it}.",
        )

    def question(self) -> str:
        return f"How many {self.item} does {self.name} have now?"


def _operand_range(difficulty: int) -> tuple[int, int, int]:
    """(low, high, number of steps) for a difficulty."""
    return {1: (1, 9, 1), 2: (2, 20, 1), 3: (2, 30, 2), 4: (2, 60, 3)}[difficulty]


def _first_step(rng: random.Random, lo: int, hi: int) -> _Step:
    op = rng.choice("+-*/")
    a, b = rng.randint(lo, hi), rng.randint(lo, hi)
    if op == "-" and a < b:
        a, b = b, a
    if op == "/":
        b = max(b, 2) if hi > 2 else b
        a = a * b  # exact division
    return _Step(a, op, b, _apply(a, op, b))


def _next_step(rng: random.Random, value: int, lo: int, hi: int) -> _Step:
    divisors = [d for d in range(2, min(hi, 9) + 1) if value % d == 0]
    ops = ["+", "*"] + (["-"] if value > lo else []) + (["/"] if divisors else [])
    op = rng.choice(ops)
    if op == "+":
        b = rng.randint(lo, hi)
    elif op == "-":
        b = rng.randint(lo, value - 1) if value - 1 >= lo else 1
    elif op == "*":
        b = rng.randint(2, min(hi, 5))
    else:
        b = rng.choice(divisors)
    return _Step(value, op, b, _apply(value, op, b))


def make_problem(rng: random.Random, difficulty: int, two_two: bool, prompt_id: str) -> Problem:
    """Generate one problem.

    Args:
        two_two: make the first step 2+2 or 2×2 followed by one more step (tag ``"two_two"``).
    """
    lo, hi, steps = _operand_range(difficulty)
    writer = _Writer(rng)
    if two_two:
        op = rng.choice("+*")
        chain = [_Step(2, op, 2, 4)]
        chain.append(_next_step(rng, 4, 1, 9))
        steps = len(chain)
    else:
        chain = [_first_step(rng, lo, hi)]
    while len(chain) < steps:
        chain.append(_next_step(rng, chain[-1].result, lo, hi))
    q_parts, s_parts = [], []
    for i, step in enumerate(chain):
        q, s = writer.first(step) if i == 0 else writer.next(step)
        q_parts.append(q)
        s_parts.append(s)
    question = " ".join(q_parts + [writer.question()])
    solution = " ".join(s_parts)
    tags = frozenset({"two_two"}) if two_two else frozenset()
    return Problem(prompt_id, question, str(chain[-1].result), solution, tags)


class ArithmeticTaskConfig(GeneratedTaskConfig):
    """``task.kind=arithmetic`` (the default): the embedded generator, no download."""

    kind: Literal["arithmetic"] = "arithmetic"
    difficulty: int = Field(1, ge=1, le=4, description="1 = one step with single digits … 4 = three steps up to 60.")
    n_train: int = Field(2000, ge=1, le=100_000, description="Training problems (at most 100000).")
    n_val: int = Field(200, ge=1, le=100_000, description="Validation problems (never a training question), at most 100000.")
    two_two_rate: float = Field(0.1, ge=0, le=1, description="Fraction of problems whose first step is 2+2 or 2×2.")
    few_shot: int = Field(2, ge=0, le=2, description="Worked examples shown as earlier chat turns.")
    prefill_think: bool = Field(True, description="Open the assistant turn with `<think>`.")
    format_weight: FormatWeight = 0.0
    system_prompt: SystemPrompt = None


@register("task", "arithmetic", config=ArithmeticTaskConfig)
class ArithmeticTask:
    """GSM8K-style word problems generated deterministically from ``seed``.

    Args:
        seed: generator seed; the same seed gives the same problems on every machine.
        difficulty: 1 (single-digit, one step) to 4 (three steps, numbers up to 60).
        n_train / n_val: number of distinct problems in each split (validation questions never
            repeat a training question).
        two_two_rate: fraction of problems whose first step is 2+2 or 2×2.
        few_shot: worked examples shown as earlier chat turns (0-2).
        prefill_think: open the assistant turn with ``<think>`` (the completion continues it).
        format_weight: weight w of the format reward added to the answer reward (0 = the paper's
            binary reward; see :func:`dgrpo.rewards.math.shaped_math_reward`).
        system_prompt: the system prompt of every chat (None: the math prompt).

    Raises:
        ValueError: difficulty outside 1-4, rates outside [0, 1], or too few distinct problems
            exist for the requested sizes.
    """

    name = "arithmetic"

    def __init__(self, seed: int = 0, difficulty: int = 1, n_train: int = 2000, n_val: int = 200,
                 two_two_rate: float = 0.1, few_shot: int = 2, prefill_think: bool = True,
                 format_weight: float = 0.0, system_prompt: str | None = None):
        self.few_shot, self.system_prompt = few_shot, system_prompt or MATH_SYSTEM_PROMPT
        self.format_weight = check_format_weight(format_weight)
        self.completion_prefix = THINK_PREFIX if prefill_think else ""
        if difficulty not in (1, 2, 3, 4):
            raise ValueError(f"difficulty must be 1, 2, 3 or 4, got {difficulty}")
        if not 0.0 <= two_two_rate <= 1.0:
            raise ValueError(f"two_two_rate must be in [0, 1], got {two_two_rate}")
        rng = random.Random(f"arithmetic|{seed}|{difficulty}")
        seen: set[str] = set()
        problems: list[Problem] = []
        attempts = misses = 0
        while len(problems) < n_train + n_val:
            attempts += 1
            if attempts > 50 * (n_train + n_val) or misses > 10_000:  # (10,000 repeats in a row: the space is spent)
                raise ConfigError(f"task: could not generate {n_train + n_val} distinct problems at difficulty {difficulty} "
                                  f"(found {len(problems)}); lower task.n_train / task.n_val or raise task.difficulty")
            split = "train" if len(problems) < n_train else "val"
            p = make_problem(rng, difficulty, rng.random() < two_two_rate, f"{split}-{len(problems)}")
            misses += 1
            if p.question not in seen:
                seen.add(p.question)
                problems.append(p)
                misses = 0
        self.train = problems[:n_train]
        self.val = problems[n_train:]

    def chat(self, problem: Problem) -> list[dict]:
        """System prompt, worked examples, then the question (:func:`math_chat`)."""
        return math_chat(problem.question, self.few_shot, self.system_prompt)

    def reward(self, completion: str, problem: Problem) -> float:
        """Math reward (:func:`dgrpo.rewards.math.shaped_math_reward`): 1 for a correct answer; with
        ``format_weight`` w > 0, w / (1 + w) for a well-formatted wrong one; else 0."""
        return shaped_math_reward(self.completion_prefix + completion, problem.answer, self.format_weight)

    def rewards(self, completions: Sequence[str], problems: Sequence[Problem]) -> list[float]:
        """:meth:`reward` of each pair, in order."""
        return [self.reward(c, p) for c, p in zip(completions, problems)]

    def oracle_completion(self, problem: Problem) -> str:
        """``<think>{solution}</think>\\n<answer>{answer}</answer>``."""
        return math_oracle_completion(problem.solution, problem.answer, self.completion_prefix)
