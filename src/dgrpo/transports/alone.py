"""A node left alone: no live peer's server answers and none served the exchange (review r31k F5).

A node back from a stall after its peers expelled it and finished learns its expulsion from their signed
accusations and proofs (:mod:`dgrpo.transports.accusations`): served by their own servers while they run, else from
their signed copies in the store (``accuse/by/{k}``, ``expel/by/{k}``). Anyone may delete those copies, so a node
that finds every live peer's server gone and no payload of its exchange cannot tell "they expelled me and left"
from "they all crashed". Either way it is no longer in a swarm: it must not train on alone (a one-node split,
reported as a success). :func:`alone_line` is the one line it stops with, under either ``on_peer_failure``
(:func:`stop_if_alone`).
"""

from __future__ import annotations

import logging

from dgrpo.errors import PeerFailure

log = logging.getLogger("dgrpo.transports.storewait")  # (one logger for the exchange and its blame)


def stop_if_alone(ex, tag: str, live: list[int], missing: list[int], got: bool) -> None:
    """At the end of a round exchange ``tag`` of :class:`~dgrpo.transports.storewait.StoreExchange` ``ex``: raise the
    store's loss (:meth:`SignedStore.probe`) if a peer is still missing (its leave mark, there, is unreadable: review
    r31k F8), and :func:`alone_line` if every one of the ``live`` peers it waited for is ``missing``, its server gone,
    and none served anything (``got``); this node then leaves ``ex.alive``."""
    if missing and ex.store.lost is not None:
        raise ex.store.lost
    line = None if missing != live else alone_line(ex.rank, tag, live, ex.chan.down, got, ex.schedule.posted, ex.wait,
                                                   ex.bound(tag), ex.bound(None))
    if line is not None:
        ex.alive.discard(ex.rank)
        raise PeerFailure(line)


def alone_line(rank: int, tag: str, peers: list[int], down: dict[int, float], got: bool, posted: dict[str, float],
               wait, within: tuple[str, float] | None = None, stall: tuple[str, float] | None = None) -> str | None:
    """The line this node stops with if it is alone in exchange ``tag``, else None.

    Args:
        peers: the live peers this node waited for in ``tag`` (every live one but itself).
        down: node → when its server last failed to answer (:attr:`PeerChannel.down`).
        got: whether any peer served anything in ``tag`` (a payload, or an oversized or slow answer).
        posted: exchange → when this node posted it (:attr:`Schedule.posted`): a gap between its two newest posts
            longer than the timeout is a stall.
        wait: the transport's :class:`~dgrpo.transports.signedstore.Wait` (``timeout_s``, ``limit_name``).
        within: (setting, seconds) that bounds ``tag`` (default: the wait's; clocked rounds: ``direct_s`` or
            ``relay_s``, :meth:`StoreExchange.bound`).
        stall: (setting, seconds) a gap between two posts must exceed to be a stall (default: the wait's; clocked
            rounds: ``round_s``).
    """
    if not peers or got or any(p not in down for p in peers):
        return None
    (limit, timeout_s), posts = within or (wait.limit_name, wait.timeout_s), sorted(posted.values())
    stall_name, stall_s = stall or (wait.limit_name, wait.timeout_s)
    gap_s = posts[-1] - posts[-2] if len(posts) > 1 else None
    who = f"node{'s' if len(peers) > 1 else ''} {', '.join(map(str, peers))}"
    if gap_s is not None and gap_s > stall_s:  # (it stalled past its peers' deadline: they most likely expelled it)
        why = (f"node {rank} stalled {gap_s:.0f} s between two posts, more than {stall_name}={stall_s:g}s: its peers "
               "most likely declared it failed and finished without it (their proofs unread here)")
    else:
        why = f"{who} crashed or left"
    return (f"node {rank} is alone in exchange {tag!r}: no server of its live peers ({who}) answers and none served "
            f"the exchange within {limit}={timeout_s:g}s; {why}; node {rank} is no longer in a swarm and stops rather "
            "than train alone")


def lone_accuser(ex, tag: str, accusers: list[int]) -> None:
    """In an exchange ``tag`` of 2 live nodes, where the one peer is the quorum (:func:`~dgrpo.transports.accusations.
    quorum`), that peer accused this node: its word against this node's, and nothing tells them apart (issue 31 point
    5: a lone accusation is attributed to its signer; task h31k item 2). This node takes the accuser for the failed
    peer: named under it (``accusation`` in peers.jsonl), out of ``ex.alive`` (:class:`~dgrpo.transports.storewait.
    StoreExchange`), and this node goes on alone under ``continue``, or stops in one line naming it under
    ``abort``. Before, the honest node of a swarm of 2 whose peer accused it left the swarm ("declared failed by its
    peers", exit 3) and the accuser was named nowhere. An honest accuser of a node that really stalled meets the same
    rule there: each goes on alone (a swarm of 2 cannot tell a stalled node from a false accuser).

    Raises:
        PeerFailure: ``on_peer_failure`` is ``abort`` (names the accuser).
    """
    for accuser in accusers:
        if accuser not in ex.alive or accuser == ex.rank:
            continue
        why = (f"node {accuser} accused node {ex.rank} of missing exchange {tag!r} alone in a swarm of 2, where one "
               f"accuser is the quorum: its word against node {ex.rank}'s; node {ex.rank} takes node {accuser} for "
               "the failed peer")
        log.warning("%s", why)
        ex.refuse(accuser, f"accusation: {why}")
        ex._expel(accuser, tag, [], why=f"it accused node {ex.rank} alone in a swarm of 2")
        if ex.on_peer_failure == "abort":
            raise PeerFailure(f"{why}; aborted (set swarm.on_peer_failure=continue to go on without it)")
