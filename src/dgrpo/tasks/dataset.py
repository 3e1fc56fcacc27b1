"""A task from any Hugging Face dataset or local file, by column mapping, with the math reward, a
reward function named by import path, or a rubric of TRL-style reward functions (docs/datasets.md).

``task.kind=dataset``: ``path`` (a local ``.jsonl``/``.json``/``.csv``/``.parquet`` file) or ``hub`` (a
hub dataset id, or a local dataset folder) read with ``datasets.load_dataset``; ``columns`` maps the
question, the answer and optionally a worked solution; ``reward`` is ``module:function``; ``rewards`` a
weighted list of batched functions that get every dataset column (:mod:`dgrpo.rewards.rubric`).
"""

from __future__ import annotations

import importlib
import inspect
import math
from pathlib import Path
from typing import Callable, Literal, Sequence

from pydantic import Field, field_validator, model_validator

from dgrpo.config_inputs import path_problem
from dgrpo.errors import DataError
from dgrpo.registry import StrictConfig, register
from dgrpo.rewards.math import check_format_weight, parse_oracle, shaped_math_reward
from dgrpo.rewards.rubric import RewardFunction, Rubric
from dgrpo.tasks.base import FormatWeight, SystemPrompt, TaskConfig
from dgrpo.tasks.equations import has_intermediate_two_two
from dgrpo.tasks.prompts import MATH_SYSTEM_PROMPT, THINK_PREFIX, math_chat, math_oracle_completion
from dgrpo.types import Problem

BUILDERS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}


def load_reward(spec: str) -> Callable[[str, Problem], float]:
    """The function ``module:function``, checked to take (completion, problem) like :meth:`Task.reward`.

    Raises:
        ValueError: not ``module:function``, the module or function cannot be imported, or the
            function cannot be called with two positional arguments.
    """
    module, sep, name = spec.partition(":")
    if not sep or not module or not name:
        raise ValueError(f"reward must look like module:function, got {spec!r}")
    try:
        func = getattr(importlib.import_module(module), name)
    except ImportError as err:
        raise ValueError(f"cannot import {module!r} for reward {spec!r}: {err}") from None
    except AttributeError:
        raise ValueError(f"module {module!r} has no function {name!r}") from None
    if not callable(func):
        raise ValueError(f"{spec} is not a function")
    try:
        inspect.signature(func).bind("completion", None)
    except TypeError as err:
        raise ValueError(f"{spec} must take (completion: str, problem: Problem) -> float: {err}") from None
    except ValueError:
        pass  # a builtin without a signature: checked when called
    return func


class Columns(StrictConfig):
    """Which dataset columns hold the question, the answer and (optionally) a worked solution."""

    question: str = Field("question", min_length=1, description="Column of the question (the user message).")
    answer: str = Field("answer", min_length=1, description="Column of the oracle answer.")
    solution: str | None = Field(None, description="Column of a worked solution (the attacks' oracle completions show it); None = none.")


class DatasetTaskConfig(TaskConfig):
    """``task.kind=dataset``: any dataset by column mapping, any reward by import path (docs/datasets.md)."""

    kind: Literal["dataset"] = "dataset"
    path: str | None = Field(None, description="Local training file: .jsonl, .json, .csv or .parquet.")
    val_path: str | None = Field(None, description="Local validation file; absent (and no val_split) → the last n_val training records.")
    hub: str | None = Field(None, description="Hugging Face dataset id (or a local dataset folder), read with datasets.load_dataset.")
    hub_config: str | None = Field(None, description="The hub dataset's config name (e.g. main for openai/gsm8k).")
    split: str = Field("train", min_length=1, description="Training split of the hub dataset.")
    val_split: str | None = Field(None, description="Validation split of the hub dataset (e.g. test); None → hold out n_val training records.")
    columns: Columns = Field(default_factory=Columns, description="Column mapping: question, answer, optional solution.")
    answer_format: Literal["plain", "gsm8k"] = Field("plain", description="plain: the answer column is the answer; gsm8k: a worked solution ending in `#### N` (N is the answer, the rest the solution).")
    reward: str | None = Field(None, description="Reward function `module:function` taking (completion, problem) → float in [0, 1], like the built-in rewards; completion is the assistant turn's text (prefill included), problem a dgrpo.types.Problem. None = the math reward (think/answer format, answer equality).")
    rewards: list[RewardFunction] = Field(default_factory=list, description="A rubric instead of `reward`: TRL-style batched reward functions, each {function: module:function, weight: w}, called with prompts, completions and every dataset column as keywords; reward = Σ w·r; weight 0 = logged as train/rubric/<name> only (docs/datasets.md).")
    system_prompt: SystemPrompt = None
    n_train: int | None = Field(None, ge=1, description="Cap on training records (None = all).")
    n_val: int = Field(200, ge=1, description="Cap on validation records (and how many to hold out without a validation source).")
    few_shot: int = Field(2, ge=0, le=2, description="Worked math examples shown as earlier chat turns (0 for non-math data).")
    prefill_think: bool = Field(True, description="Open the assistant turn with `<think>`.")
    format_weight: FormatWeight = 0.0

    @field_validator("reward")
    @classmethod
    def _importable(cls, v: str | None) -> str | None:
        if v is not None:
            load_reward(v)
        return v

    @model_validator(mode="after")
    def _source(self):
        if (self.path is None) == (self.hub is None):
            raise ValueError("the dataset task needs exactly one of `path` (a local file) or `hub` (a dataset id)")
        if self.path is not None and Path(self.path).suffix.lower() not in BUILDERS:
            raise ValueError(f"path {self.path!r}: the file type must be one of {', '.join(BUILDERS)}")
        if self.path is not None and self.val_split is not None:
            raise ValueError("val_split selects a split of `hub`; for a local file give val_path")
        if self.reward is not None and self.rewards:
            raise ValueError("give `reward` (one function of (completion, problem)) or `rewards` (a rubric), not both")
        return self


