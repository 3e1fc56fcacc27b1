"""The main rank's reads of its peers' round records ``rec{r}`` (torch.distributed; moved out of
:mod:`dgrpo.transports.storewait`, whose exchanges blame a missing payload: a record never blames anyone).

A record is metrics, not a message of the protocol. The main reads a round's records once for
:func:`~dgrpo.transports.waits.record_s` (``W / 2``) after entering ``rec{r}`` (:func:`read_records`), which keeps it
within its peers' payload window; a record still missing then is read again later: a reporter whose relay an attacker
withheld posts its record up to the round's end after the main moved on, and that record is still the round's metrics
(review r31o H7). At the main's next record one short read (:func:`read_late`); the run's last two records, which no
round payload follows, after the main posted its ``done``, until each sender's are in or its own ``done`` is served
(:func:`last_records`). A sender keeps its records served until it posted its next two
(:meth:`DistributedTransport.collect_at_main <dgrpo.transports.distributed.DistributedTransport.collect_at_main>`),
its last ones until it leaves.
"""

from __future__ import annotations

import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, Iterable

from dgrpo.transports.ranklife import post_done
from dgrpo.transports.waits import note_s, record_s

if TYPE_CHECKING:
    from dgrpo.transports.distributed import DistributedTransport
    from dgrpo.transports.storewait import StoreExchange

LATE_READ_S = 0.25  # a record read again between rounds: one read (its sender posted it before its next round payload)
DONE_CAP = 64  # bytes read of a peer's done mark (b"1")


def read_records(ex: "StoreExchange", tag: str, peers: Iterable[int], cap: int,
                 wait_s: float | None = None) -> dict[int, bytes]:
    """The main rank's read of its live ``peers``' round records ``tag`` = ``rec{r}`` (at most ``cap`` bytes, a read
    per peer at a time) until they are in or for :func:`~dgrpo.transports.waits.record_s` (``W / 2``;
    transports/waits.py says why). One not served, oversized or too slow is only left out here (read again later: :func:`read_late`; named
    ``missing record`` by the caller if it never comes), never accused nor a failed peer under either
    ``on_peer_failure`` (review r31g J5, J7). Still waiting after ``note_s``, the main serves a signed wait note of
    ``tag`` naming the senders not in yet: its peers allow its next round payload ``record_s`` more before naming it
    ``late``, and a note's extension if it misses their window (review r31g Z5l). ``wait_s``: read that long instead
    (clocked rounds: :data:`LATE_READ_S`, review h31r2: the read lies in the clock's compute window, where a reporter
    that withheld its record held the main ``W / 2``, 224 s at the default timeout_s, every round, past its next post
    deadline: it skipped the round and was expelled; a record not in is read again later, as here)."""
    ex.schedule.enter(tag)
    return _read(ex, tag, peers, cap, record_s(ex.wait.timeout_s) if wait_s is None else wait_s, note=wait_s is None)


def read_late(ex: "StoreExchange", tag: str, peers: Iterable[int], cap: int, wait_s: float) -> dict[int, bytes]:
    """The records ``tag`` of live ``peers`` that :func:`read_records` missed, read again for at most ``wait_s``
    (between rounds :data:`LATE_READ_S`; at the end of the run longer: the last round's records have no next round to
    come with). No note, no schedule: the exchange ``tag`` is over for the round's deadlines; a record missing
    still fails nobody."""
    return _read(ex, tag, peers, cap, wait_s, note=False)


def _read(ex: "StoreExchange", tag: str, peers: Iterable[int], cap: int, wait_s: float, note: bool) -> dict[int, bytes]:
    start = time.monotonic()
    deadline, noted = start + wait_s, not note
    want, got = sorted((set(peers) & ex.alive) - {ex.rank}), {}
    reads: dict[int, Future] = {}
    retry: dict[int, float] = {}  # peer → when to ask again (not served yet)
    with ThreadPoolExecutor(max_workers=max(1, len(want)), thread_name_prefix=f"dgrpo-rec-{ex.rank}") as pool:
        while len(got) < len(want):
            now = time.monotonic()
            for p in want:
                if p not in got and p not in reads and now < deadline and now >= retry.get(p, 0.0):
                    reads[p] = pool.submit(ex.chan.fetch, p, f"{tag}/data/{p}", cap, deadline)
            if not reads and now >= deadline:
                break
            if not noted and now - start >= note_s(ex.wait.timeout_s):
                noted = True  # (still waiting: said, signed, before this node posts its next round late)
                ex.notes.note(tag, [p for p in want if p not in got])
            pause = min(0.05, max(0.01, deadline - now))
            if reads:
                wait(list(reads.values()), timeout=pause, return_when=FIRST_COMPLETED)
            else:
                time.sleep(pause)
            for p in [p for p, f in reads.items() if f.done()]:
                data, _ = reads.pop(p).result()
                if data is not None:
                    got[p] = data
                retry[p] = time.monotonic() + 0.05
    return got


