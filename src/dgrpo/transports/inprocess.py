"""``swarm.transport=inprocess`` (the default): every node lives in this process."""

from __future__ import annotations

import secrets
from typing import Iterable

from dgrpo.registry import register
from dgrpo.types import Message


class InProcessTransport:
    """All nodes in one process: the gather is a concatenation in node order, and this process is
    the only one (main, every node alive, nothing to agree on)."""

    def __init__(self, nodes: int):
        self.local_nodes = list(range(nodes))
        self.alive = set(self.local_nodes)
        self.failed: dict[int, str] = {}
        self.rejected: list[tuple[int, str]] = []
        self.carriers: dict[int, int] = {}  # (the swarm's route knows who delivered what in process)
        self.peer_views: dict = {}  # (one process sees everything)
        self.labels: dict[tuple, str] = {}
        self.verifier = None  # set by the run's build; signatures are checked by the swarm
        self.first_round = 0

    @property
    def is_main(self) -> bool:
        return True

    def all_gather(self, local: dict[int, list[Message]]) -> list[Message]:
        return [m for node in sorted(local) for m in local[node]]

    def gather_values(self, tag: str, value: str, timeout_s: float | None = None) -> dict[int, str]:
        return {self.local_nodes[0]: value}

    def agree(self, tag: str, value: str) -> str:
        return value

    def collect_at_main(self, tag: str, payload: bytes, senders: Iterable[int]) -> dict[int, bytes] | None:
        return {}

    def late_records(self, tag: str, senders: Iterable[int]) -> dict[int, bytes]:
        return {}

    def last_records(self, wanted: dict[str, Iterable[int]]) -> dict[str, dict[int, bytes]]:
        return {tag: {} for tag in wanted}

    def check_startup(self, protocol, timeout_s: float) -> str:
        return secrets.token_hex(16)  # one process: its nodes share one config by construction; a fresh launch id

    def starts_at(self, first: int) -> None:
        """Nothing: one process, no clock to keep."""

    def exchanged_keys(self):
        """None: one process makes every node's key (:func:`dgrpo.training.build.build_protocol`)."""
        return None

    def announce_stop(self, reason: str) -> None:
        """Nothing: every node of this process stops with it."""

    def close(self) -> None:
        pass


@register("transport", "inprocess")
def inprocess_transport(cfg, resuming: bool = False) -> InProcessTransport:
    """The in-process transport of a run config (``resuming``: the run continues from a checkpoint)."""
    return InProcessTransport(cfg.swarm.nodes)
