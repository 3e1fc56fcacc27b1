"""Signed accusations and the quorum that expels a node (issue 31; the distributed transport's
:class:`AccusationLedger`).

Node j serves its own accusations (``accuse``: one JSON line ``{"by": j, "peer": k, "tag": t, "sig": …}``
each, signed for the run) from its own server (:mod:`dgrpo.transports.peerserve`), so nobody can delete
or pad another's; at most ``_ACCUSE_LINES`` lines are read from a signer, and a server that serves
anything else there is named once and not asked again. A signed copy of each line is appended to
``accuse/by/{j}`` in the store, read only when j's server is gone.

Node k is expelled once more than half of the live roster *of one exchange* accused it in that
exchange (:func:`quorum`): each node records the live nodes of an exchange as it enters it
(:meth:`AccusationLedger.live_at`), so accusations of an earlier exchange are never counted against a later,
smaller live set (after an expulsion, 2 old accusations of 4 live nodes would otherwise be a quorum
of the 3 left). A lone accusation expels nobody and is named under its signer.
"""

from __future__ import annotations

import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Callable

from dgrpo.errors import PeerFailure

if TYPE_CHECKING:
    from dgrpo.transports.peerserve import PeerChannel
    from dgrpo.transports.signedstore import SignedStore

log = logging.getLogger("dgrpo.transports.storewait")  # (one logger for the exchange and its blame)

_ACCUSE_LINES = 256  # most accusation lines read from one signer
_ACC_TTL_S = 1.0  # how long fetched accusations are reused (each fetch asks every live peer's server)


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
        self._cache: tuple[float, dict[int, list[tuple[int, str]]]] | None = None  # (when, signer → (peer, tag))
        self._live_at: dict[str, frozenset] = {}  # exchange → its live nodes as this node entered it
        self._lone_seen: set[tuple[int, str, int]] = set()  # (accuser, tag, peer) already named

    def forget(self) -> None:
        """Fetch the accusations afresh at the next count (this node posts, or may have accused)."""
        self._cache = None

    def accusations(self, peer: int, deadline: float) -> dict[str, set[int]]:
        """Exchange tag → the live nodes whose valid accusation against ``peer`` names that exchange.

        Each node serves its own accusations (``accuse``: one JSON line per accusation) from its own
        server, so nobody can delete or pad another's; at most ``_ACCUSE_LINES`` lines are read from a
        signer, and a signer that serves junk there is named once (``accusation: junk``)."""
        now = time.monotonic()
        cached = self._cache
        if cached is None or now - cached[0] > self.ttl_s:
            owners = sorted(self.alive - self.junk)  # (one that served junk is not asked again)
            fetched = fetch_all(self.chan, owners, lambda o: "accuse", _ACCUSE_LINES * 512, min(deadline, now + 1.0), 1.0)
            lines = {}
            for by, (raw, problem) in fetched.items():
                items = []
                bad = problem
                if raw is None and problem is None and by != self.rank:  # its server is gone (it left or
                    # stalled): the signed copy it put in the store (anyone may delete or pad it: nothing
                    # read there is blamed on anyone)
                    raw, bad = self.store.read(f"accuse/by/{by}", min(deadline, now + 1.0)), "store"
                for line in (raw or b"")[: _ACCUSE_LINES * 512].splitlines()[:_ACCUSE_LINES]:
                    try:
                        item = json.loads(line)
                        ok = (isinstance(item, dict) and item.get("by") == by and isinstance(item.get("tag"), str)
                              and isinstance(item.get("peer"), int)
                              and self.store.valid(by, f"accuse|{item['tag']}|{item['peer']}", item.get("sig")))
                    except (ValueError, RecursionError, TypeError):
                        ok = False
                    if ok:
                        items.append((item["peer"], item["tag"]))
                    elif bad != "store":
                        bad = bad or "a line that is not an accusation it signed"
                if bad and bad != "store" and by != self.rank and by not in self.junk:
                    self.junk.add(by)
                    reason = f"accusation: node {by} serves junk as its accusations ({bad[:120]}); refused for the run"
                    log.warning("%s", reason)
                    self.refuse(by, reason)
                lines[by] = items
            self._cache = cached = (time.monotonic(), lines)
        out: dict[str, set[int]] = {}
        for by, items in cached[1].items():
            if by == peer or by not in self.alive:
                continue
            for p, tag in items:
                if p == peer:
                    out.setdefault(tag, set()).add(by)
        return out

    def accuse(self, peer: int, tag: str) -> None:
        """Accuse ``peer`` of missing exchange ``tag``: one signed line served by this node's own server
        (``accuse``), and a signed copy appended to ``accuse/by/{rank}`` in the store (when reachable)."""
        line = json.dumps({"by": self.rank, "peer": peer, "tag": tag, "sig": self.store.sign(f"accuse|{tag}|{peer}")})
        self.chan.append("accuse", (line + "\n").encode())
        try:  # a signed copy in the store, read only once this node's server is gone
            self.store.append(f"accuse/by/{self.rank}", (line + "\n").encode())
        except PeerFailure:
            pass
        self._cache = None

    def live_at(self, tag: str) -> None:
        """Record the live roster of exchange ``tag`` as this node enters it (its first post or collect):
        accusations naming ``tag`` are counted against that roster, never a later, smaller one."""
        self._live_at.setdefault(tag, frozenset(self.alive))

    def roster_of(self, tag: str, peer: int) -> frozenset:
        """The live nodes of exchange ``tag`` (``peer`` included); the current ones for an exchange this node
        has not entered (the one a stalled node is about to post, or a tag an accuser made up)."""
        return self._live_at.get(tag, frozenset(self.alive)) | {peer}

    def accusers(self, peer: int, deadline: float) -> dict[str, tuple[set[int], int]]:
        """Exchange → (the accusers of ``peer`` live in that exchange, the quorum of that exchange's live
        roster): an accusation of an earlier exchange is never counted against a smaller live set."""
        out = {}
        for tag, by in self.accusations(peer, deadline).items():
            live = self.roster_of(tag, peer)
            out[tag] = (by & live, quorum(len(live)))
        return out

    def expelled(self, peer: int, deadline: float) -> tuple[str, list[int]] | None:
        """(exchange, accusers) if more than half of the live roster of one exchange accused ``peer`` in it."""
        for tag, (by, need) in sorted(self.accusers(peer, deadline).items()):
            if len(by) >= need:
                return tag, sorted(by)
        return None

    def report_lone_accusations(self, deadline: float) -> None:
        """Name (once) every node that accused a peer without a quorum behind it: ``rejected`` gets
        ``(accuser, "accusation: …")``, so peers.jsonl attributes it to the signer, and ``(peer, "accused: …")``:
        a lone accusation is one node's word against another's (a peer that hid its payload from one reader
        only is accused by that reader alone: review r31d F4), so both are named, neither struck."""
        self._cache = None
        for peer in sorted(self.alive):
            for tag, (by, need) in self.accusers(peer, deadline).items():
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
