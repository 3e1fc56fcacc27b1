"""The distributed transport's wait loop reads nothing but through its reader pool (issue 31, review r31j F3, F4, F7).

:meth:`StoreExchange.collect <dgrpo.transports.storewait.StoreExchange.collect>` waits for its peers' payloads with
one bounded read per peer in a thread pool, so a slow server holds up only its own reads. Its other reads used to run
in the loop's own thread, each bounded but not their sum: a peer's wait notes (1 s a read, again on every pass),
every peer's accusations (1 s), the store's stop notice and leave mark of a peer not served yet (whole values: the
c10d store has no ranged get, and ``append`` grows a value without bound). A rank that withheld its payload from one
reader and trickled its notes to it held that reader's round for seconds, so the honest nodes truthfully accused it
of a late relay and, with the attacker, expelled it (F3); a rank that appended 48 MiB under keys honest nodes never
write made every honest retry pull them through the store (F7). Now:

* :class:`SideReads`: a pending peer's wait notes are read in the pool from ``_NOTE_LEAD_S`` before its deadline,
  each read ending by that deadline (at least ``_NOTE_MIN_S``), so the result is in when the deadline comes and a
  trickled note costs the reader nothing past it (at most one poll); the main rank's note of its round records is read
  as its late round payload comes (:meth:`SideReads.ask_held`); a peer not served yet has its stop notice and leave
  mark read in the pool too, at most every ``_GONE_EVERY_S`` (the loop's own thread only checks the store is there:
  a ``check``, whose answer is a bool).
* :class:`StoreCopies`: every read of a value a peer may write in the store (``stop/{k}``, ``{tag}/status/{k}``,
  ``why/{k}``, ``accuse/by/{k}``) goes through one store client of its own (cloned: a long get never holds the
  transport's own client), one at a time. Of a value over ``COPY_CAP`` bytes (honest ones are under 4 KiB: junk
  some rank put there; anyone can write any key of the store, so nobody is named for it, logged once) only its
  first and last ``COPY_CAP / 2`` bytes are returned, so the owner's signed lines are still found whether junk was
  put before them (an appended line is last) or after them (review r31k F4: before, the value was dropped and that
  key family of its owner never read again, so 65 KiB of junk appended once to ``why/{k}`` hid the owner's stop
  reason for the run), though not both: of junk over ``COPY_CAP / 2`` on each side the middle is never read (review
  r31m F1; a stop reason is pushed to its peers' servers too, where no rank can bury it: :mod:`dgrpo.transports.stopwhy`);
  and that family of that owner is read again no sooner than ``_BLOATED_FIRST_S`` later,
  the wait doubling at each oversized read up to ``_BLOATED_MAX_S`` (a read of it asked sooner is None). The store
  has no ranged get and cannot say a value's size first, so an oversized read is pulled whole: that is the cost the
  wait bounds (review r31j F7: bloated keys read whole on every retry stretched rounds), per reader, owner and
  family; what is parsed of it is at most ``COPY_CAP`` bytes.
* Accusations are read in the ledger's own threads (:meth:`AccusationLedger.refresh
  <dgrpo.transports.accusations.AccusationLedger.refresh>`).
"""

from __future__ import annotations

import datetime
import logging
import re
import threading
import time
from concurrent.futures import Future
from typing import Callable

from dgrpo.transports.waits import window_s

log = logging.getLogger("dgrpo.transports.storewait")  # (one logger for the exchange and its blame)

COPY_CAP = 1 << 16  # bytes: a store copy over this is junk (honest leave marks, notices, reasons are under 4 KiB)
_BLOATED_FIRST_S, _BLOATED_MAX_S = 0.5, 8.0  # an owner's key family read oversized: read again after this, doubling
_NOTE_LEAD_S = 0.5  # a pending peer's wait notes are read from this long before its deadline
_NOTE_MIN_S = 0.25  # a note read gets at least this long (one poll), its deadline passed or not
_NOTE_GAP_S = 0.2  # a note read that found none is repeated after this long, until the peer's deadline
_GONE_EVERY_S = 0.5  # a peer not served: its stop notice and leave mark read at most this often


