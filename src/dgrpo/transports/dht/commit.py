"""The commit step that ends a message round of the hivemind transport: all nodes keep the same messages.

Reads of a DHT are not atomic: a payload that arrives near the deadline may be seen by some nodes
and not by others, and a malicious sender may show peers different payloads under its one subkey
(its record is replaced between reads: equivocation). So after the exchange ``r{round}`` every
node publishes its view, ``v{round}``: a digest of each payload it kept (``sha256(sender's key |
payload)``). A payload is kept only if every peer's view lists it with the same digest; the others
are dropped by every node alike and their senders declared failed (``swarm.on_peer_failure``). A
node whose own payload is missing from a peer's view was late: it leaves with :class:`PeerFailure`.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING

from dgrpo.errors import PeerFailure

if TYPE_CHECKING:
    from dgrpo.transports.hivemind import HivemindTransport


def commit(t: "HivemindTransport", round_idx: int, payloads: dict[int, bytes]) -> dict[int, bytes]:
    """Keep the payloads every peer's view lists with the same digest (module docstring).

    Raises:
        PeerFailure: this node is missing from a peer's view, or (abort) a payload was dropped.
    """
    digests = {n: hashlib.sha256(t.roster.get(n, "").encode() + b"|" + body).hexdigest()[:32]
               for n, body in payloads.items()}
    views = t.exchange(f"v{round_idx}", json.dumps({str(n): d for n, d in digests.items()}).encode())
    dropped: dict[int, str] = {}
    for peer in sorted(views.keys() - {t.rank}):
        try:
            view = json.loads(views[peer])
        except (ValueError, RecursionError):
            view = None
        if not isinstance(view, dict):
            t.declare_failed([peer], f"v{round_idx}", why="sent a malformed view")
            continue
        if view.get(str(t.rank)) != digests[t.rank]:
            t.alive.discard(t.rank)
            raise PeerFailure(f"node {t.rank} was declared failed by its peers in exchange 'r{round_idx}': node {peer} "
                              f"did not receive its messages within swarm.timeout_s={t.timeout_s:g}s (stalled?); "
                              "leaving the swarm")
        for node in digests.keys() - dropped.keys():
            if view.get(str(node)) != digests[node]:
                dropped[node] = (f"was missed by node {peer}" if str(node) not in view else
                                 f"showed node {peer} another payload than this node received (equivocation)")
    for node, why in sorted(dropped.items()):
        t.declare_failed([node], f"r{round_idx}", why=why)
    return {n: b for n, b in payloads.items() if n not in dropped}
