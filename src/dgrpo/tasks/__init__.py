"""Tasks: prompts with oracle answers and a verifiable reward."""

from dgrpo.tasks import arithmetic, gsm8k, python_math  # noqa: F401  (register the builders)
from dgrpo.tasks.base import TASKS, Problem, Task, register

__all__ = ["TASKS", "Problem", "Task", "register"]
