"""A task in the user's own package: ``task.kind=mykinds.tasks:letters`` — how many letters a word has."""

from __future__ import annotations

import random
from typing import Literal, Sequence

from pydantic import Field

from dgrpo.registry import register
from dgrpo.rewards.math import shaped_math_reward
from dgrpo.tasks.base import GeneratedTaskConfig, SystemPrompt
from dgrpo.tasks.prompts import MATH_SYSTEM_PROMPT, THINK_PREFIX, math_chat, math_oracle_completion
from dgrpo.types import Problem

WORDS = ["apple", "river", "stone", "garden", "pencil", "window", "rocket", "planet", "bridge", "candle",
         "forest", "guitar", "island", "jacket", "kitten", "ladder", "mirror", "needle", "orange", "pillow"]


class LettersConfig(GeneratedTaskConfig):
    """``task.kind=mykinds.tasks:letters``: count the letters of a word."""

    kind: Literal["letters"] = "letters"
    n_train: int = Field(16, ge=1, le=len(WORDS) - 1, description="Training words.")
    n_val: int = Field(4, ge=1, le=len(WORDS) - 1, description="Validation words.")
    system_prompt: SystemPrompt = None


@register("task", "letters", config=LettersConfig)
class Letters:
    name = "letters"
    completion_prefix = THINK_PREFIX

    def __init__(self, seed: int = 0, n_train: int = 16, n_val: int = 4, system_prompt: str | None = None):
        if n_train + n_val > len(WORDS):
            raise ValueError(f"n_train + n_val must be at most {len(WORDS)}")
        words = random.Random(seed).sample(WORDS, n_train + n_val)
        problems = [Problem(f"w{i}", f"How many letters does the word '{w}' have?", str(len(w)),
                            f"The word {w} is spelled {' '.join(w)}, which is {len(w)} letters.") for i, w in enumerate(words)]
        self.train, self.val = problems[:n_train], problems[n_train:]
        self.system_prompt = system_prompt or MATH_SYSTEM_PROMPT

    def chat(self, problem: Problem) -> list[dict]:
        return math_chat(problem.question, few_shot=0, system_prompt=self.system_prompt)

    def reward(self, completion: str, problem: Problem) -> float:
        return shaped_math_reward(self.completion_prefix + completion, problem.answer, 0.0)

    def rewards(self, completions: Sequence[str], problems: Sequence[Problem]) -> list[float]:
        return [self.reward(c, p) for c, p in zip(completions, problems)]

    def oracle_completion(self, problem: Problem) -> str:
        return math_oracle_completion(problem.solution, problem.answer, self.completion_prefix)
