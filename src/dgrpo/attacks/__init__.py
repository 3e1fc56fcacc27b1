"""Attacks a malicious node can mount (paper §3), one module per ``attack.kind``.

A new attack is one module here: its config class (a :class:`~dgrpo.attacks.base.PoisoningConfig`)
and its class (a subclass of :class:`~dgrpo.attacks.base.Attack`), registered with
``@register("attack", name, config=...)``. Attack modules import only light dependencies at module
level: config checks import them.
"""

from __future__ import annotations

from dgrpo.attacks.base import Attack, AttackConfig, routed_elsewhere
from dgrpo.errors import ConfigError
from dgrpo.registry import Table, lookup
from dgrpo.types import AttackContext, Poison

ATTACKS = Table("attack")  # attack kind → builder


def build_attack(attack_cfg: AttackConfig, run_cfg) -> Attack:
    """Instantiate the attack ``attack_cfg.kind`` for the run ``run_cfg``.

    Raises:
        UnknownKind: no attack of that kind is registered.
        ConfigError: what its builder made is no :class:`~dgrpo.attacks.base.Attack` (the class that
            declares what the swarm does for an attack, with defaults: the fix is to subclass it); or an attack that
            declares ``routes`` on a transport other than ``inprocess`` (:func:`~dgrpo.attacks.base.routed_elsewhere`:
            the config check reads ``routes`` on a registered class, a builder function carries none, review r31h).
    """
    attack = lookup("attack", attack_cfg.kind).builder(attack_cfg, run_cfg)
    if not isinstance(attack, Attack):
        raise ConfigError(f"attack.kind={attack_cfg.kind}: {type(attack).__name__} does not subclass "
                          "dgrpo.attacks.base.Attack; declare it as `class "
                          f"{type(attack).__name__}(Attack)` (its defaults: an attack that sends what it writes)")
    transport = run_cfg.swarm.transport
    if attack.routes and transport != "inprocess":  # (what the swarm reads: Swarm.route, in process only)
        raise ConfigError(routed_elsewhere(attack_cfg.kind, transport))
    return attack


__all__ = ["ATTACKS", "Attack", "AttackConfig", "AttackContext", "Poison", "build_attack"]
