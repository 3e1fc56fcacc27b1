"""Bounded exchanges between ranks that each serve their own round data: posting, waiting, blame.

Round data never goes through the shared c10d store, where any rank can delete or overwrite any key
(issue 31, review r31b). Each rank serves its own values from its own read-only server
(:mod:`dgrpo.transports.peerserve`) and reads its peers' there:

* ``{tag}/data/{k}``: node k's payload of exchange ``tag``, served by k. A payload not whole by the deadline (not
  served, or its answer unfinished then: each read runs to the deadline) is k's doing: k is accused (signed) and is a failed peer of that round under
  ``on_peer_failure``; one over its byte cap is named (``transport``, under k), a round payload's accused
  (:mod:`dgrpo.transports.unserved`).
* ``accuse``: node j's own signed accusations, served by j (:mod:`dgrpo.transports.accusations`): k is expelled (left
  out of later exchanges, and told so when it posts) once more than half of the live roster of one exchange accused
  it in that exchange; a lone accusation expels nobody and is named under its signer.
* ``{tag}/status/{k}`` in the store: k's signed leave marks (:mod:`dgrpo.transports.signedstore`): k stopped
  on an error and will not post ``tag``.
* k's stop notice (:meth:`PeerChannel.stop_of`: pushed by k to this rank's server, or ``stop/{k}`` in the store),
  signed for k's server's launch: k stopped at start-up, unaccused, named with its reason; in a start-up exchange this
  rank stops too, in its first round exchange every node decides alike once the round's relays are in, later k is
  out at once (:mod:`dgrpo.transports.startstops`).

Every wait ends at the exchange's deadline: peers are polled at once with bounded reads
(:meth:`PeerChannel.fetch`), and a round's exchanges (``r{n}``, ``eq{n}``, wait notes' extensions included) end
within ``timeout_s`` of this node's ``r{n}`` post (:class:`~dgrpo.transports.waits.Schedule`). Start-up exchanges
(``timeout_s`` given to :meth:`DistributedTransport.gather_values`) need every rank that joined.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, Callable, Iterable

from dgrpo.errors import PeerFailure
from dgrpo.transports.accusations import AccusationLedger, quorum  # noqa: F401 (quorum: re-exported)
from dgrpo.transports.alone import lone_accuser, stop_if_alone
from dgrpo.transports.departures import later
from dgrpo.transports.framing import cap_of  # noqa: F401 (re-exported: distributed.py)
from dgrpo.transports.latenames import name_late
from dgrpo.transports.sidereads import SideReads
from dgrpo.transports.startstops import met
from dgrpo.transports.waits import Schedule, WaitNotes, note_s, slack_s
from dgrpo.transports.unserved import blame_unserved
from dgrpo.transports.witnesses import HeldBefore, Witnesses, fellow_hold

if TYPE_CHECKING:
    from dgrpo.transports.peerserve import PeerChannel
    from dgrpo.transports.signedstore import SignedStore, Wait

log = logging.getLogger(__name__)

_SLICE_S = 0.25  # longest pause between two polls of the store
_POST_WAIT_S = 0.1  # the most a post waits for its peers' accusations in flight (whether it was expelled)
STOP_GRACE_S = 3.0  # a start-up exchange, past its deadline: how long to look for a missing peer's stop notice
_WITNESS_S = 0.5  # a relay held past this node's relay post + E: the others' `end/{tag}` read from this long before


class StoreExchange:
    """Post and collect the payloads of one exchange through each rank's own server, until a deadline,
    and blame the peers that miss it (accused, expelled by a quorum, failed under ``on_peer_failure``).

    Args:
        rank: this node.
        alive / failed: the transport's live nodes and failed node → exchange (the same objects: a peer
            expelled or gone leaves ``alive`` and enters ``failed``; this node leaves ``alive`` when expelled).
        chan: this rank's :class:`~dgrpo.transports.peerserve.PeerChannel` (serves its payloads, fetches
            its peers').
        store: the :class:`~dgrpo.transports.signedstore.SignedStore` (a gone peer's signed leave marks).
        ledger: the :class:`~dgrpo.transports.accusations.AccusationLedger` (accusing, the quorum).
        wait: the transport's :class:`~dgrpo.transports.signedstore.Wait` (timeout, its setting in errors).
        on_peer_failure: ``abort`` (raise) or ``continue`` (go on without a failed peer this round).
        refuse: ``refuse(node, reason)`` records a refusal under ``node`` (``rejected`` of the all-gather).
    """

    def __init__(self, rank: int, alive: set[int], failed: dict[int, str], chan: "PeerChannel",
                 store: "SignedStore", ledger: AccusationLedger, wait: "Wait", on_peer_failure: str,
                 refuse: Callable[[int, str], None]):
        self.rank, self.alive, self.failed, self.chan = rank, alive, failed, chan
        self.store, self.ledger, self.wait, self.on_peer_failure, self.refuse = store, ledger, wait, on_peer_failure, refuse
        self.notes = WaitNotes(rank, chan, store)  # signed notes of whom this node waits for (transports/waits.py)
        self.bounds: Callable[[str | None], tuple[str, float] | None] | None = None  # clocked rounds: exchange →
        # (the setting that bounds it, seconds), named in failure lines (clocked.bound_of); None: the wait's
        chan.acks = store  # (a read of a stop reason or `done` counts only with the reader's signature: review r31f H5)
        store.serve = chan.append  # (its leave marks served by its own server too: peers read the store's once it is gone)
        self.schedule = Schedule(wait.timeout_s)  # the round's deadlines
        self.first: str | None = None  # this node's first round exchange (a start-up stop met there: startstops.py)
        self.leaving: set[int] = set()  # peers whose signed departure this node read, noted until a relay acts on it
        self.record_reader: int | None = None  # the main rank this node last posted a round record rec{n} for

    def bound(self, tag: str | None) -> tuple[str, float]:
        """(setting, seconds) that bounds exchange ``tag`` (None: a round, post to post), as failure lines name it:
        ``swarm.timeout_s`` (or the start-up limit), or on the clock ``swarm.protocol.direct_s`` / ``relay_s`` /
        ``round_s`` (task h31k: the clocked lines said ``within swarm.timeout_s``)."""
        named = None if self.bounds is None else self.bounds(tag)
        return named if named is not None else (self.wait.limit_name, self.wait.timeout_s)

    def limit(self, tag: str | None) -> str:
        """``setting=seconds`` of :meth:`bound`."""
        name, value = self.bound(tag)
        return f"{name}={value:g}s"

    # ------------------------------------------------------------------ exchange
    def post(self, tag: str, value: bytes) -> str:
        """Serve this node's ``value`` of exchange ``tag`` from its own server; returns its key there
        (``{tag}/data/{rank}``).

        Raises:
            PeerFailure: a quorum of its peers expelled this node (it stalled past their timeout).
        """
        self.ledger.forget()
        self.ledger.live_at(tag)
        self.ledger.settle(_POST_WAIT_S)  # (its peers' accusations, read in the ledger's threads: a slow server
        self._check_out()  # costs this post at most _POST_WAIT_S; what comes later is counted in collect)
        if any(p in self.chan.down for p in self.alive - {self.rank}):  # (a peer's server gone: the store asked, a bool,
            self.store.exists(f"{tag}/status/{self.rank}")  # so a node back from a stall hears its peers left)
        data_key = f"{tag}/data/{self.rank}"
        self.chan.set(data_key, value)
        self.schedule.enter(tag)
        self.schedule.posted.setdefault(tag, time.monotonic())
        return data_key

    def _check_out(self) -> None:
        """Raise if a quorum of its peers expelled this node, as their accusations were last read; in an exchange of 2
        live nodes, the lone accuser is the failed peer instead (:func:`~dgrpo.transports.alone.lone_accuser`)."""
        out = self.ledger.expelled(self.rank)
        if out is not None and len(self.ledger.roster_of(out[0], self.rank)) <= 2:
            lone_accuser(self, *out)
        elif out is not None:
            self.alive.discard(self.rank)
            raise PeerFailure(f"node {self.rank} was declared failed by its peers in exchange {out[0]!r}: nodes "
                              f"{out[1]} did not receive its messages within {self.limit(out[0])} "
                              "(stalled?); leaving the swarm")

    def collect(self, tag: str, peers: Iterable[int], deadline: float | None, cap: int) -> dict[int, bytes]:
        """Payloads of live ``peers`` in exchange ``tag`` (at most ``cap`` bytes each: :func:`cap_of`), fetched
        from each peer's own server until they are in or ``deadline`` (None: now + timeout_s). A peer whose server
        did not serve it whole by then is accused (signed); one that served more than its cap is named, accused for a
        round payload (:func:`blame_unserved`); both are failed peers under ``on_peer_failure``; all gone:
        :func:`stop_if_alone`.

        Raises:
            PeerFailure: a peer failed and ``on_peer_failure`` is ``abort`` (names it).
        """
        start = time.monotonic()
        deadline = start + self.wait.timeout_s if deadline is None else deadline
        self.ledger.live_at(tag)
        self.schedule.enter(tag)
        startup = self.wait.limit_name != "swarm.timeout_s"
        self.first = self.first or (tag if not startup and tag.startswith("r") and tag[1:].isdigit() else None)
        pending = sorted((set(peers) & self.alive) - {self.rank})
        live = sorted(self.alive - {self.rank})  # (all gone and silent: this node is alone, alone_line)
        got: dict[int, bytes] = {}
        bad: dict[int, str] = {}  # peer → why its answer was refused (oversize): named, a round payload accused
        slow: dict[int, str] = {}  # peer → its last read's problem while its answers came too slowly (read again)
        left: list[int] = []
        stopped: dict[int, str] = {}  # start-up: peer → why it said it stopped (signed for its launch)
        # (a round's schedule and the waiters' extensions: transports/waits.py; start-up waits need every rank)
        base = deadline if startup else self.schedule.base(tag, deadline)
        end = None if startup else self.schedule.cap(tag, deadline)  # (the round's end: no extension past it)
        until = {p: base for p in pending}
        extended: dict[int, tuple[str, list[int]]] = {}
        held: dict[int, float] = {}  # peer waited for to held_bound → its deadline without (HeldBefore.suspects)
        missed: list[int] = []
        noted = startup  # (a wait note once per exchange)
        arrived = self.schedule.arrived.setdefault(tag, {})
        delay = 0.005
        # One read per peer at a time, each in its own thread, so a slow server holds up only its own reads; a peer is
        # missed once a read begun at or after its deadline found nothing (one poll, at most 0.25 s, past it).
        reads: dict[int, tuple[Future, float]] = {}  # peer → (its read in flight, when it began)
        ends: dict[int, float] = {}  # peer → when its read in flight ends (its deadline then)
        last: dict[int, float] = {}  # peer → when its last finished read began
        retry: dict[int, float] = {}  # peer → when to ask again (not served yet)
        pool = ThreadPoolExecutor(max_workers=max(1, len(pending) + 3 * len(self.alive)),
                                  thread_name_prefix=f"dgrpo-read-{self.rank}")
        # (past safe, a peer is waited for only while others are held; fellows held this node in eq{n-1}: Schedule)
        fellows, safe = (set(), None) if startup else (self.schedule.fellows_of(tag), self.schedule.safe(tag))
        prior = f"eq{int(tag[1:]) - 1}" if fellows else ""  # (fellows only in r{n}, n > 0; r31t T1: the witnesses)
        withheld = set(pending) - fellows - set(self.schedule.arrived.get(prior, {}))  # (its eq{n-1} never came here)
        witness = None if safe is None else Witnesses(self.rank, self.chan, tag, self.ledger.roster_of(tag, self.rank),
                                                      pool.submit)
        side = SideReads(self, tag, pool.submit, end, cap)  # (notes, stop notices, leave marks, owed: in the pool)
        prev = HeldBefore(self.rank, self.chan, tag, self.ledger.roster_of(tag, self.rank), pool.submit)  # (r31q Q3)
        try:
            while pending:
                self.chan.reassert()  # (start-up: this rank's signed address back in the store if overwritten)
                now = time.monotonic()
                for p in pending:  # (each read runs to its peer's deadline: one that keeps receiving is not slow;
                    if p not in reads and (now >= retry.get(p, 0.0) or now >= until[p]):  # task h31q2)
                        ends[p] = max(until[p], now + _SLICE_S)
                        reads[p] = (pool.submit(self.chan.fetch, p, f"{tag}/data/{p}", cap, ends[p], ends[p] - now), now)
                soonest = min(until[p] for p in pending) - now  # (past it, every late peer's last read is in flight)
                busy = [f for f, _ in reads.values()]
                pause = delay if soonest <= 0 else min(delay, soonest)
                if busy:
                    wait(busy, timeout=pause, return_when=FIRST_COMPLETED)
                else:
                    time.sleep(pause)
                delay = min(delay * 1.5, _SLICE_S)
                for peer in [p for p in pending if p in reads and reads[p][0].done()]:
                    fut, last[peer] = reads.pop(peer)
                    data, problem = fut.result()
                    if data is not None:
                        got[peer] = data
                        arrived[peer] = time.monotonic()
                        side.ask_held(peer, arrived[peer] - start)  # (the main rank late: its note, latenames)
                        pending.remove(peer)
                        slow.pop(peer, None)
                    elif problem is not None and problem.startswith("slow"):  # (read again: not whole by its deadline,
                        slow[peer] = problem  # it is missing, accused: transports/unserved.py, review r31o H5; a read
                        retry[peer] = time.monotonic() + delay  # that lasted till the deadline is the last one)
                        last[peer] = until[peer] if time.monotonic() >= until[peer] else last[peer]
                    elif problem is not None:
                        bad[peer] = problem
                        pending.remove(peer)
                    elif (why := self.chan.stops.get(peer)) is not None:  # (pushed to this server: signed, checked)
                        stopped[peer] = why
                        pending.remove(peer)
                    elif peer in self.leaving and not startup:  # (its departure read before, not acted on yet: not
                        pending.remove(peer)  # waited for, unaccused; every node acts on it at one relay: departures)
                    else:  # (its stop notice or leave mark: read in the pool, SideReads; a check of the store here, whose
                        retry[peer] = time.monotonic() + delay  # answer is a bool: a store gone is one line, as before)
                        self.schedule.absent.setdefault(tag, {})[peer] = last[peer]  # (not served yet: fellow_hold)
                        self.store.probe(f"{tag}/status/{peer}", startup)  # (store gone: raised below if one is missing)
                        side.ask_gone(peer, time.monotonic(), until[peer])
                for peer, kind, why in side.take_gone():
                    if peer in pending:  # (its leave marks may be of no launch)
                        pending.remove(peer)
                        stopped.update({peer: why} if kind == "stopped" else {})
                        left += [peer] if kind == "left" else []
                now = time.monotonic()
                if not noted and pending and now - start >= note_s(self.wait.timeout_s):
                    noted = True  # (still waiting: say so, signed, before this node posts its next exchange late)
                    self.notes.note(tag, pending)
                side.take_notes()  # (each pending peer's notes are read from just before its deadline: SideReads)
                side.ask_owed(now)  # (eq{n}: the round payloads of fellows missed in r{n}, Schedule.owed_in)
                if any(p not in extended and now >= until[p] - 0.5 for p in pending):  # (still in eq{n-1} with
                    prev.poll(end)  # another, read from 0.5 s before a deadline where a note may extend: HeldBefore)
                for peer in [p for p in pending if p not in extended and end is not None and until[p] < end]:
                    side.ask_notes(peer, until[peer], now)  # (a round exchange with time left in its budget)
                for peer in [p for p in pending if now >= until[p] and p in side.hits and p not in extended]:
                    why = side.note(peer)  # (its signed note, unless it buys nothing here: SideReads.note)
                    if why is not None:  # it only waited: more time, once an exchange, never past the round's end
                        extended[peer] = why  # (a suspect's held wait, once its victims' notes name it: undone)
                        plain = self.schedule.extended(tag, peer, until[peer], why[0], deadline)
                        sus = prev.suspects(side.hits, self.notes.mine)
                        until[peer] = self.schedule.extended(tag, peer, until[peer], why[0], deadline,
                                                             prev.held(peer, sus))
                        held.update({peer: plain} if until[peer] > plain else {})
                        end = side.end = self.schedule.cap(tag, deadline)  # (held_bound may move the round's end)
                for peer in [p for p in held if p in pending and p in prev.suspects(side.hits, self.notes.mine)]:
                    until[peer] = held.pop(peer)
                    if ends.get(peer, 0.0) > until[peer] + _SLICE_S:  # (its read runs to the held deadline: one more)
                        reads.pop(peer, None)
                if witness is not None and any(until[p] > safe for p in pending):
                    now = time.monotonic()  # (held past Schedule.safe: a relay, review r31f, the limit h31y left; a
                    if now >= safe - _WITNESS_S:  # round payload, the open case of h31s; only while others are held)
                        witness.poll(end)
                    for peer in [p for p in pending if until[p] > now >= safe  # (a window W, in a swarm of 2: kept)
                                 and (p in extended or witness.others - {p})]:
                        besides = fellows if peer in withheld else ()  # (r31t T1)
                        if not witness.held(peer, besides) and now < fellow_hold(self.schedule, tag, peer, witness.others):
                            if not noted:  # (a fellow in a swarm of 3: its relay's extension, fellow_hold)
                                noted = True
                                self.notes.note(tag, pending)
                        elif not witness.held(peer, besides):
                            until[peer] = now
                            if ends.get(peer, now) > now + _SLICE_S:  # (its read runs to the later deadline: not
                                reads.pop(peer, None)  # waited for; one more read, begun now, is its last)
                        elif tag.startswith("eq"):  # (held here: those still in are late into r{n+1} as this node is)
                            self.schedule.held_with(tag, witness.others - {peer} - witness.left - set(pending))
                now = time.monotonic()
                out = [p for p in pending if now >= until[p] and p not in reads and last.get(p, -1.0) >= until[p]
                       and not side.note_busy(p)]  # (a note read in flight ends by the deadline, one poll at most)
                missed += out  # (past its deadline, read once more since: never read later this exchange)
                pending = [p for p in pending if p not in out]
                if not pending or stopped and startup:  # (start-up needs every rank: one stopped, all stop)
                    break
                self.ledger.refresh()  # (peers' accusations, read in the ledger's threads: never waited for here)
                if self.ledger.poll() and not startup:  # peers others already expelled are not waited for
                    self._check_out()
                    for peer in list(pending):
                        out = self.ledger.expelled(peer) if peer in self.alive else (tag, [])  # (not alive: a lone
                        if out is not None:  # accuser in a swarm of 2, out already)
                            pending.remove(peer)
                            self._expel(peer, *out)
            side.settle_owed()  # (a fellow missed in r{n} whose r{n} never came: accused of it)
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
            if end is not None:
                self.schedule.left[tag] = time.monotonic()
                self.notes.ended(tag)  # (its peers' Witnesses: this node left the round exchange)
        heard = [p for p in missed if p in self.chan.launches] if self.chan.keys is not None else []
        if startup and heard and not stopped:  # (a peer that stopped at its own deadline: its signed reason, not
            grace_end = time.monotonic() + STOP_GRACE_S  # "sent nothing"; it says why within 2 s: announce_stop)
            while not stopped and time.monotonic() < grace_end:
                stopped = {p: why for p in heard if (why := self.chan.stop_of(p)) is not None}
                time.sleep(0.05)
            missed = [p for p in missed if p not in stopped]
        pending = sorted(missed + pending)
        if not startup:
            name_late(self, tag, start, got, arrived, extended, side)
        if left and not startup and tag != "done":  # (out at every node, this one included, at the first relay of
            later(self, tag, {p: "left the swarm (its signed leave mark)" for p in left})  # this node that carries
            left = []  # it: eq{n} for a mark read in r{n}, eq{n+1} for one read in eq{n}; departures.py, r31o H3)
        for peer in left:
            self._expel(peer, tag, [], why="left the swarm (it stopped on an error)")
        if left and self.on_peer_failure == "abort":
            self._fail(left, tag, "sent nothing")
        for peer, problem in sorted(bad.items()):
            log.warning("node %d: exchange %r: node %d's server %s", self.rank, tag, peer, problem)
            self.refuse(peer, f"transport: exchange {tag!r}: {problem[:160]}")
        if stopped:  # (never "sent nothing": it said why it stopped, signed for its launch; review r31c F3)
            met(self, tag, stopped, startup)
        forged = [f"the server address of node {p} in the store (addr/{p}): it {self.chan.bad_addr[p]}" for p in pending
                  if p in self.chan.bad_addr and p not in self.chan.addrs]
        if forged:  # (start-up only: addresses are never read again once the ranks checked them)
            raise PeerFailure(f"node {self.rank} refused {'; '.join(forged)}; another rank wrote over it (until "
                              f"{self.wait.limit_name}={self.wait.timeout_s:g}s); stopping before round 0")
        accused = blame_unserved(self, tag, pending, bad, slow, fellows, startup)  # (a fellow: named, not accused)
        self.schedule.owe(tag, set(pending) & fellows, extended)  # (accused at eq{n}'s end: owed_in, unnoted_in)
        for peer in sorted(set(pending) | set(accused)):  # (as last read; the rest at this node's next poll)
            out = self.ledger.expelled(peer)
            if out is not None:
                self._expel(peer, *out)
        if pending or accused:
            self.ledger.forget()
            self.ledger.refresh()
        if not startup:  # (the store gone with a peer missing, review r31k F8; every live peer gone: alone, F5)
            stop_if_alone(self, tag, live, pending, bool(got or bad))
        if pending or bad:
            self._fail([p for p in pending if p not in slow], tag, "sent nothing",
                       sorted(set(bad) | set(pending) & set(slow)))
        return got

    def say(self, text: str, readers=None) -> None:
        """Before this node stops on a peer failure: ``text``, signed, served till ``readers`` (default: its live peers)
        read it, as long as they may wait for this node (a peer's round may begin up to W + E after this one's and
        lasts timeout_s, < 2 x timeout_s in all, and a read; the store's copy may be deleted): :class:`WaitNotes`."""
        readers = self.alive - {self.rank} if readers is None else readers
        self.notes.say_stop(text, readers, 2 * self.wait.timeout_s + slack_s(self.wait.timeout_s) + 1.0)

    def _expel(self, peer: int, tag: str, accusers: list[int], why: str = "") -> None:
        if peer not in self.alive:
            return
        self.alive.discard(peer)
        self.failed[peer] = tag
        log.warning("node %d is out of the swarm from exchange %r: %s", peer, tag,
                    why or f"nodes {accusers} found it missing (a quorum of its live peers)")

    def _fail(self, peers: list[int], tag: str, what: str, empty: Iterable[int] = ()) -> None:
        """Name the peers missing from exchange ``tag``; abort, or go on without them this round."""
        parts = []
        if peers:
            who = f"node{'s' if len(peers) > 1 else ''} {', '.join(map(str, peers))}"
            parts.append(f"{who} {what} for exchange {tag!r} within {self.limit(tag)} "
                         "(dead or stalled)")
        empty = sorted(empty)
        if empty:
            who = f"node{'s' if len(empty) > 1 else ''} {', '.join(map(str, empty))}"
            parts.append(f"{who} served exchange {tag!r} over its byte cap or too slowly within "
                         f"{self.limit(tag)} (refused)")
        if self.on_peer_failure == "abort" and self.wait.limit_name == "swarm.timeout_s":
            end = time.monotonic() + 1.0  # (a peer that stopped first: its signed reason, quoted; review r31d F2)
            for p in peers:  # (else, one still waiting itself: whom its signed note names; review r31n G4)
                if (why := self.notes.stop_of(p, end)) is not None:
                    parts.append(f'node {p} stopped first, saying (signed): "{why}"')  # (its words: peer_text)
                elif (note := self.notes.waited(p, self.schedule.noted_in(tag), end, 0.5)) is not None:
                    parts.append(f"node {p} said (signed) it was waiting for node{'s' if len(note[1]) > 1 else ''} "
                                 f"{', '.join(map(str, note[1]))} in exchange {note[0]!r}")
        text = "; ".join(parts)
        if self.on_peer_failure == "abort" or self.wait.limit_name != "swarm.timeout_s":
            log.error("%s; aborting (swarm.on_peer_failure=%s)", text, self.on_peer_failure)
            hint = ("start every rank within it" if self.wait.limit_name != "swarm.timeout_s" else
                    "set swarm.on_peer_failure=continue to go on without it")
            if self.wait.limit_name == "swarm.timeout_s":
                self.say(text, self.alive - {self.rank} - set(peers) - set(empty))
            raise PeerFailure(f"{text}; aborted ({hint})")
        log.warning("%s; continuing without it this round (swarm.on_peer_failure=continue)", text)
