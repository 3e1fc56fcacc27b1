"""The ``even_length`` task of the tiny-model runs: reward 1 when the completion has an even number of
characters. A random tiny model gets about half right, so GRPO groups have mixed rewards and every
update moves the weights.

One copy for tests/recipes/test_golden.py (registered there as ``task.kind=even_length`` for its runs),
tests/recipes/test_federated.py (handed to ``build_federation``) and results/restructure_equal/evenlen.py
(registered for ``runs.sh``). Not registered here: importing this module changes no registry.
"""

from typing import Literal

from dgrpo.tasks.base import TaskConfig
from dgrpo.types import Problem


class EvenLengthTaskConfig(TaskConfig):
    kind: Literal["even_length"] = "even_length"


class EvenLengthTask:
    """12 training and 3 validation prompts; reward 1.0 for an even number of characters, else 0.0.

    ``oracle_completion`` is what an attack builds its poisons from (the injection runs of
    golden_metrics.json were recorded with this text); the federated recipe never calls it.
    """

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
