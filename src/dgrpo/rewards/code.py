"""Reward of a completion whose answer block is a Python program (paper §3.4.2, §D.2).

The paper's coding reward is binary: 1 when running the program prints the correct answer. Here a
completion earns 1.0 only when

1. the ``<think>…</think><answer>…</answer>`` format holds (:func:`parse_completion`);
2. the answer block holds a program (optionally inside a ```` ```python ```` fence);
3. the program, run in the sandbox (:func:`dgrpo.rewards.sandbox.run_python`), ends normally: exit
   status 0, not timed out, not blocked. A program that raises scores 0 even if what it printed
   before (possibly nothing) equals the expected output;
4. its output matches the expected output (:func:`output_matches`).

The host never does much with what a program printed: the sandbox keeps only the first
:data:`~dgrpo.rewards.supervise.STDOUT_KEPT` bytes (a program that printed more scores 0, an answer is
short), and only a single line of at most :data:`MAX_ANSWER_CHARS` characters reaches math-verify,
which runs in a worker process under a CPU and a wall-clock limit
(:func:`dgrpo.rewards.answer_check.bounded_answers_match`).
"""

from __future__ import annotations

import re
from typing import Sequence

from dgrpo.rewards.answer_check import bounded_answers_match
from dgrpo.rewards.format import parse_completion
from dgrpo.rewards.sandbox import SandboxLimits, SandboxResult, run_many, run_python

# One run of blanks between the backticks and the newline, or two runs around the language name: never two
# adjacent runs, which made "```" + 32k blanks (no newline) cost quadratic time (seconds) on the host.
_FENCE = re.compile(r"```[ \t]*(?:(?:python3?|py)[ \t]*)?\n(?P<code>.*?)```", re.DOTALL | re.IGNORECASE)
_NUMBER = re.compile(r"-?(\d[\d,]*(\.\d*)?|\.\d+)")
MAX_ANSWER_CHARS = 200  # longest printed line math-verify reads ("The total number of apples is 12" is 33)


def extract_program(answer: str) -> str:
    """The program inside an answer block: the first fenced code block, else the whole block.

    ``"```python\\nprint(7)\\n```"`` → ``"print(7)\\n"``; ``"print(7)"`` → ``"print(7)"``.
    """
    match = _FENCE.search(answer)
    return match["code"] if match else answer


def completion_program(completion: str) -> str | None:
    """The program of a full completion (prefill included), or None when the format does not hold."""
    parsed = parse_completion(completion)
    if parsed is None:
        return None
    program = extract_program(parsed.answer)
    return program if program.strip() else None


def _normalise(text: str) -> str:
    """Trailing spaces on every line and trailing blank lines removed (they never matter)."""
    return "\n".join(line.rstrip() for line in text.rstrip().splitlines())


def output_matches(stdout: str, expected: str) -> bool:
    """Whether a program's output is the expected answer.

    True when the output equals ``expected`` up to trailing whitespace, or when ``expected`` is a
    number and the output is a single line that denotes it (math-verify: ``"7.0"`` and
    ``"The answer is 7"`` match ``"7"``). Several printed lines match only exactly: a program
    cannot print many candidates and let the checker pick one. A line longer than
    :data:`MAX_ANSWER_CHARS` is never parsed (no match).
    """
    out, want = _normalise(stdout), _normalise(expected)
    if out == want:
        return True
    if not out or "\n" in out or len(out) > MAX_ANSWER_CHARS or not _NUMBER.fullmatch(want):
        return False
    return bounded_answers_match(out, want)


def result_reward(result: SandboxResult | None, expected: str) -> float:
    """1.0 when a run (None: no program) ended normally and printed ``expected`` (:func:`output_matches`);
    0.0 for a run that printed more than the sandbox keeps, which is never parsed."""
    return float(result is not None and result.ok and not result.output_limited
                 and output_matches(result.stdout, expected))


def code_reward(completion: str, expected: str, limits: SandboxLimits = SandboxLimits(),
                libraries: Sequence[str] = ()) -> float:
    """Binary code reward of one completion (prefill included), see the module docstring.

    Args:
        completion: the full completion text, ``<think>…</think><answer>program</answer>``.
        expected: the output the program must print (the oracle answer).
        limits / libraries: sandbox settings (:func:`run_python`).

    Returns:
        1.0 or 0.0.
    """
    return result_reward(run_completion(completion, limits, libraries), expected)


def code_rewards(completions: Sequence[str], expected: Sequence[str], limits: SandboxLimits = SandboxLimits(),
                 libraries: Sequence[str] = (), jobs: int | None = None) -> list[float]:
    """:func:`code_reward` of each completion, their programs run ``jobs`` at a time (:func:`run_many`)."""
    if len(completions) != len(expected):
        raise ValueError(f"{len(completions)} completions for {len(expected)} expected outputs")
    programs = [completion_program(c) for c in completions]
    runnable = [p for p in programs if p is not None]
    results = iter(run_many(runnable, limits, tuple(libraries), jobs))
    return [result_reward(next(results) if p is not None else None, e) for p, e in zip(programs, expected)]


def run_completion(completion: str, limits: SandboxLimits = SandboxLimits(),
                   libraries: Sequence[str] = ()) -> SandboxResult | None:
    """Run the program of a completion in the sandbox; None when the completion has no program."""
    program = completion_program(completion)
    if program is None:
        return None
    return run_python(program, limits, tuple(libraries))
