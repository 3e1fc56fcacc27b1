"""Defenses an honest node runs on incoming completions (paper §4), one module per ``kind``.

A new defense is one module here: its config class (a :class:`~dgrpo.defenses.base.DefenseConfig`)
and its class, registered with ``@register("defense", name, config=...)``; :func:`~dgrpo.defenses.base.defend`
runs it. Defense modules import torch and models inside their methods: config checks import them.
"""

from __future__ import annotations

from dgrpo.defenses.base import Defense, DefenseConfig, defend, defense_counters
from dgrpo.registry import Table, lookup

DEFENSES = Table("defense")  # defense kind → builder


def build_defense(defense_cfg: DefenseConfig, run_cfg, policy, task) -> Defense:
    """Instantiate the defense ``defense_cfg.kind`` for the honest ``policy``.

    Raises:
        UnknownKind: no defense of that kind is registered.
    """
    return lookup("defense", defense_cfg.kind).builder(defense_cfg, run_cfg, policy, task)


__all__ = ["DEFENSES", "Defense", "DefenseConfig", "build_defense", "defend", "defense_counters"]
