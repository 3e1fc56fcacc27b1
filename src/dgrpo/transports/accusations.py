"""Signed accusations and the quorum that expels a node (issue 31; the distributed transport's
:class:`AccusationLedger`).

Node j serves its own accusations (``accuse``: one JSON line ``{"by": j, "peer": k, "tag": t, "sig": …}``
each, signed for the run) from its own server (:mod:`dgrpo.transports.peerserve`), so nobody can delete
or pad another's. A node serves only a window of its newest accusations (``_ACCUSE_LINES`` lines, at most
``_WINDOW_BYTES``: the exchanges that can still expel are the last few, and a run-long list outgrew every
reader's cap: review r31k F3), and a reader keeps the newest ``_ACCUSE_LINES`` lines it reads; a server that serves
anything else there is named once and not asked again. The same window, signed line by line, is put in
``accuse/by/{j}`` in the store (overwritten at each accusation), read only when j's server is gone.

Node k is expelled once more than half of the live roster *of one exchange* accused it in that
exchange (:func:`quorum`): each node records the live nodes of an exchange as it enters it
(:meth:`AccusationLedger.live_at`), so accusations of an earlier exchange are never counted against a later,
smaller live set (after an expulsion, 2 old accusations of 4 live nodes would otherwise be a quorum
of the 3 left). A lone accusation expels nobody and is named under its signer.

A node that counts a quorum against a peer serves its proof (``expel``: the quorum's signed accusation lines, as
read, one JSON line each; :meth:`AccusationLedger.expelled`), and every node reads its peers' proofs with their
accusations and counts each line as its signer's (h31s; review r31j F3 left it open). Otherwise a node saw only what
each signer showed it: a rank that served junk as its accusations to one reader (named, never asked again) or hid
them from it kept that reader, expelled by the others with the rank's own accusation, blind to it: it trained on
alone. Relaying forges nothing (every line verifies under its signer's key, for this run and launch) and gives
the attacker nothing it could not serve itself.
"""

from __future__ import annotations

import json
import logging
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, Callable

from dgrpo.errors import PeerFailure

if TYPE_CHECKING:
    from dgrpo.transports.peerserve import PeerChannel
    from dgrpo.transports.signedstore import SignedStore

log = logging.getLogger("dgrpo.transports.storewait")  # (one logger for the exchange and its blame)

_ACCUSE_LINES = 256  # most accusation lines read from one signer
_ACC_TTL_S = 1.0  # how long fetched accusations are reused (each fetch asks every live peer's server)
_SETTLE_S = 0.25  # the most a round's end waits for accusations read in flight (one poll)
_PROOF_LINES = 256  # most proof lines (`expel`) read from one node
_WINDOW_BYTES = 48 << 10  # most bytes a node serves as its accusations or proofs (under the store copies' 64 KiB)


