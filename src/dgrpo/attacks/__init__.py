"""Attacks a malicious node can mount (paper §3), one module per ``attack.kind``.

A new attack is one module here: its config class (a :class:`~dgrpo.attacks.base.PoisoningConfig`)
and its builder, registered with ``@register("attack", name, config=...)``. Attack modules import
only light dependencies at module level: config checks import them.
"""

from __future__ import annotations

from dgrpo.attacks.base import Attack, AttackConfig
from dgrpo.registry import Table, lookup
from dgrpo.types import AttackContext, Poison

ATTACKS = Table("attack")  # attack kind → builder


def build_attack(attack_cfg: AttackConfig, run_cfg) -> Attack:
    """Instantiate the attack ``attack_cfg.kind`` for the run ``run_cfg``.

    Raises:
        UnknownKind: no attack of that kind is registered.
    """
    return lookup("attack", attack_cfg.kind).builder(attack_cfg, run_cfg)


__all__ = ["ATTACKS", "Attack", "AttackConfig", "AttackContext", "Poison", "build_attack"]
