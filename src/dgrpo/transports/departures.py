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
signed departure a relay of that exchange carries, its own relay included (:func:`act`): a claim shown to one honest
node reaches them all in the same exchange, and every honest node drops its signer there alike. A relay counts only for
what its sender read of others (the signer's own relay could be served to some nodes only). A departure its reader
read while collecting an exchange is only noted there (:func:`later`): its signer is not waited for (then or later),
nor accused, but stays in its reader's view until the first relay of its reader that carries it: ``eq{r}`` for one
read in ``r{r}``, ``eq{r+1}`` for one read in ``eq{r}`` after its reader posted its relay there. So one point decides
for every node, whatever exchange the departure was first read in: the first relay exchange in which an honest node's
relay carries it (every honest node reads every honest relay, or accuses its sender), and the honest nodes' live
rosters, and so their quorums, never differ (review r31o H3: a departure read in ``eq{r}`` taken out at once, or one
read in ``r{r}``, made its reader alone count a live roster of 3 for an exchange or a round while the others counted
4; likewise a notice pushed to one node while its signer served everyone). A departure read in the run's last relay
exchange (or in ``done``, the shutdown's exchange) is never acted on: no relay follows; it costs nothing, there is no
round left whose roster or quorum it would change, and every node counts the signer in the last round's record alike
(a ``done`` exchange takes a departed peer out at once, unwaited: its reader's view ends there). In the first round a
start-up stop notice is decided by :mod:`dgrpo.transports.startstops` at that round's relays (every node stops, or the
signer equivocated). Only the signer's own signature counts (for this run and its launch: a notice or mark of an earlier
launch, forged, or in another's name verifies for nobody and changes nothing), so relaying can take out only a node
that said it stopped. Under ``abort`` a node that learns so stops too, naming it, and says so first (signed, pushed to
its peers: :func:`stop`), so a peer that finds it gone quotes its reason naming the signer instead of naming it alone
(review r31o H2).
"""

from __future__ import annotations

import json
import logging
import re
import time

from dgrpo.errors import PeerFailure
from dgrpo.transports.waits import slack_s

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
    relay of exchange ``tag`` carries, this node's own included (it carries what this node read before it posted:
    what its peers read there too); under ``abort``, then stop in one line naming it (:func:`stop`)."""
    said = []
    for sender, raw in sorted(reports.items()):
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
        stop(t, tag, f"{'; '.join(said)}; node {t.rank} stops too in exchange {tag!r} (swarm.on_peer_failure=abort)")


def later(ex, tag: str, said: dict[int, str]) -> None:
    """Departures (``said``: peer → what it said of itself, signed) read by ``ex`` (this node's
    :class:`~dgrpo.transports.storewait.StoreExchange`) while collecting exchange ``tag``: only noted
    (``ex.leaving``): not waited for in this exchange or the next ones (:meth:`StoreExchange.collect
    <dgrpo.transports.storewait.StoreExchange.collect>`), unaccused, still in its view (its live roster and quorums
    are its peers'), until the first relay of this node that carries it (``chan.departed``): ``eq{n}`` for one read in
    ``r{n}``, ``eq{n+1}`` for one read in ``eq{n}`` (after it posted its relay there); every node takes it out there
    alike (:func:`act`; review r31o H3). Each peer is noted (and logged) once."""
    new = {p: what for p, what in sorted(said.items()) if p not in ex.leaving}
    if not new:
        return
    ex.leaving.update(new)
    relay, n = tag.startswith("eq"), re.sub(r"\D", "", tag)  # (r{n}, eq{n}; another tag: its next relay)
    nxt = (f"eq{int(n) + 1}" if relay else f"eq{n}") if n else "its next relay"
    log.warning("%s, as this node read in exchange %r %s: not waited for; out of the swarm at every node, this one "
                "included, from exchange %r, whose relay of this node carries it",
                "; ".join(f"node {p} {what}" for p, what in new.items()), tag,
                "after it posted its relay" if relay else "before its relay", nxt)


def stop(t, tag: str, text: str) -> None:
    """Under ``abort``, stop on a peer's departure relayed in ``tag``: keep serving this node's relay until its live
    peers left the exchange (:func:`linger`: they read it and stop on the same evidence), say ``text`` (signed, pushed to
    each live peer's server: :meth:`StoreExchange.say <dgrpo.transports.storewait.StoreExchange.say>`, so a peer that
    finds this node gone quotes it: review r31o H2; before, it raised unsaid and its peers named it alone), then raise.

    Raises:
        PeerFailure: ``text``, always.
    """
    linger(t, tag, 2 * t.wait.timeout_s + slack_s(t.wait.timeout_s) + 1.0)
    t.exchanger.say(text)
    raise PeerFailure(text)


def linger(t, tag: str, wait_s: float) -> None:
    """Before this node stops on the relays of ``tag``: keep serving its own relay until each live peer says it left
    the exchange (``end/{tag}``: :meth:`WaitNotes.ended <dgrpo.transports.waits.WaitNotes.ended>`) or its server is
    gone, at most ``wait_s`` seconds, so that a slower peer reads it and stops on the same evidence instead of finding
    this node gone ("sent nothing")."""
    end, waiting = time.monotonic() + wait_s, set(t.alive) - {t.rank} - t.exchanger.leaving  # (leaving: said so)
    while waiting and time.monotonic() < end:
        waiting = {p for p in sorted(waiting) if p not in t.chan.down and t.chan.fetch(
            p, f"end/{tag}", 64, min(end, time.monotonic() + 0.5), 0.5)[0] is None}
        time.sleep(0.05 if waiting else 0.0)
