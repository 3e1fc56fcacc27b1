"""The main node's reads of its peers' round records ``rec{r}`` over the hivemind transport (heterogeneous swarms;
moved out of :mod:`dgrpo.transports.hivemind`, whose exchanges blame a missing payload: a record never blames anyone).

A record is metrics, not a message of the protocol (docs/hivemind.md, "Round records"). A reporting node posts its
record and starts its next round at once; the main reads the records for at most ``timeout_s`` / :data:`RECORD_SHARE`
(:func:`collect_at_main`), and one not in by then is read again at the main's next record (:func:`late_records`, its
sender posted it before its next round payload) or, for the run's last records, after the main posts its ``done``,
until each sender's are in or its ``done`` is (:func:`last_records`). A record still missing then is named ``missing record`` by the caller
(:mod:`dgrpo.training.records`); its sender is never declared failed for it.

Light, as the transport: the DHT is reached through the transport's ``signed`` records only.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Iterable

from dgrpo.transports.dht.rounds import call_limit

if TYPE_CHECKING:
    from dgrpo.transports.hivemind import HivemindTransport

RECORD_SHARE = 8  # a round record's wait: timeout_s / RECORD_SHARE (collect_at_main; half the payload phase)
LATE_READ_S = 0.25  # a record read again at the main's next record (one read: posted before its sender's next round)


def collect_at_main(t: "HivemindTransport", tag: str, payload: bytes, senders: Iterable[int]) -> dict[int, bytes] | None:
    """The main node ``t`` reads the payloads of live ``senders`` (round records ``rec{r}``); any other node posts its
    own and gets None. Both wait at most ``timeout_s`` / :data:`RECORD_SHARE` (review r31f H2).

    A sender whose record is not in by then is left out of the returned dict (the caller names it, ``missing
    record``) and never declared failed, under either ``on_peer_failure``. The wait is bounded because the reporting
    nodes start their next round as soon as they posted: a main that waited ``timeout_s`` for a record withheld
    started its next round that much later and was dropped (over ``timeout_s``/4 late: the no-split precondition,
    docs/hivemind.md); at most ``timeout_s``/8 keeps it within the precondition while the honest nodes' spread stays
    under ``timeout_s``/8.
    """
    deadline = time.monotonic() + t.timeout_s / RECORD_SHARE
    if not t.is_main:
        t.post(tag, payload, deadline)
        return None
    return read_records(t, tag, senders, deadline)


def late_records(t: "HivemindTransport", tag: str, senders: Iterable[int]) -> dict[int, bytes]:
    """The main node's second read of records ``tag`` :func:`collect_at_main` missed (a held sender's, review r31o
    H7; kept in the DHT for ``retention_s``): :data:`LATE_READ_S` at its next record."""
    return read_records(t, tag, senders, time.monotonic() + LATE_READ_S) if t.is_main else {}


def last_records(t: "HivemindTransport", wanted: dict[str, Iterable[int]]) -> dict[str, dict[int, bytes]]:
    """The main node ``t``'s read of the run's last records (``wanted``: tag → senders) that :func:`collect_at_main`
    missed, which no round payload follows, by the rule of ``torch.distributed`` (h31q1, docs/distributed.md "The
    record and the end of the run"): the main posts its ``done`` first (:meth:`HivemindTransport.post_done
    <dgrpo.transports.hivemind.HivemindTransport.post_done>`: it has nothing more to send, so no peer waits for it),
    then reads each sender's records until they are in or its own signed ``done`` (or ``bye``) is in (an honest node
    posts its records before it: a read after it that still misses them is the last), at most ``timeout_s`` after
    that post, the ``done`` exchange's own budget, which :meth:`~dgrpo.transports.hivemind.HivemindTransport.close`
    keeps. Before, a fixed ``timeout_s`` / 8: a reporter held late (a withheld payload, two victims held together)
    posted its last records after it and lost them at the main (``missing record``)."""
    if not t.is_main:
        return {tag: {} for tag in wanted}
    end = t.post_done() + t.timeout_s
    owed = {p: {tag for tag, s in wanted.items() if p in set(s)} for p in sorted(t.alive - {t.rank})}
    owed = {p: tags for p, tags in owed.items() if tags}
    got: dict[str, dict[int, bytes]] = {tag: {} for tag in wanted}
    delay = 0.02
    while owed:
        said = {n for tag in ("done", "bye") for n in t.signed.read(t.signed.key(tag), set(owed), call_limit(end))}
        for tag in sorted(set().union(*owed.values())):  # (read after the done marks: a record posted before is in)
            for node, (_, body, _) in t.signed.read(t.signed.key(tag), {p for p in owed if tag in owed[p]},
                                                    call_limit(end)).items():
                got[tag][node] = body
                owed[node].discard(tag)
        owed = {p: tags for p, tags in owed.items() if tags and p not in said}
        now = time.monotonic()
        if not owed or now >= end:
            break
        time.sleep(min(delay, max(0.0, end - now)))
        delay = min(delay * 1.5, 0.25)
    return got


def read_records(t: "HivemindTransport", tag: str, senders: Iterable[int], deadline: float) -> dict[int, bytes]:
    """The records ``tag`` of live ``senders`` (this node's own left out), read with back-off until they are in or
    ``deadline`` (``time.monotonic()``)."""
    want, got, delay = (set(senders) & t.alive) - {t.rank}, {}, 0.02
    while want - got.keys():
        for node, (_, body, _) in t.signed.read(t.signed.key(tag), want - got.keys(), call_limit(deadline)).items():
            got.setdefault(node, body)
        now = time.monotonic()
        if not want - got.keys() or now >= deadline:
            break
        time.sleep(min(delay, max(0.0, deadline - now)))
        delay = min(delay * 1.5, 0.25)
    return got
