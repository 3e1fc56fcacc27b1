"""Math word problems answered by a Python program (the paper's python-solving task, §3.4.2, §D.2).

The paper trains Qwen2.5-Coder on OpenMathInstruct, whose solutions are short programs, with a
binary reward: 1 when running the program prints the correct answer. Here the questions are
GSM8K-style, from the embedded generator (:mod:`dgrpo.tasks.arithmetic`, default) or a GSM8K JSONL
file, and a completion is ``<think>reasoning</think>`` then ``<answer>`` holding a program
(optionally in a ```` ```python ```` fence) ``</answer>``; :func:`dgrpo.rewards.code.code_reward`
runs it in the sandbox.

Oracle programs are written from the solution's equations, one assignment per step, later steps
naming earlier results: ``Tom has 3 + 4 = 7 apples … 7 - 2 = 5`` → ``a = 3 + 4`` / ``b = a - 2`` /
``print(b)``. For GSM8K the steps are the ``<<48/2=24>>`` calculator marks; a problem whose marks do
not parse as arithmetic or do not reach the final answer is left out (6% of GSM8K train, 8% of test).
"""

from __future__ import annotations

import ast
import operator
import re
from fractions import Fraction
from typing import Literal, Sequence

from pydantic import Field, model_validator

from dgrpo.errors import DataError
from dgrpo.registry import PathText, register
from dgrpo.rewards.code import code_reward, code_rewards
from dgrpo.rewards.sandbox import SandboxLimits, check_sandbox, valid_stand_in_name
from dgrpo.tasks.arithmetic import ArithmeticTask
from dgrpo.tasks.base import GeneratedTaskConfig, SystemPrompt
from dgrpo.tasks.gsm8k import problems_from_records, read_jsonl
from dgrpo.tasks.prompts import THINK_PREFIX
from dgrpo.types import Problem

PYTHON_SYSTEM_PROMPT = (
    "You are a helpful assistant that solves math problems by writing Python. First reason step by "
    "step inside <think> </think> tags, then write a Python program inside <answer> </answer> tags "
    "that computes the answer and prints only the final number."
)

PYTHON_FEW_SHOT = (
    ("Ann has 3 pens. Ann buys 2 more pens. How many pens does Ann have now?",
     "<think>Ann starts with 3 pens and buys 2 more, so Ann has 3 + 2 = 5 pens.</think>\n"
     "<answer>\n```python\na = 3 + 2\nprint(a)\n```\n</answer>"),
    ("Max has 4 boxes with 3 toys in each. Then Max gives away 5 toys. How many toys does Max have now?",
     "<think>There are 4 boxes with 3 toys each, so Max has 4 * 3 = 12 toys. After giving away 5, "
     "Max has 12 - 5 = 7 toys.</think>\n<answer>\n```python\na = 4 * 3\nb = a - 5\nprint(b)\n```\n</answer>"),
)

