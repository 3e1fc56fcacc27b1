"""What a task is: prompts with oracle answers, a system prompt and a reward; and the base of task configs."""

from __future__ import annotations

from typing import Annotated, Mapping, Protocol, Sequence, runtime_checkable

from pydantic import Field

from dgrpo.registry import KindConfig
from dgrpo.types import Problem, Rollout


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

    def rewards(self, completions: Sequence[str], problems: Sequence[Problem]) -> list[float]:
        """:meth:`reward` of each (completion, problem) pair, in order (a task may compute them together)."""

    def oracle_completion(self, problem: Problem) -> str:
        """A completion that earns full reward (what an attacker holding the oracle can write)."""


def is_correct(task: Task, completion: str, problem: Problem) -> bool:
    """Whether ``completion`` solves ``problem``: it earns the task's full reward, 1.0.

    Binary rewards are 1 exactly for a correct answer; a shaped reward (a format bonus, see
    ``format_weight``) gives partial credit strictly below 1, which is not a correct answer.
    """
    return task.reward(completion, problem) >= 1.0


def reward_rollouts(task: Task, problems: Mapping[str, Problem], rollouts: Sequence[Rollout]) -> list[Rollout]:
    """Set every rollout's verifiable reward: ``task.rewards`` of their texts, in one call (a task that
    runs programs runs them several at a time); ``problems``: prompt id → problem. Returns them."""
    rollouts = list(rollouts)
    rewards = task.rewards([r.text for r in rollouts], [problems[r.prompt_id] for r in rollouts])
    for r, reward in zip(rollouts, rewards):
        r.reward = reward
    return rollouts


@runtime_checkable
class RewardMetrics(Protocol):
    """A task whose reward logs metrics of its own (a rubric's per-function means, ``train/rubric/<name>``)."""

    def reward_metrics(self) -> dict[str, float | None]:
        """The metrics of the last rewarded batch; cleared by the call."""


def reward_metrics(task: Task) -> dict[str, float | None]:
    """The reward's own metrics of ``task`` for the round record ({} for a task whose reward has none)."""
    return task.reward_metrics() if isinstance(task, RewardMetrics) else {}


class TaskConfig(KindConfig):
    """Config of a task kind (``task.kind``); its fields are the task builder's keyword arguments."""

    def seeded(self, run_seed: int) -> "TaskConfig":
        """This config with every seed it leaves to the run fixed to ``run_seed`` (none here)."""
        return self


class GeneratedTaskConfig(TaskConfig):
    """Config of a task whose problems come from a seeded generator."""

    seed: int | None = Field(None, ge=0, le=2**32 - 1, description="Problem generator seed, 0 to 2^32 − 1; None uses the run seed.")

    def seeded(self, run_seed: int) -> "GeneratedTaskConfig":
        """The generator seed, or the run seed when it is None (every copy of the run, an ensemble
        group included, then generates the same problems)."""
        return self if self.seed is not None else self.model_copy(update={"seed": run_seed})


SystemPrompt = Annotated[str | None, Field(min_length=1, max_length=8000, description="System prompt of every chat (at most 8000 characters); None = the task's own (the math prompt asking for <think>/<answer>; python_math: its program prompt).")]

FormatWeight = Annotated[float, Field(ge=0, le=100, description="Weight w of DeepSeek-R1's format reward: reward = (correct + w·well_formatted)/(1 + w). 0 = the paper's binary reward; eval/accuracy counts correct answers either way.")]
