"""How a rank resolves its peers' server addresses at start-up (:class:`AddressBook`, a part of
:class:`~dgrpo.transports.peerserve.PeerChannel`; issue 31, reviews r31c F3 and r31j F1).

A reader keeps an address only once the server there answered a fresh challenge with the launch nonce of a record
its owner signed (:func:`~dgrpo.transports.peeraddr.answers`): proved, never assumed. A record whose server refuses
the connection is stale (of an earlier launch, or a dead server: named in one log line, never counted against its
owner); one whose challenge got no answer (a timeout, an unreachable host, a listener that never answers: the
address of an earlier launch replayed by a peer looks the same as a busy server) is *unproved*: neither kept nor
refused, challenged again after :data:`RETRY_S` while the reader looks for another record of its owner (before,
such a record was kept for the run, and a peer writing the owner's record of an earlier launch over ``addr/{k}``
every millisecond got the honest owner expelled at start-up: review r31j F1). The owner's own record therefore wins
whenever its server answers: it is put back in the store, and pushed by the owner itself in the ``X-Dgrpo-Addr``
header of every request it sends this rank's server, its challenges included (:meth:`AddressBook.offer`: the newest
it pushed is tried first). What remains: a rank whose server its peers cannot reach stays unresolved and is
treated as absent (the check-in's quorum); one whose server is flooded at start-up is resolved once a challenge
gets through; and whoever replays a record in the store is not named (a shared store has no writer to name; the
record's signer is never blamed for it).
"""

from __future__ import annotations

import datetime
import logging
import time

from dgrpo.transports.peeraddr import AddressKeys, answers, launch_time, read_address

RETRY_S = 3.0  # an unproved record (its challenge unanswered) is not challenged again before this (seconds)
_CHALLENGE_S = 2.0  # longest time one address_of spends on challenges (seconds)
log = logging.getLogger("dgrpo.transports.peerserve")


