"""The main node's reads of its peers' round records ``rec{r}`` over the hivemind transport (heterogeneous swarms;
moved out of :mod:`dgrpo.transports.hivemind`, whose exchanges blame a missing payload: a record never blames anyone).

A record is metrics, not a message of the protocol (docs/hivemind.md, "Round records"). A reporting node posts its
record and starts its next round at once; the main reads the records for at most ``timeout_s`` / :data:`RECORD_SHARE`
(:func:`collect_at_main`), and one not in by then is read again at the main's next record (:func:`late_records`, its
sender posted it before its next round payload) or, for the run's last records, at the end (:func:`last_records`). A record still missing then is named ``missing record`` by the caller
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
    """The main node's read of the run's last records (``wanted``: tag → senders, no round payload between them)
    :func:`collect_at_main` missed: one wait for all, ``timeout_s`` / :data:`RECORD_SHARE` (the main's ``done`` at
    most ``timeout_s`` / 4 late, as at a round's record)."""
    if not t.is_main:
        return {tag: {} for tag in wanted}
    deadline = time.monotonic() + t.timeout_s / RECORD_SHARE
    return {tag: read_records(t, tag, senders, deadline) for tag, senders in wanted.items()}


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
