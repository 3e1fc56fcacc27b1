"""Weighted TRL-style reward functions (a rubric): reuse the reward functions written for TRL's
GRPOTrainer, with every dataset column, in a dgrpo task (docs/datasets.md).

A reward function is batched, as in TRL: ``f(prompts, completions, **columns) -> list[float | None]``,
where ``prompts`` are the questions, ``completions`` the assistant turns' texts (prefill included) and
each dataset column arrives as a keyword holding one value per completion (``answer=[...]``). The
reward of a completion is the weighted sum ``Σ_i w_i · r_i`` (TRL's ``reward_weights``, a verifiers
rubric); None counts 0, as in TRL. A function of weight 0 is computed and logged only: its mean over
the last rewarded batch is a metric (``train/rubric/<name>``), the other functions' means too.
"""

from __future__ import annotations

import importlib
import inspect
import math
import statistics
from typing import Callable, Sequence

from pydantic import Field, field_validator

from dgrpo.registry import StrictConfig


def load_function(spec: str) -> Callable:
    """The function ``module:function``, checked to take ``prompts=`` and ``completions=`` keywords.

    Raises:
        ValueError: not ``module:function``, not importable, not callable, or it cannot take those keywords.
    """
    module, sep, name = spec.partition(":")
    if not sep or not module or not name:
        raise ValueError(f"a reward function is module:function, got {spec!r}")
    try:
        func = getattr(importlib.import_module(module), name)
    except ImportError as err:
        raise ValueError(f"cannot import {module!r} for reward {spec!r}: {err}") from None
    except AttributeError:
        raise ValueError(f"module {module!r} has no function {name!r}") from None
    if not callable(func):
        raise ValueError(f"{spec} is not a function")
    missing = unbound(func, ["prompts", "completions"], partial=True)  # the columns are known when the data is read
    if missing:
        raise ValueError(f"{spec} must take TRL's keywords (prompts, completions, **columns): {missing}")
    return func


def unbound(func: Callable, keywords: Sequence[str], partial: bool = False) -> str:
    """Why ``func`` cannot be called with these keywords (each a list), "" when it can (``partial``: it may
    need more)."""
    try:
        signature = inspect.signature(func)
        (signature.bind_partial if partial else signature.bind)(**{k: [] for k in keywords})
    except TypeError as err:
        return str(err)
    except ValueError:  # a builtin without a signature: checked when called
        pass
    return ""


class RewardFunction(StrictConfig):
    """One reward function of a rubric: ``{function: mypkg.rewards:correct, weight: 1.0}``."""

    function: str = Field(..., description="Reward function `module:function`, TRL-style: f(prompts, completions, **columns) -> list of numbers (or None) per completion.")
    weight: float = Field(1.0, description="Its weight in the reward Σ w·r; 0 = computed and logged as a metric only.")
    name: str | None = Field(None, min_length=1, max_length=100, description="Metric name (train/rubric/<name>); None = the function's name.")

    @field_validator("function")
    @classmethod
    def _importable(cls, v: str) -> str:
        load_function(v)
        return v


class Rubric:
    """Weighted reward functions over batches (see the module docstring).

    Args:
        functions: the rubric's :class:`RewardFunction` settings, in order.
        columns: the dataset's column names (each function must take them all as keywords).

    Raises:
        ValueError: a function cannot take the columns, or two functions share a metric name.
    """

    def __init__(self, functions: Sequence[RewardFunction], columns: Sequence[str]):
        self.functions = []
        for spec in functions:
            func = load_function(spec.function)
            missing = unbound(func, ["prompts", "completions", *columns])
            if missing:
                raise ValueError(f"reward {spec.function} cannot take the dataset's columns ({', '.join(columns)}) "
                                 f"as keywords: {missing}; add **kwargs")
            self.functions.append((spec.name or spec.function.partition(":")[2], func, spec.weight, spec.function))
        names = [n for n, *_ in self.functions]
        if len(set(names)) != len(names):
            raise ValueError(f"two reward functions share a metric name ({', '.join(names)}); give them name=")
        self._metrics: dict[str, float] = {}

    def __call__(self, prompts: Sequence[str], completions: Sequence[str], columns: dict[str, list],
                 record: bool = True) -> list[float]:
        """The weighted reward of each completion; with ``record``, each function's mean is kept as a metric.

        Raises:
            ValueError: a function returned another number of rewards, or something that is not a finite number or None.
        """
        n = len(completions)
        totals = [0.0] * n
        metrics = {}
        for name, func, weight, spec in self.functions:
            out = list(func(prompts=list(prompts), completions=list(completions), **columns))
            if len(out) != n:
                raise ValueError(f"reward {spec} returned {len(out)} rewards for {n} completions")
            for r in out:
                if r is not None and (isinstance(r, bool) or not isinstance(r, (int, float)) or not math.isfinite(r)):
                    raise ValueError(f"reward {spec} returned {r!r}: a reward is a finite number or None")
            given = [float(r) for r in out if r is not None]
            metrics[f"train/rubric/{name}"] = statistics.fmean(given) if given else None
            if weight:
                totals = [t + weight * (r or 0.0) for t, r in zip(totals, out)]
        if record:
            self._metrics = metrics
        return totals

    def metrics(self) -> dict[str, float | None]:
        """Each function's mean over the last recorded batch (None where it returned only None); then cleared."""
        out, self._metrics = self._metrics, {}
        return out