class StoreCopies:
    """Reads of values peers write in the shared store, bounded as far as the store allows (module docstring).

    Args:
        rank: this node (named in log lines).
        store: the c10d store (the ``dgrpo/`` ``PrefixStore``); reads go through a clone of its client.
    """

    def __init__(self, rank: int, store):
        self.rank, self.store = rank, store
        self.junk: dict[tuple[int, str], tuple[float, float]] = {}  # (owner, key family) read oversized → (not read
        #                                                              again before this monotonic time, the wait)
        self._lock = threading.Lock()
        self._client = None

    def read(self, owner: int, key: str, deadline: float) -> bytes | None:
        """The store's value of ``key`` (``owner``'s copy); over ``COPY_CAP`` bytes, its first and last ``COPY_CAP /
        2`` bytes joined by a newline (module docstring); None: absent, deleted meanwhile, its family of ``owner``
        read oversized less than its wait ago, the store gone, or waited for past ``deadline`` (a get begun then has
        at least 0.5 s)."""
        family = re.sub(r"\d+", "#", key)
        if time.monotonic() < self.junk.get((owner, family), (0.0, 0.0))[0]:
            return None
        with self._lock:
            try:
                if self._client is None:
                    try:
                        self._client = self.store.clone()
                    except Exception:  # noqa: BLE001 - a store without clone (tests' HashStore): its own client
                        self._client = self.store
                c = self._client
                if not c.check([key]):
                    return None
                c.set_timeout(datetime.timedelta(seconds=max(0.5, deadline - time.monotonic())))
                raw = c.get(key)
            except Exception:  # noqa: BLE001 - deleted between the check and the get, or the store is gone
                return None
        if len(raw) > COPY_CAP:
            if (owner, family) not in self.junk:
                log.warning("node %d: the store's %s holds %d bytes (over %d: junk some rank wrote there, which the "
                            "store cannot name); only its first and last %d bytes are read, node %d's values there "
                            "at most every %g-%g s", self.rank, key, len(raw), COPY_CAP, COPY_CAP // 2, owner,
                            _BLOATED_FIRST_S, _BLOATED_MAX_S)
            wait = min(_BLOATED_MAX_S, 2 * self.junk[(owner, family)][1]) if (owner, family) in self.junk else \
                _BLOATED_FIRST_S
            self.junk[(owner, family)] = (time.monotonic() + wait, wait)
            return raw[: COPY_CAP // 2] + b"\n" + raw[-(COPY_CAP // 2):]
        self.junk.pop((owner, family), None)
        return raw


class SideReads:
    """One exchange's reads besides payloads, each in the exchange's reader pool (module docstring).

    Args:
        ex: the :class:`~dgrpo.transports.storewait.StoreExchange`.
        tag: the exchange.
        submit: the pool's ``submit``.
        end: the round's end (None outside a round: no wait notes are read).
    """

    def __init__(self, ex, tag: str, submit: Callable[..., Future], end: float | None, cap: int = 0):
        self.ex, self.tag, self.submit, self.end, self.cap = ex, tag, submit, end, cap
        self.owed = ex.schedule.owed_in(tag) if end is not None else set()  # fellows missed in r{n}: ask_owed
        self.owe_reads: dict[int, tuple[Future, float]] = {}  # fellow → (its r{n} read in flight, when it began)
        self.notes: dict[int, tuple[Future, float]] = {}  # peer → (its note read in flight, that read's deadline)
        self.note_at: dict[int, float] = {}  # peer → when to read its notes again
        self.hits: dict[int, tuple[tuple[str, list[int]], str | None, bool]] = {}  # peer → (its note, its stop
        #                                                                  reason, whether it names a wait of its own doing)
        self.gone: dict[int, Future] = {}  # peer → its stop notice / leave mark read in flight
        self.gone_at: dict[int, float] = {}
        self.held: dict[int, Future] = {}  # the main rank → the read of its note of rec{n-1} (ask_held)

    def ask_notes(self, peer: int, until: float, now: float) -> None:
        """Read ``peer``'s wait notes (of the exchanges it may have noted waiting in) if its deadline ``until`` is
        within ``_NOTE_LEAD_S``, none is in flight and none was found (past ``until``, only if none was read yet); the
        read ends by ``until`` (at least ``_NOTE_MIN_S`` from now) and by the round's end."""
        if (self.end is None or peer in self.hits or peer in self.notes or now < until - _NOTE_LEAD_S
                or now < self.note_at.get(peer, 0.0) or now >= until and peer in self.note_at):
            return  # (past its deadline, a peer whose notes were read is read no more: it is missed now)
        end = min(self.end, max(until, now + _NOTE_MIN_S))
        ex = self.ex
        self.notes[peer] = (self.submit(_notes_of, ex, peer, ex.schedule.noted_in(self.tag), end), end)

    def note_busy(self, peer: int) -> bool:
        """Whether a note read of ``peer`` is still in flight (it ends by its own deadline: one poll at most)."""
        return peer in self.notes

    def take_notes(self) -> None:
        """Keep the notes found by the reads that finished (:attr:`hits`); read again later where none was."""
        for peer in [p for p, (f, _) in self.notes.items() if f.done()]:
            fut, _ = self.notes.pop(peer)
            try:
                why, stop, own = fut.result()
            except Exception:  # noqa: BLE001 - the store is gone (a stop reason's copy): no note
                why, stop, own = None, None, False
            if why is not None:
                self.hits[peer] = (why, stop, own)
            else:
                self.note_at[peer] = time.monotonic() + _NOTE_GAP_S

    def note(self, peer: int) -> tuple[str, list[int]] | None:
        """``peer``'s note as found (:attr:`hits`: exchange, whom it says it waited for), or None where it buys
        nothing from this node (transports/waits.py): a wait of its own doing (:func:`own_doing`; review r31e G1,
        r31n G2); a relay late for this node's round payload alone, served since its post (an honest node late to
        post gave its withholder the extension: expelled at its next post); or, under ``abort``, it serves a signed
        stop reason (it stopped)."""
        (why, stop, own), ex = self.hits[peer], self.ex
        if own:
            return None
        if self.tag.startswith("eq") and why[0] == f"r{self.tag[2:]}" and set(why[1]) <= {ex.rank}:
            return None
        return None if stop is not None else why

    def ask_owed(self, now: float) -> None:
        """In ``eq{n}``, read the round payload ``r{n}`` of each fellow this node missed there unaccused
        (:meth:`~dgrpo.transports.waits.Schedule.owed_in`), one read each in flight, at most every 0.2 s; a fellow
        whose ``r{n}`` is served (or found oversized) was late, not missing, and owes nothing."""
        for peer, (fut, began) in list(self.owe_reads.items()):
            if fut.done():
                del self.owe_reads[peer]
                data, problem = _result(fut)
                if data is not None or (problem or "").startswith("oversize"):
                    self.owed.discard(peer)
                elif now - began < 0.2:
                    self.owe_reads[peer] = (fut, began)  # (not asked again before 0.2 s)
        for peer in sorted(self.owed - set(self.owe_reads)):
            self.owe_reads[peer] = (self.submit(self.ex.chan.fetch, peer, f"r{self.tag[2:]}/data/{peer}", self.cap,
                                                min(self.end, now + 0.5), 0.5), now)

    def settle_owed(self) -> None:
        """At the end of ``eq{n}``: read once more (within 1 s, at least one poll past the round's end) the round
        payload ``r{n}`` of each live fellow still owing it, then accuse each whose payload never came of ``r{n}``
        (review r31n G1; a quorum expels it as for any missing peer)."""
        ex, n = self.ex, self.tag[2:]
        owed = sorted(p for p in self.owed if p in ex.alive)
        if not owed:
            return
        deadline = max(min(self.end, time.monotonic() + 1.0), time.monotonic() + 0.25)
        futs = {p: self.submit(ex.chan.fetch, p, f"r{n}/data/{p}", self.cap, deadline, 1.0) for p in owed}
        for peer, fut in futs.items():
            try:
                data, problem = fut.result(timeout=max(0.0, deadline - time.monotonic()) + 0.05)
            except Exception:  # noqa: BLE001 - not in by then: not served
                data, problem = None, None
            if data is None and not (problem or "").startswith("oversize"):
                log.warning("node %d: node %d, a fellow it missed in exchange 'r%s', never served it its round "
                            "payload by the end of 'eq%s' (missing, not late): accused", ex.rank, peer, n, n)
                ex.ledger.accuse(peer, f"r{n}")
                out = ex.ledger.expelled(peer)
                if out is not None:
                    ex._expel(peer, *out)

    def ask_held(self, peer: int, late: float) -> None:
        """``peer``'s round payload came ``late`` seconds after this node's post: if it is the main rank this node
        reports to and over half the payload window late, read its wait note of ``rec{n-1}`` now (within 0.25 s), for
        :meth:`StoreExchange._held <dgrpo.transports.storewait.StoreExchange._held>`."""
        ex, n = self.ex, self.tag[1:]
        if (self.end is None or not self.tag.startswith("r") or not n.isdigit() or peer != ex.record_reader
                or late <= window_s(ex.wait.timeout_s) / 2 or f"rec{int(n) - 1}" not in ex.schedule.history):
            return
        self.held[peer] = self.submit(ex.notes.waited, peer, [f"rec{int(n) - 1}"], time.monotonic() + 0.25, 0.25)

    def held_note(self, peer: int) -> bool:
        """Whether the read :meth:`ask_held` began found a note (waited for at most 0.25 s, never past the round's
        end)."""
        fut = self.held.get(peer)
        try:
            return fut is not None and fut.result(timeout=max(0.0, min(0.25, self.end - time.monotonic()))) is not None
        except Exception:  # noqa: BLE001 - not in by then (or cancelled with the pool): no note
            return False

    def ask_gone(self, peer: int, now: float, deadline: float) -> None:
        """Read, for a peer whose server did not serve the payload, its stop notice and leave mark (at most every
        ``_GONE_EVERY_S``, one read in flight)."""
        if peer in self.gone or now < self.gone_at.get(peer, 0.0):
            return
        self.gone_at[peer] = now + _GONE_EVERY_S
        self.gone[peer] = self.submit(_gone, self.ex, self.tag, peer, deadline)

    def take_gone(self) -> list[tuple[int, str, str | None]]:
        """(peer, ``stopped`` or ``left``, its stop reason) for every finished read that found one."""
        out = []
        for peer in [p for p, f in self.gone.items() if f.done()]:
            try:
                found = self.gone.pop(peer).result()
            except Exception:  # noqa: BLE001 - the store is gone: nothing found
                found = None
            if found is not None:
                out.append((peer, *found))
        return out


def settle_unnoted(ex, tag: str, carried: set[int]) -> None:
    """At the end of relay exchange ``tag`` = ``eq{n}``, its relays merged: accuse of ``r{n}`` each live fellow this
    node missed there whose note bought it no time (:meth:`~dgrpo.transports.waits.Schedule.unnoted_in`) and whose
    round payload's messages no other node's relay carries (``carried``: the senders of the merged messages,
    :func:`~dgrpo.swarm.protocol.merge_views`, where a relay's messages of its own reporter count for nothing): its
    round payload reached nobody in time (review r31o H1: served to this node after its cut, it was "late, not
    missing", yet used by nobody; a quorum expels it as for any missing peer)."""
    n = tag[2:]
    for peer in sorted(p for p in ex.schedule.unnoted_in(tag) if p in ex.alive and p not in carried):
        log.warning("node %d: node %d, a fellow it missed in exchange 'r%s' that served it no note buying it time, "
                    "had its round payload carried by no other node's relay of 'eq%s' (missing for everyone, not "
                    "late for this node only): accused", ex.rank, peer, n, n)
        ex.ledger.accuse(peer, f"r{n}")
        out = ex.ledger.expelled(peer)
        if out is not None:
            ex._expel(peer, *out)


def _result(fut: Future):
    """A finished fetch's (data, problem); (None, None) if it raised (cancelled with the pool)."""
    try:
        return fut.result()
    except Exception:  # noqa: BLE001 - cancelled or the channel closed: nothing served
        return None, None


def _notes_of(ex, peer: int, tags: list[str], end: float):
    """(peer's note, its signed stop reason under ``abort``, else None, whether the note names a wait of its own doing:
    :func:`own_doing`), read in the pool by ``end``."""
    why = ex.notes.waited(peer, tags, end, min(1.0, max(0.05, end - time.monotonic())))
    stop = None
    if why is not None and ex.on_peer_failure == "abort":
        stop = ex.notes.stop_of(peer, end, max(0.05, min(0.25, end - time.monotonic())))
    return why, stop, why is not None and own_doing(ex, peer, why, end)


def own_doing(ex, peer: int, why: tuple[str, list[int]], end: float) -> bool:
    """Whether ``peer``'s note ``why`` (exchange, whom it says it waited for there) claims a wait of its own doing,
    which buys it nothing from this node (review r31e G1, narrowed by r31n G2; transports/waits.py): it names this
    node; this node had noted waiting for ``peer`` in one of the two exchanges before ``why``'s and for nobody else
    there (this node's lateness, which ``peer`` then waited for, was ``peer``'s alone); and ``peer`` served no note
    of the exchange just before each of those (its own lateness there was no noted wait). Before r31n G2 the first
    two were enough: an attacker that made the writer late (a relay withheld: this node then waited for the writer)
    and held this node until the writer's note named it got the writer's extension refused and the writer expelled.
    Reads ``peer``'s notes of those exchanges by ``end`` (none found in time: its own doing, as before)."""
    if ex.rank not in why[1]:
        return False
    mine = ex.notes.mine
    waits = [t for t in ex.schedule.before(why[0]) if peer in mine.get(t, ())]
    if not waits or any(mine.get(t, set()) - {peer} for t in waits):  # (.get: pruned meanwhile by note)
        return False
    prior = [b for t in waits for b in ex.schedule.before(t, 1)]
    return not prior or ex.notes.waited(peer, prior, end, min(1.0, max(0.05, end - time.monotonic()))) is None


def _gone(ex, tag: str, peer: int, deadline: float):
    """(``stopped``, its reason) if ``peer`` said it stopped at start-up, (``left``, None) if it left ``tag`` (its
    leave marks as its own server serves them, else, its server gone, the store's copy); else None (read in the pool:
    :meth:`PeerChannel.stop_of`, :meth:`SignedStore.status`, :class:`StoreCopies`)."""
    chan, key = ex.chan, f"{tag}/status/{peer}"
    why = chan.stop_of(peer)
    if why is not None:
        return "stopped", why
    raw, _ = chan.fetch(peer, key, 4096, max(deadline, time.monotonic() + 0.25), 0.5)  # (served by it, or)
    if raw is None and peer in chan.down and chan.copies is not None:  # (its server gone: the store's copy)
        raw = chan.copies.read(peer, key, deadline)
    if raw is None or ex.store.status(tag, peer, deadline, raw) != "left":
        return None
    lines = raw[:4096].decode(errors="replace").splitlines()[:16] + raw[-4096:].decode(errors="replace").splitlines()[-16:]
    sig = next((x[5:] for x in lines if x.startswith("left:") and ex.store.valid(peer, f"left|{tag}|{peer}", x[5:])),
               None)  # (the mark status() found, among the same lines)
    if sig is not None:  # (its own signed word, relayed to every peer: DistributedTransport.cross_check, r31n G6)
        chan.departed.setdefault(peer, {"tag": tag, "left": sig})
    return "left", None
