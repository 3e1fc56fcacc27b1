"""A peer's start-up stop notice met in an exchange, and in the first round the one decision every node makes of it
(review r31f H10, r31h F6, r31n G5).

A rank whose start-up check or ready barrier fails says why, signed for its launch (:meth:`PeerChannel.announce_stop
<dgrpo.transports.peerserve.PeerChannel.announce_stop>`). Its peers meet that notice in an exchange (:func:`met`):

* in a start-up exchange they stop too (the ranks start together or not at all);
* in their first round exchange (its check failed after theirs passed) they only hold it: the signer is not waited
  for, unaccused, and still in this node's view, as in its peers' (:func:`hold`). Stopping there at once let one rank
  stop whom it liked: a notice is its signer's to show to whom it likes, and rank 3 pushing its notice to node 0 alone
  as it posted ``r0`` (its ``r0`` hidden from node 0) made node 0 stop alone while the others trained on with rank 3
  (review r31n G5, exit codes [3, 0, 0, 0]; with two victims one honest node trained alone with the attacker). Going
  on instead let a rank whose check an attacker failed stop alone (review r31h F6, [0, 3, 0]);
* later (a notice said that late is no start-up stop) the signer is noted, unaccused and not waited for, and taken
  out at every node alike at the first relay of this node that carries it: ``eq{n}`` if met in ``r{n}``, ``eq{n+1}``
  if met in ``eq{n}`` after this node posted its relay there (:func:`departures.later
  <dgrpo.transports.departures.later>`, review r31o H3: taken out at once, its reader alone counted a smaller live
  roster for an exchange); there every node stops (``abort``, its reason said first) or goes on without it
  (:func:`departures.act <dgrpo.transports.departures.act>`).

In the first round every node relays the notices it read in its relay ``eq{r}`` (:mod:`dgrpo.transports.departures`),
and once the relays are in each decides (:func:`decide`) from what the relays of the nodes other than the signer carry
(its own included: it carries what this node read):

* the signer's notice and no message it signed for that round: it stopped before its round; every node stops,
  naming it and quoting its signed reason, under either ``on_peer_failure`` (r31h F6's case);
* its notice and a message it signed for that round: it said it stopped and sent (equivocation): named under the
  signer (``peers.jsonl``, the log), its messages dropped and the signer out of the swarm at every node; nobody
  stops (r31n G5's case).

The signer's own relay counts for neither (it could serve it to some readers only, as :func:`merge_views
<dgrpo.swarm.protocol.merge_views>` ignores its messages there), so every honest node decides from the same evidence:
what the other nodes read and relayed.
"""

from __future__ import annotations

import logging

from dgrpo.errors import PeerFailure, StartupStop
from dgrpo.transports.departures import later, linger, parse
from dgrpo.transports.waits import slack_s

log = logging.getLogger("dgrpo.transports.storewait")


def met(ex, tag: str, stopped: dict[int, str], startup: bool) -> None:
    """Peers ``stopped`` (peer → its signed reason) met in exchange ``tag`` by ``ex`` (this node's
    :class:`~dgrpo.transports.storewait.StoreExchange`): see the module docstring.

    Raises:
        PeerFailure: a start-up exchange; or a later round exchange under ``abort`` (its reason said first).
    """
    said = "; ".join(f"node {p} stopped at start-up ({why})" for p, why in sorted(stopped.items()))
    if startup:
        raise PeerFailure(f"{said}; node {ex.rank} stops too, before round 0")
    if ex.first in (None, tag):
        return hold(ex, tag, stopped, said)
    if tag != "done":  # (out at every node, this one included, at this node's next relay: eq{n}, or eq{n+1} if read
        return later(ex, tag, {p: f"stopped at start-up ({why})" for p, why in stopped.items()})  # in eq{n}; r31o H3)
    for peer in stopped:
        ex._expel(peer, tag, [], why="it stopped at start-up")
    if ex.on_peer_failure == "abort":
        say(ex, f"{said}; node {ex.rank} stops too in exchange {tag!r} (swarm.on_peer_failure=abort)")
    log.warning("%s; going on without it from exchange %r (swarm.on_peer_failure=continue)", said, tag)


