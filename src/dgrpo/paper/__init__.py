"""Reproductions of the paper's figures: a registry of named entries (``dgrpo paper --list``)."""

from dgrpo.paper.registry import REGISTRY, SCALES, Reproduction

__all__ = ["REGISTRY", "SCALES", "Reproduction"]
