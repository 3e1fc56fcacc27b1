"""Python, numpy and torch random states as JSON: captured at a save, checked and restored at a resume
(nothing here is ever unpickled)."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import torch

from dgrpo.errors import CheckpointError


def capture() -> dict:
    """Python, numpy and torch (and CUDA) RNG states as JSON-able lists."""
    version, state, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    return {"python": [version, list(state), gauss], "numpy": [kind, keys.tolist(), pos, has_gauss, cached],
            "torch": torch.get_rng_state().tolist(),
            "cuda": [s.tolist() for s in torch.cuda.get_rng_state_all()] if torch.cuda.is_available() else []}


def _uints(values, bits: int, length: int | None = None) -> bool:
    return (isinstance(values, list) and (length is None or len(values) == length)
            and all(type(v) is int and 0 <= v < 1 << bits for v in values))


def check(s, path: Path) -> None:
    """Refuse RNG states that are not what :func:`capture` writes.

    Raises:
        CheckpointError: names ``path`` and the part that is wrong.
    """
    def bad(what: str):
        return CheckpointError(f"{path}: damaged RNG state ({what}); the checkpoint cannot be resumed exactly, "
                               "restore the file or resume from another checkpoint")

    if not isinstance(s, dict) or not {"python", "numpy", "torch"} <= s.keys():
        raise bad("needs python, numpy and torch states")
    py = s["python"]
    if not (isinstance(py, list) and len(py) == 3 and type(py[0]) is int and _uints(py[1], 32, 625)
            and py[1][-1] <= 624 and (py[2] is None or type(py[2]) is float)):
        raise bad("python: [version, 625 words, gauss]")
    npy = s["numpy"]
    if not (isinstance(npy, list) and len(npy) == 5 and npy[0] == "MT19937" and _uints(npy[1], 32, 624)
            and type(npy[2]) is int and 0 <= npy[2] <= 624 and npy[3] in (0, 1) and type(npy[4]) is float):
        raise bad("numpy: ['MT19937', 624 words, position, has_gauss, gauss]")
    if not _uints(s["torch"], 8, torch.get_rng_state().numel()):
        raise bad(f"torch: {torch.get_rng_state().numel()} bytes")
    cuda = s.get("cuda", [])
    if not (isinstance(cuda, list) and all(_uints(c, 8) and c for c in cuda)):
        raise bad("cuda: a list of byte lists")


def restore(s: dict) -> None:
    """Set every RNG to the states :func:`capture` returned (checked by :func:`check` first)."""
    version, state, gauss = s["python"]
    random.setstate((version, tuple(state), gauss))
    kind, keys, pos, has_gauss, cached = s["numpy"]
    np.random.set_state((kind, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(torch.tensor(s["torch"], dtype=torch.uint8))
    if s.get("cuda") and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([torch.tensor(c, dtype=torch.uint8) for c in s["cuda"]])
