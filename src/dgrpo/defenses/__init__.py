"""Defenses an honest node runs on incoming completions (paper §4), one module per ``kind``.

A new defense is one module here: its config class (a :class:`~dgrpo.defenses.base.DefenseConfig`)
and its class, registered with ``@register("defense", name, config=...)``; :func:`~dgrpo.defenses.base.defend`
runs it. Defense modules import torch and models inside their methods: config checks import them.
"""

from __future__ import annotations

import logging

from dgrpo.defenses.base import STAGES, Defense, DefenseConfig, defend, defense_counters, share_verdicts
from dgrpo.errors import ConfigError
from dgrpo.registry import Table, lookup

DEFENSES = Table("defense")  # defense kind → builder
log = logging.getLogger(__name__)
_CAUTIONED: set[str] = set()  # each caution logged once a process (a swarm builds one defense per node)


def build_defense(defense_cfg: DefenseConfig, run_cfg, policy, task) -> Defense:
    """Instantiate the defense ``defense_cfg.kind`` for the honest ``policy``; each line of its config's
    :meth:`~dgrpo.defenses.base.DefenseConfig.cautions` for ``run_cfg`` is logged once a process (WARNING).

    Raises:
        UnknownKind: no defense of that kind is registered.
        ConfigError: what its builder made is no :class:`~dgrpo.defenses.base.Defense` (the fix is to
            subclass it), or its ``stage`` is none of :data:`~dgrpo.defenses.base.STAGES` (``defend``
            would never run it).
    """
    defense = lookup("defense", defense_cfg.kind).builder(defense_cfg, run_cfg, policy, task)
    if not isinstance(defense, Defense):
        raise ConfigError(f"defense kind={defense_cfg.kind}: {type(defense).__name__} does not subclass "
                          "dgrpo.defenses.base.Defense; declare it as `class "
                          f"{type(defense).__name__}(Defense)`")
    if defense.stage not in STAGES:
        raise ConfigError(f"defense kind={defense_cfg.kind}: stage={defense.stage!r} is none of "
                          f"{', '.join(map(repr, STAGES))}; set stage to one of them (defend would never run it)")
    for line in defense_cfg.cautions(run_cfg):
        if line not in _CAUTIONED:
            _CAUTIONED.add(line)
            log.warning(line)
    return defense


def build_defenses(defense_cfgs, run_cfg, policy, task) -> list[Defense]:
    """One node's defenses, in config order (:func:`build_defense` each). A kind listed again is named apart
    (``judge``, ``judge_2``, ...): its verdicts, counters and seconds (``defense/judge_2/*``,
    ``time/defense/judge_2``) would otherwise be written over by the first one's in the round's record."""
    defenses, seen = [], {}
    for cfg in defense_cfgs:
        defense = build_defense(cfg, run_cfg, policy, task)
        seen[defense.name] = seen.get(defense.name, 0) + 1
        if seen[defense.name] > 1:
            defense.name = f"{defense.name}_{seen[defense.name]}"
        defenses.append(defense)
    return defenses


__all__ = ["DEFENSES", "Defense", "DefenseConfig", "build_defense", "build_defenses", "defend", "defense_counters",
           "share_verdicts"]
