"""The main rank's reads of its peers' round records ``rec{r}`` (torch.distributed; moved out of
:mod:`dgrpo.transports.storewait`, whose exchanges blame a missing payload: a record never blames anyone).

A record is metrics, not a message of the protocol. The main reads a round's records once for
:func:`~dgrpo.transports.waits.record_s` (``W / 2``) after entering ``rec{r}`` (:func:`read_records`), which keeps it
within its peers' payload window; a record still missing then is read again later (:func:`read_late`): a reporter
whose relay an attacker withheld posts its record up to ``E`` after the main moved on, and that record is still the
round's metrics (review r31o H7). Its sender keeps it served until it posted its next two records
(:meth:`DistributedTransport.collect_at_main <dgrpo.transports.distributed.DistributedTransport.collect_at_main>`).
"""

from __future__ import annotations

import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, Iterable

from dgrpo.transports.waits import extension_s, note_s, record_s

if TYPE_CHECKING:
    from dgrpo.transports.distributed import DistributedTransport
    from dgrpo.transports.storewait import StoreExchange

LATE_READ_S = 0.25  # a record read again between rounds: one read (its sender posted it before its next round payload)


def read_records(ex: "StoreExchange", tag: str, peers: Iterable[int], cap: int) -> dict[int, bytes]:
    """The main rank's read of its live ``peers``' round records ``tag`` = ``rec{r}`` (at most ``cap`` bytes, a read
    per peer at a time) until they are in or for :func:`~dgrpo.transports.waits.record_s` (``W / 2``;
    transports/waits.py says why). One not served, oversized or too slow is only left out here (read again later: :func:`read_late`; named
    ``missing record`` by the caller if it never comes), never accused nor a failed peer under either
    ``on_peer_failure`` (review r31g J5, J7). Still waiting after ``note_s``, the main serves a signed wait note of
    ``tag`` naming the senders not in yet: its peers allow its next round payload ``record_s`` more before naming it
    ``late``, and a note's extension if it misses their window (review r31g Z5l)."""
    ex.schedule.enter(tag)
    return _read(ex, tag, peers, cap, record_s(ex.wait.timeout_s), note=True)


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


def late_records(t: "DistributedTransport", tag: str, senders: Iterable[int], cap: int,
                 final: bool = False) -> dict[int, bytes]:
    """The main rank ``t``'s second read of the round records ``tag`` of live ``senders`` that :meth:`collect_at_main`
    missed: one read (:data:`~dgrpo.transports.recordreads.LATE_READ_S`) at its next record, their senders posted
    them before their next round payload; ``final`` (the last two records, no round payload follows them) until
    ``record_s + E`` after the main entered the first of them read so (``E``:
    :func:`~dgrpo.transports.waits.extension_s`, what a withheld relay costs its victim; one budget for both, one
    read at least), so the main enters ``done`` at most ``W / 2 + S`` before its peers' wait for it ends. One
    still missing fails nobody (review r31o H7)."""
    if final and t._final_until is None:  # (one budget for the run's last records, whichever read they need)
        t._final_until = t._entered.get(tag, time.monotonic()) + record_s(t.wait.timeout_s) + \
            extension_s(t.wait.timeout_s)
    wait_s = max(LATE_READ_S, t._final_until - time.monotonic() if final else 0.0)
    return read_late(t.exchanger, tag, senders, cap, wait_s)