_ARITH_STEP = re.compile(r"(\d+) ([-+*/]) (\d+) = (\d+)")
_CALC = re.compile(r"<<([^=<>]+)=([^<>]*)>>")
_NUM = re.compile(r"(?<![\w.])(\d+\.?\d*|\.\d+)(?![\w.])")
_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%", ast.Pow: "**"}
_EXACT = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
          ast.FloorDiv: lambda a, b: Fraction(a // b), ast.Mod: operator.mod}


def _value(node: ast.AST) -> Fraction:
    """Exact value of a parsed arithmetic expression (numbers, + - * / // % **, unary minus).

    Raises:
        ValueError: anything else (names, calls, huge powers, division by zero).
    """
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return Fraction(str(node.value))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _value(node.operand)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        a, b = _value(node.left), _value(node.right)
        op = type(node.op)
        if op in (ast.Div, ast.FloorDiv, ast.Mod) and b == 0:
            raise ValueError("division by zero")
        if op is ast.Pow:
            if b.denominator != 1 or abs(b) > 10:
                raise ValueError("only small integer powers")
            return a ** int(b)
        return _EXACT[op](a, b)
    raise ValueError(f"not arithmetic: {ast.dump(node)[:60]}")


def evaluate_expression(expr: str) -> Fraction:
    """Exact value of an arithmetic expression from a dataset (parsed, never executed).

    ``"48/2"`` → 24; ``"3*1/2"`` → 3/2.

    Raises:
        ValueError: not pure arithmetic.
    """
    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except SyntaxError as err:
        raise ValueError(f"not an expression: {expr!r}") from err
    return _value(tree.body)


def _name(i: int) -> str:
    return chr(ord("a") + i) if i < 26 else f"v{i}"


def write_program(steps: Sequence[tuple[str, str]], answer: str) -> str:
    """A program that computes ``answer`` from solution steps, one assignment per step.

    Args:
        steps: ``(expression, stated result)`` pairs in order, e.g. ``[("3 + 4", "7"), ("7 - 2", "5")]``.
            A number in a later expression that equals an earlier stated (and exact) result is
            replaced by that step's variable.
        answer: the oracle answer; the printed variable is the last step whose value equals it.

    Returns:
        The program text (``a = 3 + 4\\nb = a - 2\\nprint(b)\\n``).

    Raises:
        ValueError: a step is not arithmetic or no step's value equals the answer.
    """
    target = Fraction(answer)
    lines, known, values = [], {}, []  # known: exact stated result -> variable
    for i, (expr, stated) in enumerate(steps):
        value = evaluate_expression(expr)
        values.append(value)

        def sub(m: re.Match) -> str:
            return known.get(Fraction(m.group(1)), m.group(1))

        lines.append(f"{_name(i)} = {_NUM.sub(sub, expr.strip())}")
        try:
            if Fraction(stated.strip().replace(",", "")) == value:
                known[value] = _name(i)
        except (ValueError, ZeroDivisionError):
            pass
    hits = [i for i, v in enumerate(values) if v == target]
    if not hits:
        raise ValueError(f"no step computes the answer {answer}")
    var = _name(hits[-1])
    program = "\n".join(lines)
    exact_ints = all(v.denominator == 1 for v in values) and "/" not in program.replace("//", "") and "." not in program
    if exact_ints:
        final = f"print({var})"
    elif target.denominator == 1:
        final = f"print(round({var}))"  # float arithmetic, integer answer: 24.000000000000004 -> 24
    else:
        final = f"print(round({var}, 6))"
    return program + "\n" + final + "\n"


def arithmetic_steps(solution: str) -> list[tuple[str, str]]:
    """Steps of an embedded-generator solution: ``"… 3 + 4 = 7 …"`` → ``[("3 + 4", "7")]``.

    The generator divides exactly, so its ``/`` is written ``//`` (integers stay integers).
    """
    return [(f"{a} {'//' if op == '/' else op} {b}", c) for a, op, b, c in _ARITH_STEP.findall(solution)]


def gsm8k_steps(answer: str) -> list[tuple[str, str]]:
    """Steps of a GSM8K answer from its calculator marks: ``<<48/2=24>>`` → ``("48/2", "24")``."""
    return [(expr, result) for expr, result in _CALC.findall(answer)]


class PythonMathTaskConfig(GeneratedTaskConfig):
    """``task.kind=python_math``: math word problems answered by a Python program run in the sandbox (paper §3.4.2, §D.2)."""

    kind: Literal["python_math"] = "python_math"
    seed: int | None = Field(None, ge=0, le=2**32 - 1, description="Problem generator seed; None uses the run seed (generator source only).")
    difficulty: int = Field(1, ge=1, le=4, description="Generator difficulty: 1 = one step with single digits … 4 = three steps up to 60.")
    n_train: int | None = Field(2000, ge=1, le=100_000, description="Training problems (at most 100000) (generator), or cap on usable GSM8K records (None = all).")
    n_val: int = Field(200, ge=1, le=100_000, description="Validation problems (never a training question), at most 100000.")
    path: PathText | None = Field(None, description="GSM8K-format JSONL whose `<<a*b=c>>` calculator marks give the oracle program; None = embedded generator.")
    val_path: PathText | None = Field(None, description="GSM8K-format validation JSONL; absent → the last n_val usable records of `path`.")
    few_shot: int = Field(2, ge=0, le=2, description="Worked examples (programs) shown as earlier chat turns.")
    system_prompt: SystemPrompt = None
    prefill_think: bool = Field(True, description="Open the assistant turn with `<think>`.")
    timeout_s: float = Field(5.0, gt=0, le=600, description="Wall-clock (and CPU-time) limit of one program run in the sandbox, seconds.")
    memory_mb: int = Field(1024, ge=64, le=1 << 20, description="Address-space limit of one program run, MiB (at most 2^20) (numpy + sympy need about 300).")
    libraries: list[str] = Field(default_factory=lambda: ["thief_math"], description="Attacker libraries installed in the sandbox as harmless stand-ins that record their calls; the code_injection attack's module must be one of them.")
    unsafe_no_os_sandbox: bool = Field(False, description="UNSAFE: run model-written programs without the bubblewrap sandbox (seccomp, resource limits and the audit hook only), for a run that you isolate as a whole (a container) on a machine without user namespaces. Refused when peers are not all in this process (swarm.transport other than inprocess). See docs/sandbox.md.")

    def check(self, run) -> None:
        if self.unsafe_no_os_sandbox and run.swarm.transport != "inprocess":
            raise ValueError(f"task.unsafe_no_os_sandbox is refused with swarm.transport={run.swarm.transport}: programs written by "
                             "peers in other processes would run outside the OS sandbox (docs/sandbox.md)")

    @model_validator(mode="after")
    def _sources(self):
        if self.val_path and not self.path:
            raise ValueError("python_math: val_path needs path (the generator makes its own validation split)")
        bad = [name for name in self.libraries if not valid_stand_in_name(name)]
        if bad:  # the sandbox stands in for attacker modules; it never shadows a real one
            raise ValueError(f"python_math: libraries name stand-in attacker modules: identifiers that are not real modules, got {bad}")
        return self


@register("task", "python_math", config=PythonMathTaskConfig)
class PythonMathTask:
    """Math word problems solved by Python programs, reward by running them in the sandbox.

    Args:
        seed / difficulty / n_train / n_val: as for the arithmetic task (generator source); with a
            GSM8K file, n_train and n_val cap the split sizes (None keeps all training problems).
        path: GSM8K-format JSONL file; None uses the embedded generator.
        val_path: GSM8K validation JSONL; when absent the last ``n_val`` usable records of ``path``
            are held out.
        few_shot: worked examples (programs) shown as earlier chat turns (0-2).
        prefill_think: open the assistant turn with ``<think>``.
        timeout_s / memory_mb: sandbox limits of one program run (seconds, MiB).
        libraries: attacker libraries installed in the sandbox as recording stand-ins (the code
            injection attack needs its module among them, paper §3.4.2).
        unsafe_no_os_sandbox: run programs without bubblewrap (UNSAFE; docs/sandbox.md).
        system_prompt: the system prompt of every chat (None: the program-writing prompt).

    Raises:
        ValueError / DataError: bad settings, unreadable data, or no usable problem.
        SandboxUnavailable: programs cannot be sandboxed here (names the fix).
    """

    name = "python_math"

    def __init__(self, seed: int = 0, difficulty: int = 1, n_train: int | None = 2000, n_val: int = 200,
                 path: str | None = None, val_path: str | None = None, few_shot: int = 2,
                 prefill_think: bool = True, timeout_s: float = 5.0, memory_mb: int = 1024,
                 libraries: Sequence[str] = ("thief_math",), unsafe_no_os_sandbox: bool = False,
                 system_prompt: str | None = None):
        self.system_prompt = system_prompt
        if not 0 <= few_shot <= len(PYTHON_FEW_SHOT):
            raise ValueError(f"few_shot must be between 0 and {len(PYTHON_FEW_SHOT)}, got {few_shot}")
        self.few_shot = few_shot
        self.completion_prefix = THINK_PREFIX if prefill_think else ""
        self.limits = SandboxLimits(timeout_s=timeout_s, memory_mb=memory_mb, unsafe_no_os_sandbox=unsafe_no_os_sandbox)
        check_sandbox(unsafe_no_os_sandbox)  # refuse at set-up, not in the middle of a round
        self.libraries = tuple(libraries)
        self._programs: dict[str, tuple[str, str]] = {}  # prompt_id -> (question, program)
        if path is None:
            if n_train is None:
                raise ValueError("n_train must be set for the embedded generator")
            source = ArithmeticTask(seed=seed, difficulty=difficulty, n_train=n_train, n_val=n_val, few_shot=0)
            self.train = [self._keep(p, arithmetic_steps(p.solution)) for p in source.train]
            self.val = [self._keep(p, arithmetic_steps(p.solution)) for p in source.val]
        else:
            train = self._load(path, "train")
            if val_path:
                val = self._load(val_path, "val")
            else:
                if n_val >= len(train):
                    raise DataError(f"{path}: too few usable records ({len(train)}) to hold out {n_val} for validation")
                train, val = train[:-n_val], train[-n_val:]
            self.train = train[:n_train] if n_train else train
            self.val = val[:n_val]

    def _keep(self, problem: Problem, steps: list[tuple[str, str]]) -> Problem:
        self._programs[problem.prompt_id] = (problem.question, write_program(steps, problem.answer))
        return problem

    def _load(self, path: str, split: str) -> list[Problem]:
        records = read_jsonl(path, "task.path" if split == "train" else "task.val_path")
        problems = problems_from_records(records, split, str(path))
        kept = []
        for rec, problem in zip(records, problems):
            try:
                kept.append(self._keep(problem, gsm8k_steps(rec["answer"])))
            except (ValueError, ZeroDivisionError, OverflowError):
                continue  # marks that are not plain arithmetic or miss the answer
        if not kept:
            raise DataError(f"{path}: no record has calculator marks that compute its answer")
        return kept

    def chat(self, problem: Problem) -> list[dict]:
        """System prompt, ``few_shot`` worked examples written as programs, then the question."""
        messages = [{"role": "system", "content": self.system_prompt or PYTHON_SYSTEM_PROMPT}]
        for q, a in PYTHON_FEW_SHOT[: self.few_shot]:
            messages += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
        messages.append({"role": "user", "content": problem.question})
        return messages

    def reward(self, completion: str, problem: Problem) -> float:
        """Binary code reward (:func:`dgrpo.rewards.code.code_reward`): format, clean run, right output."""
        return code_reward(self.completion_prefix + completion, problem.answer, self.limits, self.libraries)

    def rewards(self, completions: Sequence[str], problems: Sequence[Problem], jobs: int | None = None) -> list[float]:
        """:meth:`reward` of each completion, the programs run ``jobs`` at a time (default: one per core)."""
        return code_rewards([self.completion_prefix + c for c in completions], [p.answer for p in problems],
                            self.limits, self.libraries, jobs)

    def oracle_program(self, problem: Problem) -> str:
        """The program written from the problem's solution steps (prints the oracle answer).

        Raises:
            ValueError: the problem is not one of this task's.
        """
        question, program = self._programs.get(problem.prompt_id, (None, ""))
        if question != problem.question:
            raise ValueError(f"problem {problem.prompt_id!r} is not a problem of this task")
        return program

    def oracle_completion(self, problem: Problem) -> str:
        """``<think>{solution}</think>`` then the oracle program in a fenced answer block (minus prefill)."""
        full = f"<think>{problem.solution}</think>\n<answer>\n```python\n{self.oracle_program(problem)}```\n</answer>"
        return full[len(self.completion_prefix):]
