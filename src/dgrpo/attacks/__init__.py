"""Attacks a malicious node can mount (paper §3), registered by config ``kind``."""

from __future__ import annotations

from dgrpo.attacks import code_injection, dos, equation, injection  # noqa: F401  (register the attacks)
from dgrpo.attacks.base import ATTACKS, Attack, AttackContext, Poison, register


def build_attack(attack_cfg, run_cfg) -> Attack:
    """Instantiate the attack named by ``attack_cfg.kind``.

    Raises:
        KeyError: no attack of that kind is registered.
    """
    if attack_cfg.kind not in ATTACKS:
        raise KeyError(f"unknown attack {attack_cfg.kind!r}; known: {sorted(ATTACKS)}")
    return ATTACKS[attack_cfg.kind](attack_cfg, run_cfg)


__all__ = ["ATTACKS", "Attack", "AttackContext", "Poison", "build_attack", "register"]
