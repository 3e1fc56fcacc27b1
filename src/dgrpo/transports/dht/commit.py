"""The commit step that ends a message round of the hivemind transport: the nodes keep the same messages,
and no lone node can get another dropped (issue 31).

Reads of a DHT are not atomic: a payload that arrives near the deadline may be seen by some nodes
and not by others, and a malicious sender may show peers different payloads under its one subkey
(its record replaced between reads: equivocation). So after the exchange ``r{round}`` every node
publishes its view, ``v{round}``: for each payload it kept, the body's SHA-256 and the sender's record
signature over it (:func:`dgrpo.transports.dht.records.signed_digest`), so a view can only list what
the sender itself signed for that key. Each node then decides for every sender ``n`` from the views
of the nodes other than ``n`` (its own included; a view entry that does not verify counts as absent
and is named under the view's sender):

* two different digests signed by ``n``: ``n`` equivocated (the proof travels in the views), dropped;
* missed by at least two of those views (one, when there is only one) and by more than half of them:
  ``n`` was late, dropped; a node that finds itself so dropped leaves the swarm;
* otherwise ``n`` is kept; a node that missed its payload reads it again (leaving if it still cannot),
  and each view that left ``n`` out is named under its sender (``accusation``), never acted on alone.

Dropped senders are declared failed (``swarm.on_peer_failure``) and named (``missing payload``,
``equivocation``). With 3 honest nodes of 4 the honest views decide alone every case where an honest
payload reached all honest nodes in time; a malicious view can tip only a payload that reached some
honest nodes and not others (a genuine fault of the network as well).
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import TYPE_CHECKING

from dgrpo.errors import PeerFailure
from dgrpo.transports.dht.records import signed_digest

if TYPE_CHECKING:
    from dgrpo.transports.hivemind import HivemindTransport


def _view(raw: bytes) -> dict | None:
    try:
        view = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return view if isinstance(view, dict) else None


def commit(t: "HivemindTransport", round_idx: int, payloads: dict[int, bytes]) -> dict[int, bytes]:
    """Keep the payloads the views vouch for (module docstring); ``payloads``: what this node read
    (its own included), their record signatures in ``t.seals[f"r{round_idx}"]``.

    Raises:
        PeerFailure: this node is dropped by its peers' views or cannot read a payload they kept, or
            (``on_peer_failure=abort``) a payload was dropped.
    """
    tag, seals = f"r{round_idx}", t.seals.get(f"r{round_idx}", {})
    key, vkey = t.key(tag), t.key(f"v{round_idx}")
    mine = {str(n): [hashlib.sha256(b).hexdigest(), seals[n].hex()] for n, b in payloads.items() if n in seals}
    views: dict[int, dict] = {}
    raws = t.exchange(f"v{round_idx}", json.dumps(mine).encode())
    for peer, raw in sorted(raws.items()):
        view = _view(raw)
        if view is None:
            t.declare_failed([peer], f"v{round_idx}", why="sent a malformed view")
        else:
            views[peer] = view
    for peer in sorted(n for n, tag_ in t.failed.items() if tag_ == f"v{round_idx}"):  # named in peers.jsonl
        t.reject(vkey, f"missing{peer}", peer, f"view: its view of exchange {tag!r} is not a JSON object" if peer in raws
                 else f"missing view: it sent no view of exchange {tag!r} within swarm.timeout_s={t.timeout_s:g}s")

    def listed(voter: int, node: int) -> str | None:
        entry = views[voter].get(str(node))
        if entry is None:
            return None
        if isinstance(entry, list) and len(entry) == 2 and signed_digest(key, node, t.roster[node], *entry):
            return entry[0]
        t.reject(vkey, f"{voter}>{node}", voter, f"view: its view of exchange {tag!r} gives node {node} a digest "
                                                  f"node {node} did not sign")
        return None

    dropped: dict[int, tuple[str, str]] = {}  # node → (rule, what it did)
    for node in sorted(t.roster):
        voters = [v for v in views if v != node]
        digests = {v: d for v in voters if (d := listed(v, node)) is not None}
        misses = [v for v in voters if v not in digests]
        if not digests and node not in payloads and node != t.rank:  # nobody holds it
            if t.failed.get(node) == tag:  # declared failed when it was missed in this round: named
                t.reject(key, f"dropped{node}", node, f"missing payload: it sent nothing for exchange {tag!r} within "
                                                      f"swarm.timeout_s={t.timeout_s:g}s")
            continue
        if len(set(digests.values())) > 1:
            dropped[node] = ("equivocation", f"signed {len(set(digests.values()))} different payloads, shown to nodes "
                                             f"{sorted(digests)} (equivocation)")
        elif voters and len(misses) >= min(2, len(voters)) and 2 * len(misses) > len(voters):
            dropped[node] = ("missing payload", f"was missed by nodes {misses}")
        else:
            for v in misses:
                t.reject(vkey, f"{v}-{node}", v, f"accusation: its view of exchange {tag!r} leaves out node {node}, "
                                                 f"whose payload nodes {sorted(digests)} list")
            if node != t.rank and node not in payloads:
                payloads[node] = _read_again(t, key, node, next(iter(digests.values())), tag)
        if node == t.rank and node in dropped:
            t.leave()
            raise PeerFailure(f"node {t.rank} was declared failed by its peers in exchange {tag!r}: it {dropped[node][1]} "
                              f"within swarm.timeout_s={t.timeout_s:g}s (stalled?); leaving the swarm")
    for node, (rule, why) in sorted(dropped.items()):
        t.reject(key, f"dropped{node}", node, f"{rule}: it {why} in exchange {tag!r}")
        if node in t.alive:
            t.declare_failed([node], tag, why=why)
    return {n: b for n, b in payloads.items() if n not in dropped}


def _read_again(t: "HivemindTransport", key: str, node: int, digest: str, tag: str) -> bytes:
    """Node ``node``'s payload under ``key`` whose SHA-256 is ``digest``, read until ``swarm.timeout_s``; it
    takes part again (this node had declared it failed when it missed it).

    Raises:
        PeerFailure: not found in time: this node cannot keep what its peers keep, so it leaves.
    """
    deadline = time.monotonic() + t.timeout_s
    while time.monotonic() < deadline:
        rec = t.read(key, {node}, min(10.0, max(0.2, deadline - time.monotonic()))).get(node)
        if rec is not None and hashlib.sha256(rec[1]).hexdigest() == digest:
            t.readmit(node)
            return rec[1]
        time.sleep(0.2)
    t.leave()
    raise PeerFailure(f"node {t.rank} could not read node {node}'s payload of exchange {tag!r}, which its peers kept, "
                      f"within swarm.timeout_s={t.timeout_s:g}s; leaving the swarm")
