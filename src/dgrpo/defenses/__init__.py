"""Defenses an honest node runs on incoming completions (paper §4), registered by config ``kind``."""

from __future__ import annotations

from dgrpo.defenses import judge, outlier, replay, topk  # noqa: F401  (register the defenses)
from dgrpo.defenses.base import ACCEPT, DEFENSES, Defense, Verdict, register


def build_defense(defense_cfg, run_cfg, policy, task) -> Defense:
    """Instantiate the defense named by ``defense_cfg.kind`` for the honest ``policy``.

    Raises:
        KeyError: no defense of that kind is registered.
    """
    if defense_cfg.kind not in DEFENSES:
        raise KeyError(f"unknown defense {defense_cfg.kind!r}; known: {sorted(DEFENSES)}")
    return DEFENSES[defense_cfg.kind](defense_cfg, run_cfg, policy, task)


__all__ = ["ACCEPT", "DEFENSES", "Defense", "Verdict", "build_defense", "register"]