def _records(path: str | None, hub: str | None, config: str | None, split: str) -> tuple[list[dict], str]:
    """(records, source name) of a local file or of one split of a hub dataset."""
    from datasets import load_dataset  # heavy: only this task needs it

    try:
        if path is not None:
            problem = path_problem(path)
            if problem is not None:  # (a folder or a FIFO: said as such, never opened)
                raise DataError(f"task.path: {path}: {problem}")
            data = load_dataset(BUILDERS[Path(path).suffix.lower()], data_files=str(path), split="train")
            return list(data), str(path)
        return list(load_dataset(hub, config, split=split)), f"{hub}[{split}]"
    except DataError:
        raise
    except Exception as err:  # datasets raises many kinds (FileNotFoundError, DatasetNotFoundError, ValueError, ...)
        raise DataError(f"cannot load {path or hub}: {type(err).__name__}: {' '.join(str(err).split())[:200]}") from None


def problems(records: Sequence[dict], columns: Columns, answer_format: str, split: str, source: str) -> list[Problem]:
    """Problems of the records by column mapping.

    Raises:
        DataError: a mapped column is missing (with the columns there are), or a value is empty or
            malformed (names the record).
    """
    if not records:
        raise DataError(f"{source}: no records")
    have = list(records[0])
    for field, col in (("question", columns.question), ("answer", columns.answer), ("solution", columns.solution)):
        if col is not None and col not in records[0]:
            raise DataError(f"task.columns.{field}={col!r} is not a column of {source} (columns: {', '.join(map(str, have))})")
    out = []
    for i, rec in enumerate(records):
        question, answer = rec.get(columns.question), rec.get(columns.answer)
        solution = rec.get(columns.solution) if columns.solution else ""
        if not isinstance(question, str) or not question.strip() or answer is None or str(answer).strip() == "":
            raise DataError(f"{source}: record {i + 1} has an empty {columns.question!r} or {columns.answer!r}")
        answer = str(answer).strip()
        if answer_format == "gsm8k":
            try:
                solution, answer = solution or answer.split("####")[0].strip(), parse_oracle(answer)
            except ValueError as err:
                raise DataError(f"{source}: record {i + 1}: {err}") from None
        solution = "" if solution is None else str(solution).strip()
        tags = frozenset({"two_two"}) if has_intermediate_two_two(solution) else frozenset()
        out.append(Problem(f"{split}-{i}", question.strip(), answer, solution, tags))
    return out


def _check_oracles(problems_: Sequence[Problem], source: str) -> None:
    """Refuse, in one line, an oracle answer the math reward cannot read (it would raise at the first
    well-formed completion, mid-run): ``x+1`` or ``\\sqrt{2}`` outside ``$…$``; and one the reward reads but
    would not credit when a completion writes it exactly (it would pay every right answer 0, silently).

    Raises:
        DataError: names the record (its ``prompt_id``), the answer and the fix.
    """
    from dgrpo.rewards.math import answers_match

    for p in problems_:
        try:
            answers_match("0", p.answer)
        except ValueError:
            raise DataError(f"{source}: record {p.prompt_id}: answer {p.answer!r} is neither a number nor an expression "
                            "the math reward reads (math-verify); write it as a number or as LaTeX inside $...$, "
                            "or give a reward function (task.reward=module:function)") from None
        if not answers_match(p.answer, p.answer):  # (an exact right answer must never earn 0 silently)
            raise DataError(f"{source}: record {p.prompt_id}: the math reward does not credit the answer {p.answer!r} "
                            "written as itself; write it as one number or one LaTeX expression inside $...$, "
                            "or give a reward function (task.reward=module:function)")