class AddressBook:
    """Peers' addresses as this rank proved them (a part of PeerChannel, which sets ``rank``, ``store``, ``keys``,
    ``lock``, ``frozen``, ``_record`` and calls :meth:`_book`).

    Attributes:
        addrs: owner → ``host:port`` proved (kept for the run); launches: owner → its server's nonce, as it answered.
        offers: owner → (its time in ns, the newest record it pushed: :meth:`offer`).
        unproved: (owner, ``host:port|nonce``) → ``time.monotonic()`` until which that record is not challenged again.
        bad_addr: owner → why its record in the store was refused or is unproved (the last seen; a stop line quotes it).
    """

    def _book(self) -> None:
        self.addrs: dict[int, str] = {}
        self.launches: dict[int, str] = {}
        self.offers: dict[int, tuple[int, bytes]] = {}
        self.unproved: dict[tuple[int, str], float] = {}
        self.bad_addr: dict[int, str] = {}

    def address_of(self, owner: int, end: float | None = None) -> str | None:
        """A peer's address, once proved: the newest record ``owner`` pushed in a request to this server
        (:meth:`offer`) and then its record under ``addr/{owner}`` in the store (once it was there or ``owner``
        checked in: a get that waits up to 0.1 s for the key), the first whose server answers a fresh challenge for
        its launch (:func:`read_address`, :meth:`_stale`), kept. A record refused, stale or unproved in the store is
        named in one log line (under nobody: its writer is not known) and read again later. The challenges end by
        ``end`` (``time.monotonic()``), 2 s from now at most; None while nothing is proved."""
        if owner in self.addrs or self.frozen or self.store is None:
            return self.addrs.get(owner)
        end = min(time.monotonic() + _CHALLENGE_S, end if end is not None else float("inf"))
        with self.lock:
            pushed = [self.offers[owner][1]] if owner in self.offers else []
        raws = []
        try:  # (published, or its owner checked in: a get that waits for the key catches the owner's next
            # write even when another rank deletes the record every millisecond; the store's timeout is restored)
            if self.store.check([f"addr/{owner}"]) or self.store.check([f"join/{owner}"]):
                was = self.store.timeout
                self.store.set_timeout(datetime.timedelta(seconds=0.1))
                try:
                    raws.append(self.store.get(f"addr/{owner}"))
                finally:
                    self.store.set_timeout(was)
        except Exception:  # noqa: BLE001 - not there within 0.1 s, or the store is gone
            pass
        for i, raw in enumerate(pushed + [r for r in raws if r not in pushed]):
            keys = self.keys.trial(owner, raw) if self.keys is not None else None  # (unsafe: the key it carries)
            addr, problem = read_address(keys, owner, raw)
            if addr is not None:
                addr, nonce = addr.rsplit("|", 1)
                problem = self._stale(owner, addr, nonce, keys, end)
            if problem is None and keys is not None and not self.keys.learn(owner, keys):  # (unsafe: the first
                problem = f"carries another key than the one this rank learned for node {owner} first"  # kept)
            if problem is None:
                self.addrs[owner] = addr
                return addr
            if i >= len(pushed) and isinstance(problem, str) and self.bad_addr.get(owner) != problem:
                self.bad_addr[owner] = problem  # (named: what is in the store)
                log.warning("node %d: refused the server address of node %d in the store (addr/%d): it %s",
                            self.rank, owner, owner, problem)
        return None

    def offer(self, reader: str, raw: str) -> bool | None:
        """A peer's own address record, pushed in a request it sent this server (``X-Dgrpo-Addr``), so an address
        kept overwritten in the store still resolves once its owner read or challenged this rank (review r31c F3).
        Kept if it verifies under that owner's key and its nonce is dated (:func:`launch_time`) no earlier than the
        one kept: one record per owner, the newest launch's, so records of earlier launches, however many a peer
        holds and pushes in the owner's name, never displace the owner's own (issue 31); whether it is of this
        launch is proved as a store record's is (:meth:`address_of`, which tries it first). Only ``owner``'s key is
        tried (one verification: review h31r2). Returns whether it verified (None: not checked)."""
        if self.frozen or self.keys is None or not reader.isdigit() or len(raw) > 1024:
            return None
        owner, rec = int(reader), raw.encode("latin-1", "replace")
        if owner in self.addrs or owner == self.rank or not self.keys.knows(owner):
            return None
        if self.offers.get(owner, (0, b""))[1] == rec:  # (the one kept, pushed again: verified once)
            return True
        addr = read_address(self.keys.trial(owner, rec), owner, rec, named=False)[0]  # (unsafe: the key it carries)
        when = None if addr is None else launch_time(addr.rsplit("|", 1)[1])
        if when is None:
            return False
        with self.lock:
            if owner not in self.offers or when >= self.offers[owner][0]:
                self.offers[owner] = (when, rec)
        return True

    def _stale(self, owner: int, addr: str, nonce: str, keys: AddressKeys | None,
               end: float | None = None) -> str | None | bool:
        """None when the server at ``addr`` answers a fresh challenge (ending by ``end``) with ``nonce`` signed by
        ``owner`` under ``keys``: the record is of this launch (its nonce kept in :attr:`launches`); why the record
        (its owner's signature, valid) is stale when nothing listens there or the answer is not that; else the
        challenge went unanswered (a timeout, an unreachable host, a silent listener, a busy server: proves
        nothing, review r31j F1): why it is unproved (a string starting ``is unproved``) when the challenge had 1 s
        or more, then not challenged again for :data:`RETRY_S`; False (undecided, not named) when it had less or
        is still waiting out that pause. Its own signed record goes with each challenge (``X-Dgrpo-Addr``)."""
        if keys is None:
            return None  # (no keys: nothing is signed)
        now = time.monotonic()
        if self.unproved.get((owner, f"{addr}|{nonce}"), 0.0) > now:
            return False
        window = _CHALLENGE_S if end is None else end - now
        if window <= 0.05:
            return False
        live = answers(keys, owner, addr, nonce, self.rank, end, record=None if self.frozen else self._record)
        if live:
            self.unproved.pop((owner, f"{addr}|{nonce}"), None)
            self.launches[owner] = nonce
            return None
        if live is None:
            if window < 1.0:  # (the read's end was near: no time to tell, challenged again at once)
                return False
            self.unproved[(owner, f"{addr}|{nonce}")] = time.monotonic() + RETRY_S
            return (f"is signed by node {owner} but its server at {addr} did not answer a challenge for that record's "
                    "launch (unproved, not kept: a record of an earlier launch at an address that no longer answers, "
                    f"or a server too busy or unreachable from here; read again; not counted against node {owner})")
        return (f"is signed by node {owner} but its server at {addr} does not answer for that record's launch (a "
                "record of an earlier run or launch, or a dead server; not counted against node "
                f"{owner})")
