"""GSM8K (Cobbe et al. 2021) from a JSONL file in the official format or from the hub.

Each JSONL line is ``{"question": str, "answer": str}`` where ``answer`` is a worked solution with
``<<a+b=c>>`` calculator marks and a last line ``#### N``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Iterable, Literal, Sequence

from pydantic import Field, model_validator

from dgrpo.config_inputs import path_problem
from dgrpo.errors import DataError
from dgrpo.registry import PathText, register
from dgrpo.rewards.math import check_format_weight, parse_oracle, shaped_math_reward
from dgrpo.tasks.base import FormatWeight, SystemPrompt, TaskConfig
from dgrpo.tasks.equations import has_intermediate_two_two
from dgrpo.tasks.prompts import MATH_SYSTEM_PROMPT, THINK_PREFIX, math_chat, math_oracle_completion
from dgrpo.types import Problem

_CALC = re.compile(r"<<[^>]*>>")


def clean_solution(answer: str) -> str:
    """Worked solution without calculator marks and without the ``#### N`` line."""
    body = answer.split("####")[0]
    return _CALC.sub("", body).strip()


def problems_from_records(records: Iterable[dict], split: str, source: str) -> list[Problem]:
    """Turn GSM8K records into problems.

    Raises:
        DataError: a record lacks ``question``/``answer`` or its answer has no ``#### N``.
    """
    problems = []
    for i, rec in enumerate(records):
        if not isinstance(rec, dict) or not isinstance(rec.get("question"), str) or not isinstance(rec.get("answer"), str):
            raise DataError(f"{source}: record {i + 1} needs string fields 'question' and 'answer'")
        try:
            oracle = parse_oracle(rec["answer"])
        except ValueError as err:
            raise DataError(f"{source}: record {i + 1}: {err}") from None
        solution = clean_solution(rec["answer"])
        tags = frozenset({"two_two"}) if has_intermediate_two_two(solution) else frozenset()
        problems.append(Problem(f"{split}-{i}", rec["question"].strip(), oracle, solution, tags))
    return problems


def read_jsonl(path: str | Path, field: str | None = None) -> list[dict]:
    """Read a JSONL file (UTF-8). ``field``: the config key that named it (``task.path``), put first in
    every error.

    Raises:
        DataError: missing file, a line that is not JSON or a file that is not UTF-8 (names the line).
    """
    path, where = Path(path), f"{field}: " if field else ""
    problem = path_problem(path)
    if problem is not None:  # (a folder or a FIFO: said as such, never opened)
        raise DataError(f"{where}{path}: {problem}")
    records = []
    try:
        with path.open(encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as err:
                    raise DataError(f"{where}{path}:{lineno}: not JSON ({err.msg})") from None
    except UnicodeDecodeError:  # (decoded in blocks: the line is found in the bytes)
        raw = path.read_bytes()
        try:
            raw.decode("utf-8")
            at = len(raw)
        except UnicodeDecodeError as err:
            at = err.start
        line = raw.count(b"\n", 0, at) + 1
        raise DataError(f"{where}{path}:{line}: not UTF-8 text (byte {raw[at:at + 1]!r}); "
                        "save the file as UTF-8") from None
    if not records:
        raise DataError(f"{path}: no records")
    return records


def load_hub(name: str, split: str, config: str = "main") -> list[dict]:
    """Records of a GSM8K-format hub dataset through ``datasets`` (needs network access)."""
    from datasets import load_dataset  # imported lazily: heavy, and only this path needs it

    return list(load_dataset(name, config, split=split))


class GSM8KTaskConfig(TaskConfig):
    """``task.kind=gsm8k``: GSM8K from a JSONL file or the hub."""

    kind: Literal["gsm8k"] = "gsm8k"
    path: PathText | None = Field(None, description="Training JSONL in the official GSM8K format (question, answer ending in `#### N`).")
    val_path: PathText | None = Field(None, description="Validation JSONL; absent → the last n_val training records.")
    hub: PathText | None = Field(None, description="Hub dataset name (e.g. openai/gsm8k), loaded with `datasets` (online only).")
    n_train: int | None = Field(None, ge=1, le=10_000_000, description="Cap on training records, at most 10^7 (None = all).")
    n_val: int = Field(200, ge=1, le=10_000_000, description="Cap on validation records, at most 10^7.")
    few_shot: int = Field(2, ge=0, le=2, description="Worked examples shown as earlier chat turns.")
    prefill_think: bool = Field(True, description="Open the assistant turn with `<think>`.")
    format_weight: FormatWeight = 0.0
    system_prompt: SystemPrompt = None

    @model_validator(mode="after")
    def _source(self):
        if not self.path and not self.hub:
            raise ValueError("gsm8k task needs `path` (JSONL file) or `hub` (dataset name)")
        return self


@register("task", "gsm8k", config=GSM8KTaskConfig)
class GSM8KTask:
    """GSM8K with the binary think/answer reward.

    Args:
        path: training JSONL file (official format). Either ``path`` or ``hub`` is required.
        val_path: validation JSONL file; when absent the last ``n_val`` training records are held
            out.
        hub: hub dataset name (e.g. ``openai/gsm8k``), loaded with ``datasets`` (online only).
        n_train / n_val: caps on the split sizes (None keeps all).
        few_shot / prefill_think / format_weight / system_prompt: prompt and reward settings, as for the arithmetic task.

    Raises:
        DataError: unreadable or malformed data, or neither source given.
    """

    name = "gsm8k"

    def __init__(self, path: str | None = None, val_path: str | None = None, hub: str | None = None,
                 n_train: int | None = None, n_val: int | None = 200, few_shot: int = 2, prefill_think: bool = True,
                 format_weight: float = 0.0, system_prompt: str | None = None):
        self.few_shot, self.system_prompt = few_shot, system_prompt or MATH_SYSTEM_PROMPT
        self.format_weight = check_format_weight(format_weight)
        self.completion_prefix = THINK_PREFIX if prefill_think else ""
        if path:
            train = problems_from_records(read_jsonl(path, "task.path"), "train", str(path))
            val = problems_from_records(read_jsonl(val_path, "task.val_path"), "val", str(val_path)) if val_path else None
        elif hub:
            train = problems_from_records(load_hub(hub, "train"), "train", hub)
            val = problems_from_records(load_hub(hub, "test"), "val", hub)
        else:
            raise DataError("gsm8k task needs `path` (a JSONL file) or `hub` (a dataset name)")
        if val is None:
            if n_val is None or n_val >= len(train):
                raise DataError(f"{path}: too few records ({len(train)}) to hold out {n_val} for validation")
            train, val = train[:-n_val], train[-n_val:]
        self.train = train[:n_train] if n_train else train
        self.val = val[:n_val] if n_val else val

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
        """``<think>{cleaned solution}</think>\\n<answer>{answer}</answer>``."""
        return math_oracle_completion(problem.solution, problem.answer, self.completion_prefix)
