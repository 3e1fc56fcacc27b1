"""How messages move between nodes each round (the all-gather of Algorithms 1-2)."""

from __future__ import annotations

from typing import Protocol

from dgrpo.swarm.messages import Message


class Transport(Protocol):
    """All-gather of the round's messages.

    ``all_gather`` takes the messages written by the nodes this process hosts and returns every
    node's messages, ordered by node id then by the order each node sent them.
    """

    def all_gather(self, local: dict[int, list[Message]]) -> list[Message]:
        ...


class InProcessTransport:
    """Every node lives in this process: the gather is a concatenation in node order."""

    def all_gather(self, local: dict[int, list[Message]]) -> list[Message]:
        return [m for node in sorted(local) for m in local[node]]