def hold(ex, tag: str, stopped: dict[int, str], said: str) -> None:
    """In this node's first round exchange: each peer of ``stopped`` noted (``ex.leaving``: not waited for, unaccused,
    unnamed yet, still in this node's view, so its live roster and quorums are its peers' in the round's relay exchange:
    review r31o H3), until :func:`decide` (the round's relays) says whether every node stops or the peer equivocated."""
    ex.leaving.update(p for p in stopped)
    log.warning("%s, as this node read in exchange %r, its first round: held until the relays of this round (all "
                "stop, unless the signer's messages of this round are relayed: equivocation)", said, tag)


def say(ex, text: str, error: type[PeerFailure] = PeerFailure) -> None:
    """Under ``abort``: say ``text`` as this node's stop reason (signed, :meth:`StopReasons.say_stop
    <dgrpo.transports.stopwhy.StopReasons.say_stop>`: its live peers quote it instead of naming it alone), then raise
    it (as ``error``). Under ``continue`` only raise."""
    if ex.on_peer_failure == "abort":
        ex.say(text)
    raise error(text)


def _sent(views: dict, signer: int, verifier, round_idx: int) -> int | None:
    """The lowest node other than ``signer`` whose view (a relay, or this node's own reads) holds a message that
    ``signer`` signed for this run, its slot and ``round_idx``; None if none does."""
    for n in sorted(views):
        if n != signer and any(m.node == signer and m.round == round_idx and m.context == verifier.context
                               and verifier.identify(m) == (signer, None) for m in views[n]):
            return n
    return None


def decide(t, round_idx: int, reports: dict[int, bytes], views: dict) -> dict[int, str]:
    """In this node's first round, once its relays ``eq{round_idx}`` are in (``reports``: node → its relay, this
    node's own included; ``views``: node → the messages it relays, this node's own reads under its rank): the
    module docstring's decision for every peer whose signed start-up stop notice the relay of a node other than
    itself carries. ``t``: the :class:`~dgrpo.transports.distributed.DistributedTransport`.

    Returns:
        signer → the reason it is named (``equivocation: …``), each out of this node's view.

    Raises:
        PeerFailure: a signer whose messages of the round no such relay carries (every node stops).
    """
    tag, notices = f"eq{round_idx}", {}  # signer → (its signed reason, the lowest node whose relay carries it)
    for sender, raw in sorted(reports.items()):
        for node, ev in parse(raw, t.world_size).items():
            if node not in (sender, t.rank) and node not in notices and isinstance(ev.get("stop"), str):
                why = t.chan._stop_text(node, ev["stop"])
                if why is not None:
                    notices[node] = (why, sender)
    sent = {s: n for s in notices if (n := _sent(views, s, t.verifier, round_idx)) is not None}
    stop = sorted(s for s in notices if s not in sent)
    if stop:
        linger(t, tag, 2 * t.wait.timeout_s + slack_s(t.wait.timeout_s) + 1.0)
        said = "; ".join(f"node {s} stopped at start-up ({notices[s][0]})" for s in stop)
        via = "; ".join(f"node {s}'s signed notice read by node {notices[s][1]} and no round-{round_idx} message of "
                        f"node {s} read by any node" for s in stop)
        say(t.exchanger, f"{said}; node {t.rank} stops too in exchange {tag!r}, its first round's relays (the ranks "
                         f"start together or not at all: {via})", StartupStop)  # (its run folder: run_dir.drop_unused)
    out = {}
    for s, n in sorted(sent.items()):
        why, by = notices[s]
        out[s] = (f"equivocation: node {s} said (signed) it stopped at start-up ({why}; read by node {by}) and "
                  f"signed round-{round_idx} messages (read by node {n})")
        t.exchanger._expel(s, tag, [], why=out[s])
    return out
