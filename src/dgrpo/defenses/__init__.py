"""Defenses an honest node runs on incoming completions (paper §4), registered by config ``kind``.

The defense modules (and with them torch) load on first use, so that ``dgrpo.defenses.config`` and
a config check stay light.
"""

from __future__ import annotations

import importlib

_DEFENSE_MODULES = ("judge", "outlier", "replay", "topk")
_BASE_NAMES = ("ACCEPT", "DEFENSES", "Defense", "Verdict", "register")


def _base():
    """``dgrpo.defenses.base`` with every defense registered."""
    for name in _DEFENSE_MODULES:
        importlib.import_module(f"dgrpo.defenses.{name}")
    return importlib.import_module("dgrpo.defenses.base")


def build_defense(defense_cfg, run_cfg, policy, task):
    """Instantiate the defense named by ``defense_cfg.kind`` for the honest ``policy`` (a ``Defense``).

    Raises:
        KeyError: no defense of that kind is registered.
    """
    defenses = _base().DEFENSES
    if defense_cfg.kind not in defenses:
        raise KeyError(f"unknown defense {defense_cfg.kind!r}; known: {sorted(defenses)}")
    return defenses[defense_cfg.kind](defense_cfg, run_cfg, policy, task)


def __getattr__(name: str):
    if name in _BASE_NAMES:
        return getattr(_base(), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [*_BASE_NAMES, "build_defense"]