def quorum(live: int) -> int:
    """Accusers needed to expel a node from a swarm of ``live`` live nodes (itself included): more than
    half of them (3 of 4, 2 of 3); in a swarm of 2, the one peer (no majority exists there)."""
    return max(1, min(live // 2 + 1, live - 1))


def fetch_all(chan: "PeerChannel", owners: list[int], key_of, cap: int, deadline: float, budget: float = 2.0):
    """owner → (value or None, problem or None) of ``key_of(owner)``, fetched from every owner's server at
    once (:meth:`PeerChannel.fetch`: at most ``cap`` bytes, ``budget`` seconds a read, ends by ``deadline``)."""
    if not owners:
        return {}
    if len(owners) == 1:
        o = owners[0]
        return {o: chan.fetch(o, key_of(o), cap, deadline, budget)}
    with ThreadPoolExecutor(max_workers=len(owners)) as pool:
        futs = {o: pool.submit(chan.fetch, o, key_of(o), cap, deadline, budget) for o in owners}
        return {o: f.result() for o, f in futs.items()}


class AccusationLedger:
    """This node's accusations, and its count of everyone's against the live roster of each exchange.

    Args:
        rank: this node.
        alive: the transport's live nodes (the same set; read here, never changed).
        chan: this rank's :class:`~dgrpo.transports.peerserve.PeerChannel`: serves its accusations and
            fetches its peers'.
        store: the :class:`~dgrpo.transports.signedstore.SignedStore`: signs and checks accusation lines and
            keeps their signed copies (``accuse/by/{j}``).
        refuse: ``refuse(node, reason)`` records a refusal under ``node`` (the transport's ``rejected`` of
            the current all-gather).

    Attributes:
        ttl_s: seconds fetched accusations are reused (each fetch asks every live peer's server).
        junk: nodes whose servers served junk as their accusations (not asked again for the run).
    """

    def __init__(self, rank: int, alive: set[int], chan: "PeerChannel", store: "SignedStore",
                 refuse: Callable[[int, str], None]):
        self.rank, self.alive, self.chan, self.store, self.refuse = rank, alive, chan, store, refuse
        self.ttl_s = _ACC_TTL_S
        self.junk: set[int] = set()
        self._lines: dict[int, list[tuple[int, str]]] = {}  # signer → its (peer, tag) as last read
        self._sigs: dict[int, dict[tuple[int, str], str]] = {}  # signer → (peer, tag) → its signature as last read
        self._relayed: dict[int, dict[tuple[int, int, str], str]] = {}  # node → its proofs as last read: (signer,
        self._proved: set[int] = set()  # peer, tag) → signature; the peers this node serves a proof against
        self._read_at: dict[int, float] = {}  # signer → when the read that gave its lines began
        self._reads: dict[int, tuple[Future, float]] = {}  # signer → (its read in flight, when it began)
        self._own: list[tuple[int, str]] = []  # this node's own accusations
        self._served: deque[str] = deque()  # the window of its own accusation lines it serves (_window)
        self._proof_lines: deque[str] = deque()  # the window of proof lines it serves
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix=f"dgrpo-acc-{rank}")
        self._live_at: dict[str, frozenset] = {}  # exchange → its live nodes as this node entered it
        self._lone_seen: set[tuple[int, str, int]] = set()  # (accuser, tag, peer) already named

    def forget(self) -> None:
        """Read every signer's accusations afresh at the next :meth:`refresh` (this node posts, or accused)."""
        self._read_at.clear()

    def refresh(self) -> None:
        """Begin a read of each live signer's accusations not read within ``ttl_s`` (one in flight a signer, in this
        ledger's own threads, each within 1 s: :meth:`PeerChannel.fetch`); never waits (review r31j F3, F4: a read
        in the wait loop's thread let one slow server hold the round)."""
        now = time.monotonic()
        for by in sorted(self.alive - self.junk - {self.rank} - set(self._reads)):
            if now - self._read_at.get(by, -1e9) > self.ttl_s:
                self._reads[by] = (self._pool.submit(self._read, by), now)

    def poll(self) -> bool:
        """Take the reads that finished (a signer that served junk is named here, in the caller's thread); True if
        any did."""
        done = [by for by, (f, _) in self._reads.items() if f.done()]
        for by in done:
            fut, began = self._reads.pop(by)
            try:
                items, bad, proofs = fut.result()
            except Exception:  # noqa: BLE001 - the store is gone (a signed copy's read): nothing read
                continue
            self._lines[by], self._read_at[by] = [(p, t) for p, t, _ in items], began
            self._sigs[by] = {(p, t): sig for p, t, sig in items}
            if proofs is not None:  # (None: none read now; the proofs read of it before are kept: they only grow)
                self._relayed[by] = proofs
            if bad and by not in self.junk:
                self.junk.add(by)
                reason = f"accusation: node {by} serves junk as its accusations ({bad[:120]}); refused for the run"
                log.warning("%s", reason)
                self.refuse(by, reason)
        return bool(done)

    def settle(self, wait_s: float) -> None:
        """:meth:`refresh`, then wait at most ``wait_s`` seconds for the reads in flight, and :meth:`poll`."""
        self.refresh()
        futs = [f for f, _ in self._reads.values()]
        if futs and wait_s > 0:
            wait(futs, timeout=wait_s)
        self.poll()

    def _read(self, by: int):
        """(signer ``by``'s valid (peer, tag, signature) lines, why its server's answer is junk or None, the proofs
        it serves: :meth:`_proofs_of`), read in a thread: from its server (at most ``_ACCUSE_LINES`` lines, 1 s),
        else, its server gone, the signed copy it put in the store (anyone may delete or pad it: nothing read there
        is blamed on anyone; bounded: StoreCopies)."""
        raw, bad = self.chan.fetch(by, "accuse", _ACCUSE_LINES * 512, time.monotonic() + 1.0, 1.0)
        copy = raw is None and bad is None
        if copy:
            copies = self.chan.copies
            raw = None if copies is None else copies.read(by, f"accuse/by/{by}", time.monotonic() + 1.0)
        items = []
        for line in (raw or b"").splitlines()[-_ACCUSE_LINES:]:  # (the newest: review r31k F3)
            try:
                item = json.loads(line)
                ok = (isinstance(item, dict) and item.get("by") == by and isinstance(item.get("tag"), str)
                      and isinstance(item.get("peer"), int)
                      and self.store.valid(by, f"accuse|{item['tag']}|{item['peer']}", item.get("sig")))
            except (ValueError, RecursionError, TypeError):
                ok = False
            if ok:
                items.append((item["peer"], item["tag"], item["sig"]))
            elif not copy:
                bad = bad or "a line that is not an accusation it signed"
        proofs, junk = self._proofs_of(by)
        return items, None if copy else bad or junk, proofs

    def _proofs_of(self, by: int) -> tuple[dict[tuple[int, int, str], str] | None, str | None]:
        """((signer, peer, tag) → signature of every valid accusation line node ``by`` serves as a proof, ``expel``:
        at most ``_PROOF_LINES``, 1 s; None: nothing there; its server gone, the signed copy it put in the store,
        ``expel/by/{by}``, blamed on nobody), why its served answer is junk or None); a line read before as its
        signer's, with that signature, is not checked again."""
        raw, bad = self.chan.fetch(by, "expel", _PROOF_LINES * 512, time.monotonic() + 1.0, 1.0)
        if raw is None and bad is None:  # (not served, or its server gone: e.g. its run ended while a node stalled)
            copies = self.chan.copies if by in self.chan.down else None
            raw = None if copies is None else copies.read(by, f"expel/by/{by}", time.monotonic() + 1.0)
            if raw is None:
                return None, None
            bad = ""  # (nothing read in the store is blamed on anyone)
        out = {}
        for line in (raw or b"").splitlines()[-_PROOF_LINES:]:  # (the newest)
            try:
                item = json.loads(line)
                key = item["by"], item["peer"], item["tag"]
                ok = (type(item["by"]) is int and type(item["peer"]) is int and isinstance(item["tag"], str)
                      and item["by"] != item["peer"] and isinstance(item.get("sig"), str)
                      and (self._sigs.get(item["by"], {}).get(key[1:]) == item["sig"]
                           or self.store.valid(item["by"], f"accuse|{item['tag']}|{item['peer']}", item["sig"])))
            except (ValueError, RecursionError, TypeError, KeyError, IndexError):
                ok = False
            if ok:
                out[key] = item["sig"]
            elif bad is None:
                bad = "a proof line that is not an accusation its signer signed"
        return out, bad or None

    def _prove(self, peer: int, tag: str, accusers: list[int]) -> None:
        """Serve (``expel``, appended) the signed accusations of ``peer`` in ``tag`` by ``accusers`` (a quorum), as
        read: whoever this node's peers could not read them from counts them all the same."""
        self._proved.add(peer)
        lines = []
        for by in accusers:
            sig = self._sigs.get(by, {}).get((peer, tag)) or next(
                (got[(by, peer, tag)] for got in self._relayed.values() if (by, peer, tag) in got), None)
            if sig is not None:
                lines.append(json.dumps({"by": by, "peer": peer, "tag": tag, "sig": sig}) + "\n")
        self._window("expel", f"expel/by/{self.rank}", self._proof_lines, lines, _PROOF_LINES)

    def _window(self, key: str, copy: str, window: deque, lines: list[str], most: int) -> None:
        """Add ``lines`` to ``window`` (the newest ``most`` lines, ``_WINDOW_BYTES`` at most), serve it as ``key``
        and put it in the store as ``copy`` (a signed copy, read once this node's server is gone; overwritten, so
        junk another rank appended there is gone at this node's next line)."""
        window.extend(lines)
        while len(window) > most or sum(map(len, window)) > _WINDOW_BYTES:
            window.popleft()
        value = "".join(window).encode()
        self.chan.set(key, value)
        try:
            self.store.put(copy, value)
        except PeerFailure:
            pass

    def accusations(self, peer: int, deadline: float | None = None) -> dict[str, set[int]]:
        """Exchange tag → the live nodes whose valid accusation against ``peer`` names that exchange, as last read
        (each node serves its own accusations, ``accuse``, one JSON line each, from its own server: nobody can
        delete or pad another's; a signer that serves junk there is named once, ``accusation: junk``). With a
        ``deadline``: :meth:`settle` first, until it (at most 1 s); without: never waits (:meth:`refresh`)."""
        if deadline is not None:
            self.settle(min(1.0, deadline - time.monotonic()))
        lines = [(by, p, tag) for by, items in {**self._lines, self.rank: self._own}.items() for p, tag in items]
        lines += [key for got in self._relayed.values() for key in got]  # (proofs: each line its signer's)
        out: dict[str, set[int]] = {}
        for by, p, tag in lines:  # (against this node: every signer live in that exchange, as it entered it)
            if p == peer and by != peer and (by in self.alive or peer == self.rank and by in self.roster_of(tag, peer)):
                out.setdefault(tag, set()).add(by)
        return out

    def accuse(self, peer: int, tag: str) -> None:
        """Accuse ``peer`` of missing exchange ``tag``: one signed line added to the window this node's own server
        serves (``accuse``: :meth:`_window`), and to its signed copy in the store, ``accuse/by/{rank}`` (when
        reachable)."""
        sig = self.store.sign(f"accuse|{tag}|{peer}")
        line = json.dumps({"by": self.rank, "peer": peer, "tag": tag, "sig": sig})
        self._own.append((peer, tag))
        self._sigs.setdefault(self.rank, {})[(peer, tag)] = sig
        self._window("accuse", f"accuse/by/{self.rank}", self._served, [line + "\n"], _ACCUSE_LINES)

    def live_at(self, tag: str) -> None:
        """Record the live roster of exchange ``tag`` as this node enters it (its first post or collect):
        accusations naming ``tag`` are counted against that roster, never a later, smaller one."""
        self._live_at.setdefault(tag, frozenset(self.alive))

    def roster_of(self, tag: str, peer: int) -> frozenset:
        """The live nodes of exchange ``tag`` (``peer`` included); the current ones for an exchange this node
        has not entered (the one a stalled node is about to post, or a tag an accuser made up)."""
        return self._live_at.get(tag, frozenset(self.alive)) | {peer}

    def accusers(self, peer: int, deadline: float | None = None) -> dict[str, tuple[set[int], int]]:
        """Exchange → (the accusers of ``peer`` live in that exchange, the quorum of that exchange's live
        roster): an accusation of an earlier exchange is never counted against a smaller live set."""
        out = {}
        for tag, by in self.accusations(peer, deadline).items():
            live = self.roster_of(tag, peer)
            out[tag] = (by & live, quorum(len(live)))
        return out

    def expelled(self, peer: int, deadline: float | None = None) -> tuple[str, list[int]] | None:
        """(exchange, accusers) if more than half of the live roster of one exchange accused ``peer`` in it
        (``deadline``: :meth:`accusations`); the first time, this node serves the proof (:meth:`_prove`)."""
        for tag, (by, need) in sorted(self.accusers(peer, deadline).items()):
            if len(by) >= need:
                if peer != self.rank and peer not in self._proved:
                    self._prove(peer, tag, sorted(by))
                return tag, sorted(by)
        return None

    def report_lone_accusations(self, deadline: float) -> None:
        """Name (once) every node that accused a peer without a quorum behind it: ``rejected`` gets
        ``(accuser, "accusation: …")``, so peers.jsonl attributes it to the signer, and ``(peer, "accused: …")``:
        read as they stand within ``_SETTLE_S`` of this call (and ``deadline``), a lone accusation is one node's word against another's (a peer that hid its payload from one reader
        only is accused by that reader alone: review r31d F4), so both are named, neither struck."""
        self.forget()  # (every signer read afresh, waited for at most _SETTLE_S: a slow one is counted next round)
        self.settle(max(0.0, min(_SETTLE_S, deadline - time.monotonic())))
        for peer in sorted(self.alive):
            for tag, (by, need) in self.accusers(peer).items():
                if len(by) >= need:
                    continue
                for accuser in sorted(by - {self.rank}):
                    if (accuser, tag, peer) in self._lone_seen:
                        continue
                    self._lone_seen.add((accuser, tag, peer))
                    reason = (f"accusation: node {accuser} accused node {peer} of missing exchange {tag!r} with "
                              f"{len(by)} of the {need} accusers needed; nobody is expelled")
                    log.warning("%s", reason)
                    self.refuse(accuser, reason)
                    self.refuse(peer, f"accused: by node {accuser} without a quorum, of missing exchange {tag!r} "
                                      "(disputed: its word against the accused's)")