def late_records(t: "DistributedTransport", tag: str, senders: Iterable[int], cap: int) -> dict[int, bytes]:
    """The main rank ``t``'s second read of the round records ``tag`` of live ``senders`` that :meth:`collect_at_main`
    missed, at its next record: one read (:data:`LATE_READ_S`), their senders posted them before their next round
    payload. One still missing fails nobody (review r31o H7)."""
    return read_late(t.exchanger, tag, senders, cap, LATE_READ_S)


def last_records(t: "DistributedTransport", wanted: dict[str, Iterable[int]],
                 caps: dict[str, int]) -> dict[str, dict[int, bytes]]:
    """The main rank ``t``'s read of the run's last round records that :meth:`collect_at_main` missed (``wanted``: tag
    → senders; ``caps``: tag → bytes), which no round payload follows: it posts its ``done`` first
    (:func:`~dgrpo.transports.ranklife.post_done`: it has nothing more to send, so no peer waits for it), then reads
    each sender's records until they are in or the sender's own ``done`` is served (an honest node posts its records
    before it, so then none more comes: read once more, never later), at most ``timeout_s`` after that post (the
    ``done`` exchange's own budget, which :func:`~dgrpo.transports.ranklife.close` keeps) plus one read. Meanwhile it
    reads, acknowledged, the ``done`` of every other live peer (kept in ``t.done_got``: a peer serves it until each
    live peer acknowledged it, at most ``min(timeout_s, 10)`` s, so one the main reads later may be gone); a sender's
    ``done`` is looked at unacknowledged until its records are settled (it keeps serving them). Review r31o H7: two
    victims of a withheld relay, held to their round's end, posted the last two records after a fixed budget."""
    post_done(t)
    if t.done_at is None:  # (expelled at that post: no reads, close says why)
        return {tag: {} for tag in wanted}
    ex, chan = t.exchanger, t.chan
    end = t.done_at + t.wait.timeout_s
    live = sorted(ex.alive - {ex.rank})
    owed = {p: tags for p in live if (tags := [tag for tag, s in wanted.items() if p in set(s)])}
    got: dict[str, dict[int, bytes]] = {tag: {} for tag in wanted}
    reads: dict[int, Future] = {}
    retry: dict[int, float] = {}  # peer → when to ask again
    pool = ThreadPoolExecutor(max_workers=max(1, len(live)), thread_name_prefix=f"dgrpo-last-{ex.rank}")
    try:
        while owed or reads:
            now = time.monotonic()
            for p in live if now < end and owed else ():
                if p in reads or now < retry.get(p, 0.0) or p not in owed and p in t.done_got:
                    continue
                reads[p] = (pool.submit(_owed, chan, p, owed[p], caps, end) if p in owed else
                            pool.submit(chan.fetch, p, f"done/data/{p}", DONE_CAP, end))
            if not reads and (now >= end or not owed):
                break
            if reads:
                wait(list(reads.values()), timeout=0.05, return_when=FIRST_COMPLETED)
            else:
                time.sleep(min(0.05, max(0.01, end - now)))
            for p in [p for p, f in reads.items() if f.done()]:
                result = reads.pop(p).result()
                retry[p] = time.monotonic() + 0.05
                if p not in owed:
                    if result[0] is not None:
                        t.done_got[p] = result[0]
                    continue
                recs, settled = result
                for tag, data in recs.items():
                    got[tag][p] = data
                owed[p] = [tag for tag in owed[p] if tag not in recs]
                if settled or not owed[p]:
                    del owed[p]
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    return got


def _owed(chan, p: int, tags: list[str], caps: dict[str, int], end: float) -> tuple[dict[str, bytes], bool]:
    """One look at peer ``p``'s records ``tags``: (those served, whether the rest never comes: its ``done`` is served,
    looked at without acknowledgement, and a read after it found them missing still)."""
    recs = {}
    for tag in tags:
        data, _ = chan.fetch(p, f"{tag}/data/{p}", caps[tag], end)
        if data is not None:
            recs[tag] = data
    if len(recs) == len(tags):
        return recs, True
    done, _ = chan.fetch(p, f"done/data/{p}", DONE_CAP, end, ack=False)
    if done is None:
        return recs, False
    last = max(end, time.monotonic() + LATE_READ_S)  # (posted before its done: in now if ever; one read past end)
    for tag in [x for x in tags if x not in recs]:
        data, _ = chan.fetch(p, f"{tag}/data/{p}", caps[tag], last)
        if data is not None:
            recs[tag] = data
    return recs, True
