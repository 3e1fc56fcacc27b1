"""What a task is: prompts with oracle answers, a system prompt and a reward."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence


@dataclass(frozen=True)
class Problem:
    """One prompt of a task.

    Attributes:
        prompt_id: stable id, unique within the task (groups are formed by it).
        question: the user message.
        answer: the oracle answer, as text (``"-3"``, ``"1234"``).
        solution: a worked solution in plain text (no ``<<…>>`` calculator marks, no ``####``).
        tags: facts attacks may select on, e.g. ``"two_two"`` when the solution computes 2+2 or
            2×2 as an intermediate step.
    """

    prompt_id: str
    question: str
    answer: str
    solution: str
    tags: frozenset[str] = field(default_factory=frozenset)


class Task(Protocol):
    """A task gives prompts with oracle answers and a verifiable reward."""

    name: str
    completion_prefix: str  # text that opens the assistant turn (prefill); completions continue it
    train: Sequence[Problem]
    val: Sequence[Problem]

    def chat(self, problem: Problem) -> list[dict]:
        """Chat messages (system, examples, user) that prompt for ``problem``."""

    def reward(self, completion: str, problem: Problem) -> float:
        """Verifiable reward in [0, 1] of one completion (the text after the prefix).

        Raises:
            ValueError: the problem's oracle itself is malformed (never silently scored 0).
        """

    def oracle_completion(self, problem: Problem) -> str:
        """A completion that earns full reward (what an attacker holding the oracle can write)."""


def is_correct(task: Task, completion: str, problem: Problem) -> bool:
    """Whether ``completion`` solves ``problem``: it earns the task's full reward, 1.0.

    Binary rewards are 1 exactly for a correct answer; a shaped reward (a format bonus, see
    ``format_weight``) gives partial credit strictly below 1, which is not a correct answer.
    """
    return task.reward(completion, problem) >= 1.0


TASKS: dict[str, Callable[..., Task]] = {}


def register(name: str):
    """Class/function decorator adding a task builder to :data:`TASKS` under ``name``."""

    def deco(builder):
        TASKS[name] = builder
        return builder

    return deco
