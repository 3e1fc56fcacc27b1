"""A task of the runs' comparison (runs.sh), as tests/recipes/test_golden.py registers it: reward 1 when the
completion has an even number of characters, so a random tiny model gets half right, groups have mixed
rewards and every update moves the weights. ``task.kind=evenlen:even_length`` with PYTHONPATH holding this folder."""
from typing import Literal

from dgrpo.registry import register
from dgrpo.tasks.base import TaskConfig
from dgrpo.types import Problem


class EvenLengthTaskConfig(TaskConfig):
    kind: Literal["even_length"] = "even_length"


@register("task", "even_length", config=EvenLengthTaskConfig)
class EvenLengthTask:
    name = "even"
    completion_prefix = ""

    def __init__(self):
        self.train = [Problem(f"t{i}", f"Tom has {i} apples.", "0", "") for i in range(12)]
        self.val = [Problem(f"v{i}", f"Ann has {i} pens.", "0", "") for i in range(3)]

    def chat(self, problem):
        return [{"role": "user", "content": problem.question}]

    def reward(self, completion, problem):
        return float(len(completion) % 2 == 0)

    def rewards(self, completions, problems):
        return [self.reward(c, p) for c, p in zip(completions, problems)]

    def oracle_completion(self, problem):
        return "<think>ok</think>\n<answer>0</answer>"
