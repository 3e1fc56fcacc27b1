"""The task of the runs' comparison (runs.sh): ``tests/even_length.py``'s EvenLengthTask (reward 1 when the
completion has an even number of characters, so a random tiny model gets half right, groups have mixed
rewards and every update moves the weights), registered as tests/recipes/test_golden.py registers it.
``task.kind=evenlen:even_length`` with PYTHONPATH holding this folder; the repository root is put on the
import path here to reach ``tests``. The class is registered through a subclass defined here, because an
import-path kind must be defined in the module it names. (The first runs were made with a copy of the
class in this file, the same code as the shared one, its docstring aside.)"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: `tests` importable

from dgrpo.registry import register  # noqa: E402
from tests import even_length  # noqa: E402


@register("task", "even_length", config=even_length.EvenLengthTaskConfig)
class EvenLengthTask(even_length.EvenLengthTask):
    """tests/even_length.py's task, unchanged."""
