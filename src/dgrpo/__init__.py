"""dgrpo: decentralised GRPO swarms, their attacks and their defenses."""

__version__ = "0.1.0"
