"""TRL-style batched reward functions: ``f(prompts, completions, **columns) -> list[float]``, one value per
completion; every dataset column arrives as a keyword (``answer``, ``unit``). The same functions work as
``GRPOTrainer(reward_funcs=[...])`` in TRL and as a dgrpo rubric (``task.rewards``)."""

from __future__ import annotations

import re

_ANSWER = re.compile(r"<answer>\s*(.*?)\s*</answer>", re.DOTALL)


def correct(prompts, completions, answer, **kwargs) -> list[float]:
    """1.0 when the text inside <answer></answer> is the dataset's answer, else 0.0."""
    out = []
    for text, truth in zip(completions, answer):
        found = _ANSWER.search(text)
        out.append(1.0 if found and found.group(1).strip() == str(truth).strip() else 0.0)
    return out


def names_unit(prompts, completions, unit, **kwargs) -> list[float]:
    """1.0 when the completion names the problem's unit (the dataset column ``unit``)."""
    return [1.0 if u and u in text else 0.0 for text, u in zip(completions, unit)]


def brevity(prompts, completions, **kwargs) -> list[float]:
    """Shorter is better: 1 − characters / 400, at least 0."""
    return [max(0.0, 1.0 - len(text) / 400) for text in completions]
