"""The relay exchange ``eq{n}`` that ends a round of the distributed transport: every node relays the signed messages it
read and keeps :func:`~dgrpo.swarm.protocol.merge_views` of the relays (docs/protocol.md; split out of distributed.py,
no change)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from dgrpo.swarm.protocol import merge_views
from dgrpo.transports import departures, relay, startstops
from dgrpo.transports import payload as payload_codec
from dgrpo.transports.framing import relay_refusals, relayed
from dgrpo.transports.sidereads import settle_unnoted

if TYPE_CHECKING:
    from dgrpo.transports.distributed import DistributedTransport
    from dgrpo.types import Message

log = logging.getLogger("dgrpo.transports.distributed")


def cross_check(t: "DistributedTransport", round_idx: int, messages: "list[Message]", exchange=None) -> "list[Message]":
    """:meth:`DistributedTransport.cross_check <dgrpo.transports.distributed.DistributedTransport.cross_check>`;
    ``exchange(tag, raw)``: the relay exchange (default ``t.exchange``; clocked rounds, :mod:`dgrpo.transports.clocked`:
    read until ``B_n``, and no fellow's payload is owed)."""
    signed = [m for m in messages if m.signature is not None]
    labels = payload_codec.relay_labels(signed, t.labels, t.honest)  # (metrics only; review r31o H6)
    left: list = []
    try:  # (within its readers' cap whatever peers sent: transports/relay.py; departures: review r31n G6)
        raw = relay.build(t.rank, signed, labels, t.carriers, t.rejected,
                          departures.relayed_departures(t.chan, t.world_size), t.caps, t.world_size,
                          f"eq{round_idx}", left_out=left,
                          skipped=None if getattr(t, "skips", None) is None else t.skips.relayed(round_idx))
        reports = (exchange or t.exchange)(f"eq{round_idx}", raw)
    except (TypeError, ValueError):  # a field that is not JSON: its message fails in receive anyway
        return messages
    if left:  # (review h31r: what no honest relay carries reaches no other honest node: not in this node's set either)
        gone = {id(m) for m, _, _ in left}
        messages = [m for m in messages if id(m) not in gone]
        for m, carrier, size in left:
            t.rejected.append((carrier, f"relay: node {m.node}'s message {m.key[2:]} served by node {carrier} takes "
                                        f"{size} relay bytes past its carrier's share cap: left out of this node's "
                                        "relay and of its set"))
    limit = t.max_messages * t.world_size
    views = {n: messages if n == t.rank else relayed(raw, limit) for n, raw in reports.items()}
    t.peer_views = {n: relay_refusals(raw) for n, raw in reports.items() if n != t.rank}
    caught, merged = merge_views(t.rank, views, t.verifier, round_idx)
    if t.exchanger.first == f"r{round_idx}":  # (a start-up stop notice met in the first round: all stop alike,
        caught.update(startstops.decide(t, round_idx, reports, views))  # or its signer sent: equivocation)
    if getattr(t, "skips", None) is not None:  # (a signed skip notice and messages of one round: clocked rounds)
        caught.update({k: why for k, why in t.skips.two_faced(round_idx, reports, merged).items() if k not in caught})
    recovered = {id(m) for m in merged} - {id(m) for m in messages}
    payload_codec.take_relayed_labels({n: r for n, r in reports.items() if n != t.rank}, merged, t.labels,
                                      t.honest)
    for node, reason in caught.items():
        log.warning("rejected every message from node %d in round %d: %s", node, round_idx, reason)
        t.rejected.append((node, reason))
        t.equivocators.setdefault(node, round_idx)
    if recovered:
        log.warning("round %d: %d signed messages of nodes %s reached this node only through peers' relays "
                    "(their servers showed this node other messages?)", round_idx, len(recovered),
                    sorted({m.node for m in merged if id(m) in recovered}))
    departures.act(t, f"eq{round_idx}", reports)  # (a peer's own signed "I stopped", shown to one node: all)
    if exchange is None:  # (review r31o H1: a fellow's round payload that no other node's relay carries reached
        settle_unnoted(t.exchanger, f"eq{round_idx}", {m.node for m in merged})  # nobody in time: Schedule.unnoted_in)
    return [m for m in merged if m.node not in caught]
