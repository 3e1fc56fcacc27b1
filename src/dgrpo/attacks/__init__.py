"""Attacks a malicious node can mount (paper §3), registered by config ``kind``.

The attack modules (and with them torch) load on first use, so that ``dgrpo.attacks.config`` and a
config check stay light.
"""

from __future__ import annotations

import importlib

_ATTACK_MODULES = ("code_injection", "dos", "equation", "injection")
_BASE_NAMES = ("ATTACKS", "Attack", "AttackContext", "Poison", "register")


def _base():
    """``dgrpo.attacks.base`` with every attack registered."""
    for name in _ATTACK_MODULES:
        importlib.import_module(f"dgrpo.attacks.{name}")
    return importlib.import_module("dgrpo.attacks.base")


def build_attack(attack_cfg, run_cfg):
    """Instantiate the attack named by ``attack_cfg.kind`` (an ``Attack``).

    Raises:
        KeyError: no attack of that kind is registered.
    """
    attacks = _base().ATTACKS
    if attack_cfg.kind not in attacks:
        raise KeyError(f"unknown attack {attack_cfg.kind!r}; known: {sorted(attacks)}")
    return attacks[attack_cfg.kind](attack_cfg, run_cfg)


def __getattr__(name: str):
    if name in _BASE_NAMES:
        return getattr(_base(), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [*_BASE_NAMES, "build_attack"]