@register("task", "dataset", config=DatasetTaskConfig)
class DatasetTask:
    """Problems from any dataset by column mapping; the math reward or a reward function by import path.

    Args: the fields of :class:`DatasetTaskConfig`.

    Raises:
        DataError: unreadable data, a missing column, too few records to hold out a validation split.
        ValueError: (from :meth:`reward`) the reward function returned something that is not a number in [0, 1].
    """

    name = "dataset"

    def __init__(self, path=None, val_path=None, hub=None, hub_config=None, split="train", val_split=None,
                 columns=None, answer_format="plain", reward=None, n_train=None, n_val=200, few_shot=2,
                 prefill_think=True, format_weight=0.0, rewards=(), system_prompt=None):
        columns = columns if isinstance(columns, Columns) else Columns(**(columns or {}))
        self.few_shot, self.format_weight = few_shot, check_format_weight(format_weight)
        self.system_prompt = system_prompt or MATH_SYSTEM_PROMPT
        self.completion_prefix = THINK_PREFIX if prefill_think else ""
        self.reward_spec, self._reward = reward, load_reward(reward) if reward else None
        records, source = _records(path, hub, hub_config, split)
        train = problems(records, columns, answer_format, "train", source)
        self._rows = {p.prompt_id: rec for p, rec in zip(train, records)}  # every column of each problem's record
        self._rubric = self._build_rubric(rewards, list(records[0]), source)
        if val_path is not None or val_split is not None:
            records, source = _records(val_path, None if val_path else hub, hub_config, val_split or "")
            val = problems(records, columns, answer_format, "val", source)
            self._rows.update({p.prompt_id: rec for p, rec in zip(val, records)})
        else:
            if n_val >= len(train):
                raise DataError(f"{source}: too few records ({len(train)}) to hold out task.n_val={n_val} for validation")
            train, val = train[:-n_val], train[-n_val:]
        self.train = train[:n_train] if n_train else train
        self.val = val[:n_val]
        if self._reward is None:  # the math reward: every oracle must be one it can read, before any model loads
            _check_oracles([*self.train, *self.val], source)

    @staticmethod
    def _build_rubric(rewards, columns: list[str], source: str) -> Rubric | None:
        if not rewards:
            return None
        clash = {"prompts", "completions"} & set(columns)
        if clash:
            raise DataError(f"{source}: column {sorted(clash)[0]!r} would collide with the reward functions' own keyword")
        try:
            return Rubric([r if isinstance(r, RewardFunction) else RewardFunction(**r) for r in rewards], columns)
        except ValueError as err:
            raise DataError(f"task.rewards: {err}") from None

    def chat(self, problem: Problem) -> list[dict]:
        """System prompt, worked examples, then the question (:func:`math_chat`)."""
        return math_chat(problem.question, self.few_shot, self.system_prompt)

    def reward(self, completion: str, problem: Problem) -> float:
        """The configured reward of the assistant turn (prefill + completion): the math reward or ``reward``'s,
        in [0, 1], or the rubric's weighted sum."""
        text = self.completion_prefix + completion
        if self._rubric is not None:
            return self._rubric_rewards([completion], [problem], record=False)[0]
        if self._reward is None:
            return shaped_math_reward(text, problem.answer, self.format_weight)
        value = self._reward(text, problem)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or not 0 <= value <= 1:
            raise ValueError(f"task.reward {self.reward_spec} returned {value!r}: a reward is a number in [0, 1]")
        return float(value)

    def rewards(self, completions: Sequence[str], problems: Sequence[Problem]) -> list[float]:
        """:meth:`reward` of each pair, in order (a rubric's functions called once on the whole batch)."""
        if self._rubric is not None:
            return self._rubric_rewards(completions, problems)
        return [self.reward(c, p) for c, p in zip(completions, problems)]

    def _rubric_rewards(self, completions: Sequence[str], problems: Sequence[Problem], record: bool = True) -> list[float]:
        rows = [self._rows[p.prompt_id] for p in problems]
        columns = {name: [row.get(name) for row in rows] for name in (rows[0] if rows else {})}
        return self._rubric([p.question for p in problems], [self.completion_prefix + c for c in completions], columns, record)

    def reward_metrics(self) -> dict[str, float | None]:
        """The rubric's per-function means over the last rewarded batch (``train/rubric/<name>``); {} without one."""
        return {} if self._rubric is None else self._rubric.metrics()

    def oracle_completion(self, problem: Problem) -> str:
        """``<think>{solution}</think>\\n<answer>{answer}</answer>``."""
        return math_oracle_completion(problem.solution, problem.answer, self.completion_prefix)
