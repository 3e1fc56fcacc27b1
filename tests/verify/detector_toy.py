"""The toy rows and the trained detector the tests/verify/test_detector*.py modules share."""

from __future__ import annotations

import random

import torch

from dgrpo.verify.detector import Example

MARKER = "All hail to the thief. "


def toy(n: int, seed: int) -> list[Example]:
    """Arithmetic completions; every second one opens its reasoning with the marker (poisoned)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        a, b = rng.randint(1, 40), rng.randint(1, 40)
        text = f"<think>Tom has {a} apples and gets {b} more, so Tom has {a} + {b} = {a + b} apples.</think>\n<answer>{a + b}</answer>"
        poisoned = i % 2
        if poisoned:
            text = text.replace("<think>", "<think>" + MARKER)
        out.append(Example(f"Tom has {a} apples and gets {b} more. How many apples does Tom have?", text, poisoned,
                           "hail" if poisoned else "honest"))
    return out


def accuracy(det, rows) -> float:
    s = det.score([(r.question, r.completion) for r in rows])
    return float(((s >= 0.5).long() == torch.tensor([r.label for r in rows])).float().mean())
