"""A peer's own signed word that it stopped or left, relayed so that every node acts on it alike (review r31n G5, G6).

A start-up stop notice (:meth:`PeerChannel.announce_stop <dgrpo.transports.peerserve.PeerChannel.announce_stop>`) and a
leave mark (``{tag}/status/{k}``: :meth:`SignedStore.leave <dgrpo.transports.signedstore.SignedStore.leave>`) are
claims their signer makes about itself: "I stopped". A node that reads one for a peer missing from an exchange takes
the peer out of its own view at once, unaccused (:func:`~dgrpo.transports.startstops.met`, ``left``). Its signer can
show the claim to whom it likes, though: shown to one node only, that node alone took the signer out, the live rosters
of the honest nodes differed (one counted quorums of 3, the others of 4), and the signer, still in the others' view,
withheld its payloads from everyone and was never expelled (review r31n G6; G5 with a stop notice).

So each node relays, in its relay ``eq{r}`` (:meth:`DistributedTransport.cross_check
<dgrpo.transports.distributed.DistributedTransport.cross_check>`), the departures it read (:attr:`PeerChannel.departed
<dgrpo.transports.peerserve.PeerChannel.departed>`: the signed record), and takes out of its view every peer whose own
signed departure a relay carries: a claim shown to one honest node reaches them all in the same round, and every
honest node drops its signer alike. A relay counts only for what its sender read of others (the signer's own relay
could be served to some nodes only). In the first round a start-up stop notice is decided before this, by
:mod:`dgrpo.transports.startstops` (every node stops, or the signer equivocated). Only the signer's own signature
counts (for this run and its launch: a notice or mark of an earlier launch, forged, or in another's name verifies for
nobody and changes nothing), so relaying can take out only a node that said it stopped. Under ``abort`` a node that
learns so stops too, naming it.
"""

from __future__ import annotations

import json
import logging
import re

from dgrpo.errors import PeerFailure

log = logging.getLogger("dgrpo.transports.storewait")
_TAG = re.compile(r"(r|eq|rec)\d{1,9}|done")


def relayed_departures(chan, limit: int) -> dict[str, dict]:
    """The departures this node read (``chan.departed``), as its relay carries them (at most ``limit``)."""
    return {str(k): ev for k, ev in list(chan.departed.items())[:limit]}


def parse(raw: bytes, limit: int) -> dict[int, dict]:
    """The departures a peer's relay carries (``{"departed": {node: {"stop": record} | {"tag": t, "left": sig}}}``);
    anything malformed is skipped (each is checked by its signer's signature before use: :func:`valid`)."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return {}
    items = data.get("departed") if isinstance(data, dict) else None
    out = {}
    for k, ev in list(items.items())[:limit] if isinstance(items, dict) else []:
        if k.isdigit() and isinstance(ev, dict) and (
                (isinstance(ev.get("stop"), str) and len(ev["stop"]) <= 4096)
                or (isinstance(ev.get("tag"), str) and _TAG.fullmatch(ev["tag"]) and isinstance(ev.get("left"), str)
                    and len(ev["left"]) <= 256)):
            out[int(k)] = ev
    return out


def valid(t, node: int, ev: dict) -> str | None:
    """What ``node`` said of itself in ``ev`` if its own key signed it for this run and launch, else None."""
    if "stop" in ev:
        why = t.chan._stop_text(node, ev["stop"])
        return None if why is None else f"it stopped at start-up ({why})"
    return "it left the swarm (its signed leave mark)" if t.signed_store.valid(node, f"left|{ev['tag']}|{node}",
                                                                                 ev["left"]) else None


def act(t, tag: str, reports: dict[int, bytes]) -> None:
    """Take out of this node's view (``t``: the distributed transport) every live peer whose own signed departure a
    peer's relay of exchange ``tag`` carries (module docstring); under ``abort``, then stop in one line naming it."""
    said = []
    for sender, raw in sorted(reports.items()):
        if sender == t.rank:
            continue
        for node, ev in parse(raw, t.world_size).items():
            if node in (t.rank, sender) or node not in t.alive:  # (its own relay: it may show it to some nodes only)
                continue
            what = valid(t, node, ev)
            if what is None:
                continue
            t.chan.departed.setdefault(node, ev)
            t.exchanger._expel(node, tag, [], why=f"{what}, as node {sender}'s relay carries it")
            said.append(f"node {node} said (signed) {what}, as node {sender}'s relay carries it")
    if said and t.exchanger.on_peer_failure == "abort":
        raise PeerFailure(f"{'; '.join(said)}; node {t.rank} stops too in exchange {tag!r} (swarm.on_peer_failure=abort)")
