"""Bounded exchanges between ranks that each serve their own round data: posting, waiting, blame.

Round data never goes through the shared c10d store, where any rank can delete or overwrite any key
(issue 31, review r31b). Each rank serves its own values from its own read-only server
(:mod:`dgrpo.transports.peerserve`) and reads its peers' there:

* ``{tag}/data/{k}``: node k's payload of exchange ``tag``, served by k. A payload not served by the
  deadline is k's doing: k is accused (signed) and is a failed peer of that round under
  ``on_peer_failure``; one served over its byte cap or slower than the time budget is named
  (``transport`` in ``peers.jsonl``, under k) and left out of that round, without an accusation.
* ``accuse``: node j's own accusations, one JSON line ``{"by": j, "peer": k, "tag": t, "sig": …}`` each,
  served by j (at most ``_ACCUSE_LINES`` read). k is expelled (left out of later exchanges, and told so
  when it posts) once more than half of the live nodes accused it in one exchange; a lone accusation
  expels nobody and is named under its signer; a server that serves anything else there (a line it
  did not sign, junk, too much, too slowly) is named once and not asked again. A signed copy of each
  line is appended to ``accuse/by/{j}`` in the store, read only when j's server is gone (a node that
  stalled past its peers learns it was expelled); nothing read there is blamed on anyone.
* ``{tag}/status/{k}`` in the store: ``left:{signature}``, k stopped on an error and will not post
  ``tag`` (its server may be gone). Signed by k's roster key; an unsigned one (start-up) is ignored.

Every wait ends at the exchange's deadline (``timeout_s`` after this node posted): peers are polled
at once with bounded reads (:meth:`PeerChannel.fetch`). Start-up exchanges (``timeout_s`` given to
:meth:`gather_values`) need every rank that joined.
"""

from __future__ import annotations

import datetime
import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Iterable

from dgrpo.errors import PeerFailure
from dgrpo.registry import LazyModule
from dgrpo.transports.framing import OPEN

log = logging.getLogger(__name__)
dist = LazyModule("torch.distributed")

_SLICE_S = 0.25  # longest pause between two polls of the store
_ACCUSE_LINES = 256  # most accusation lines read from one signer
_ACC_TTL_S = 1.0  # how long fetched accusations are reused (each fetch asks every live peer's server)


def _seconds(s: float) -> datetime.timedelta:
    return datetime.timedelta(seconds=max(s, 0.001))


def quorum(live: int) -> int:
    """Accusers needed to expel a node from a swarm of ``live`` live nodes (itself included): more than
    half of them (3 of 4, 2 of 3); in a swarm of 2, the one peer (no majority exists there)."""
    return max(1, min(live // 2 + 1, live - 1))


class StoreExchange:
    """Post, collect and blame through each rank's own server (``self.chan``, :mod:`peerserve`) and, for
    leave marks and the accusations of a gone peer, ``self.store`` (mixed into the distributed transport).

    Expects ``store`` (a PrefixStore), ``chan``, ``rank``, ``world_size``, ``alive``, ``failed``, ``rejected``,
    ``timeout_s``, ``limit_name``, ``on_peer_failure``, ``signer``, ``verifier``, ``_junk_accusers`` on ``self``.
    """

    _acc_ttl = _ACC_TTL_S

    # ------------------------------------------------------------------ store calls
    @staticmethod
    def _raise(err: Exception):
        raise err

    def _store_call(self, fn, *args):
        """``fn(*args)``; a store that cannot be reached is a one-line PeerFailure (a stalled node that
        comes back after its peers left says so)."""
        try:
            out = fn(*args)
        except dist.DistError as err:
            idle = time.monotonic() - self._last_contact
            if idle > self.timeout_s and self._last_contact > 0:
                self.alive.discard(self.rank)
                raise PeerFailure(f"node {self.rank} was declared failed by its peers: it stalled {idle:.0f} s, more "
                                  f"than {self.limit_name}={self.timeout_s:g}s, and they have left (the rendezvous "
                                  "store is gone)") from err
            raise PeerFailure(f"node {self.rank} lost the rendezvous store (MASTER_ADDR:MASTER_PORT; hosted by the "
                              f"torchrun agent of the first machine, or by rank 0 without torchrun): "
                              f"{type(err).__name__}: {(str(err).splitlines() or [''])[0][:200]}") from err
        self._last_contact = time.monotonic()
        return out

    def _exists(self, key: str) -> bool:
        return bool(self._store_call(self.store.check, [key]))

    def _read(self, key: str, deadline: float) -> bytes | None:
        """The value of ``key`` if it is there (a get bounded by the deadline: it may be deleted meanwhile)."""
        if not self._exists(key):
            return None
        self._store_call(self.store.set_timeout, _seconds(max(2.0, deadline - time.monotonic())))
        try:
            return self.store.get(key)
        except dist.DistStoreError:  # deleted between the check and the get: waited out, not lost
            return None
        except dist.DistError as err:
            return self._store_call(self._raise, err)

    # ------------------------------------------------------------------ signed marks
    def _signed(self, what: str, bound: bool = True) -> str:
        """This node's signature of ``what`` (``bound``: for this run context only); "" before the keys exist."""
        signer, keys = getattr(self, "signer", None), getattr(self, "keys", None)
        if signer is None or keys is None:
            return ""
        return signer._key.sign(f"dgrpo/{what}|{keys.context if bound else ''}".encode()).hex()

    def _valid(self, node: int, what: str, sig, bound: bool = True) -> bool:
        """Whether ``sig`` is node's signature of ``what`` (always, before the keys exist)."""
        keys = getattr(self, "keys", None)
        if getattr(self, "signer", None) is None or keys is None:
            return True
        return keys.valid(node, f"dgrpo/{what}|{keys.context if bound else ''}".encode(), sig)

    def check_startup(self, protocol, timeout_s: float) -> None:
        """Once the keys exist: every rank signs what it runs with (run context, hence the run name and
        config; the roster; the honest nodes) and checks everyone's against its own, so a value a rank
        overwrote in the store stops the run here instead of splitting the swarm.

        Args:
            protocol: the run's :class:`~dgrpo.swarm.protocol.Protocol` (this node's signer, the roster).
            timeout_s: seconds to wait for every rank's record (``swarm.startup_timeout_s``).

        Raises:
            PeerFailure: a rank's record does not verify under its roster key, or its values differ
                (one line naming the ranks and the values).
        """
        self.signer, self.keys = protocol.signers.get(self.rank), protocol.verifier
        chan = self.chan  # every rank's server address as this rank resolved it (an address overwritten in
        # the store before a rank read it would show here as a different map): never read again after this
        values = {"context": protocol.verifier.context, "honest": self.honest,  # equal on every rank
                  "roster": protocol.verifier.roster.fingerprint,
                  "servers": {str(k): chan.address_of(k) for k in range(self.world_size) if k in self.alive}}
        body = json.dumps(values, sort_keys=True)
        mine = json.dumps({"values": values, "sig": self._signed(f"startup|{body}", bound=False)})  # (the
        # run context is one of the values: a signature bound to it could not tell a forgery from a mismatch)
        forged, odd = [], {}
        for node, raw in sorted(self.gather_values("startup", mine, timeout_s=timeout_s).items()):
            try:
                rec = json.loads(raw)
                theirs = rec["values"]
                ok = isinstance(theirs, dict) and self._valid(node, f"startup|{json.dumps(theirs, sort_keys=True)}",
                                                              rec["sig"], bound=False)
            except (ValueError, RecursionError, KeyError, TypeError):
                ok = False
            if not ok:
                forged.append(node)
            elif theirs != values:
                odd[node] = sorted(k for k in values.keys() | theirs.keys() if values.get(k) != theirs.get(k))
        chan.frozen = True
        if forged or odd:
            parts = [f"the start-up records of nodes {forged} do not verify with the keys node {self.rank} holds for "
                     "them (a public key or the record was overwritten in the store)" if forged else "",
                     "; ".join(f"nodes {[n for n in odd if tuple(odd[n]) == ks]} run with another {', '.join(ks)} than node "
                               f"{self.rank}" for ks in sorted({tuple(k) for k in odd.values()}))]
            raise PeerFailure(f"{'; '.join(p for p in parts if p)}: a rank wrote over another's start-up values in "
                              "the store (or the ranks were started differently); stopping before round 0 rather "
                              "than splitting the swarm")

    def _status(self, tag: str, peer: int, deadline: float) -> str | None:
        """``left`` if ``peer`` put a leave mark it signed for ``tag`` in the store (it stopped on an error:
        its own server may be gone), else None (nothing, junk, forged, or unsigned at start-up)."""
        raw = self._read(f"{tag}/status/{peer}", deadline)
        if raw is None:
            return None
        text = raw.decode(errors="replace")
        if (text.startswith("left:") and getattr(self, "keys", None) is not None
                and self._valid(peer, f"left|{tag}|{peer}", text[5:])):
            return "left"
        return None

    def _cap(self, tag: str) -> int:
        """Bytes a reader takes from one peer's value of exchange ``tag`` (from its share: framing.KeyCaps)."""
        caps = getattr(self, "caps", OPEN)
        if tag.startswith("r") and tag[1:].isdigit():
            return caps.bytes + 14 * caps.frames
        if tag.startswith("eq"):
            return min(caps.bytes * self.world_size + (1 << 16), OPEN.bytes)
        return 1 << 20

    def _fetch_all(self, owners: list[int], key_of, cap: int, deadline: float, budget: float = 2.0):
        """owner → (value or None, problem or None) of ``key_of(owner)``, fetched from every owner at once."""
        if not owners:
            return {}
        if len(owners) == 1:
            o = owners[0]
            return {o: self.chan.fetch(o, key_of(o), cap, deadline, budget)}
        with ThreadPoolExecutor(max_workers=len(owners)) as pool:
            futs = {o: pool.submit(self.chan.fetch, o, key_of(o), cap, deadline, budget) for o in owners}
            return {o: f.result() for o, f in futs.items()}

    def accusations(self, peer: int, deadline: float) -> dict[str, set[int]]:
        """Exchange tag → the live nodes whose valid accusation against ``peer`` names that exchange.

        Each node serves its own accusations (``accuse``: one JSON line per accusation) from its own
        server, so nobody can delete or pad another's; at most ``_ACCUSE_LINES`` lines are read from a
        signer, and a signer that serves junk there is named once (``accusation: junk``)."""
        now = time.monotonic()
        cached = getattr(self, "_acc_cache", None)
        if cached is None or now - cached[0] > self._acc_ttl:
            owners = sorted(self.alive - self._junk_accusers)  # (one that served junk is not asked again)
            fetched = self._fetch_all(owners, lambda o: "accuse", _ACCUSE_LINES * 512, min(deadline, now + 1.0), 1.0)
            lines = {}
            for by, (raw, problem) in fetched.items():
                items = []
                bad = problem
                if raw is None and problem is None and by != self.rank:  # its server is gone (it left or
                    # stalled): the signed copy it put in the store (anyone may delete or pad it: nothing
                    # read there is blamed on anyone)
                    raw, bad = self._read(f"accuse/by/{by}", min(deadline, now + 1.0)), "store"
                for line in (raw or b"")[: _ACCUSE_LINES * 512].splitlines()[:_ACCUSE_LINES]:
                    try:
                        item = json.loads(line)
                        ok = (isinstance(item, dict) and item.get("by") == by and isinstance(item.get("tag"), str)
                              and isinstance(item.get("peer"), int)
                              and self._valid(by, f"accuse|{item['tag']}|{item['peer']}", item.get("sig")))
                    except (ValueError, RecursionError, TypeError):
                        ok = False
                    if ok:
                        items.append((item["peer"], item["tag"]))
                    elif bad != "store":
                        bad = bad or "a line that is not an accusation it signed"
                if bad and bad != "store" and by != self.rank and by not in self._junk_accusers:
                    self._junk_accusers.add(by)
                    reason = f"accusation: node {by} serves junk as its accusations ({bad[:120]}); refused for the run"
                    log.warning("%s", reason)
                    self.rejected.append((by, reason))
                lines[by] = items
            self._acc_cache = cached = (time.monotonic(), lines)
        out: dict[str, set[int]] = {}
        for by, items in cached[1].items():
            if by == peer or by not in self.alive:
                continue
            for p, tag in items:
                if p == peer:
                    out.setdefault(tag, set()).add(by)
        return out

    def _accuse(self, peer: int, tag: str) -> None:
        line = json.dumps({"by": self.rank, "peer": peer, "tag": tag, "sig": self._signed(f"accuse|{tag}|{peer}")})
        self.chan.append("accuse", (line + "\n").encode())
        try:  # a signed copy in the store, read only once this node's server is gone
            self._store_call(self.store.append, f"accuse/by/{self.rank}", (line + "\n").encode())
        except PeerFailure:
            pass
        self._acc_cache = None

    def _expelled(self, peer: int, deadline: float) -> tuple[str, list[int]] | None:
        """(exchange, accusers) if a quorum of ``peer``'s live peers accused it in one exchange."""
        need = quorum(len(self.alive | {peer}))
        for tag, by in sorted(self.accusations(peer, deadline).items()):
            if len(by) >= need:
                return tag, sorted(by)
        return None

    def report_lone_accusations(self, deadline: float) -> None:
        """Name (once) every node that accused a peer without a quorum behind it: ``rejected`` gets
        ``(accuser, "accusation: …")``, so peers.jsonl attributes it to the signer."""
        self._acc_cache = None
        for peer in sorted(self.alive):
            for tag, by in self.accusations(peer, deadline).items():
                if len(by) >= quorum(len(self.alive | {peer})):
                    continue
                for accuser in sorted(by - {self.rank}):
                    if (accuser, tag, peer) in self._lone_seen:
                        continue
                    self._lone_seen.add((accuser, tag, peer))
                    reason = (f"accusation: node {accuser} accused node {peer} of missing exchange {tag!r} with "
                              f"{len(by)} of the {quorum(len(self.alive | {peer}))} accusers needed; nobody is expelled")
                    log.warning("%s", reason)
                    self.rejected.append((accuser, reason))

    # ------------------------------------------------------------------ exchange
    def post(self, tag: str, payload: bytes, framed: bool = False) -> None:
        """Serve this node's payload of exchange ``tag`` from its own server (``framed``: as one frame).

        Raises:
            PeerFailure: a quorum of its peers expelled this node (it stalled past their timeout).
        """
        deadline = time.monotonic() + self.timeout_s
        self._acc_cache = None
        out = self._expelled(self.rank, deadline)
        if out is not None:
            self.alive.discard(self.rank)
            raise PeerFailure(f"node {self.rank} was declared failed by its peers in exchange {out[0]!r}: nodes "
                              f"{out[1]} did not receive its messages within {self.limit_name}={self.timeout_s:g}s "
                              "(stalled?); leaving the swarm")
        data_key = f"{tag}/data/{self.rank}"
        self.chan.set(data_key, self._frame(payload) if framed else payload)
        self._own_keys.append((data_key, b"", framed))

    def collect(self, tag: str, peers: Iterable[int], deadline: float | None = None) -> dict[int, bytes]:
        """Payloads of live ``peers`` in exchange ``tag``, fetched from each peer's own server until they
        are in or ``deadline`` (default: now + timeout_s). A peer whose server did not serve it by then
        is accused (signed); one that served more than its cap, or too slowly, is named and left out
        of this round; both are failed peers under ``on_peer_failure``.

        Raises:
            PeerFailure: a peer failed and ``on_peer_failure`` is ``abort`` (names it).
        """
        deadline = time.monotonic() + self.timeout_s if deadline is None else deadline
        pending = sorted((set(peers) & self.alive) - {self.rank})
        got: dict[int, bytes] = {}
        bad: dict[int, str] = {}
        left: list[int] = []
        cap = self._cap(tag)
        next_blame, delay = time.monotonic() + 1.0, 0.005
        while pending:
            fetched = self._fetch_all(pending, lambda p: f"{tag}/data/{p}", cap, deadline)
            for peer, (data, problem) in fetched.items():
                if data is not None:
                    got[peer] = data
                    pending.remove(peer)
                elif problem is not None:
                    bad[peer] = problem
                    pending.remove(peer)
                elif self._status(tag, peer, deadline) == "left":
                    left.append(peer)
                    pending.remove(peer)
            now = time.monotonic()
            if not pending or now >= deadline:
                break
            if now >= next_blame:  # peers others already expelled are not waited for
                for peer in list(pending):
                    out = self._expelled(peer, deadline)
                    if out is not None:
                        pending.remove(peer)
                        self._expel(peer, *out)
                next_blame = now + 1.0
            if pending:
                time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
                delay = min(delay * 1.5, _SLICE_S)
        for peer in left:
            self._expel(peer, tag, [], why="left the swarm (it stopped on an error)")
        if left and self.on_peer_failure == "abort":
            self._fail(left, tag, "sent nothing")
        for peer, problem in sorted(bad.items()):
            log.warning("node %d: exchange %r: node %d's server %s", self.rank, tag, peer, problem)
            self.rejected.append((peer, f"transport: exchange {tag!r}: {problem[:160]}"))
        for peer in pending:
            self.rejected.append((peer, f"missing payload: its server did not serve exchange {tag!r}"))
            self._accuse(peer, tag)
        for peer in pending:
            out = self._expelled(peer, deadline)
            if out is not None:
                self._expel(peer, *out)
        if pending or bad:
            self._fail(pending, tag, "sent nothing", sorted(bad))
        return got

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
            parts.append(f"{who} {what} for exchange {tag!r} within {self.limit_name}={self.timeout_s:g}s "
                         "(dead or stalled)")
        empty = sorted(empty)
        if empty:
            who = f"node{'s' if len(empty) > 1 else ''} {', '.join(map(str, empty))}"
            parts.append(f"{who} served exchange {tag!r} oversized or too slowly within "
                         f"{self.limit_name}={self.timeout_s:g}s (refused)")
        text = "; ".join(parts)
        if self.on_peer_failure == "abort" or self.limit_name != "swarm.timeout_s":
            log.error("%s; aborting (swarm.on_peer_failure=%s)", text, self.on_peer_failure)
            hint = ("start every rank within it" if self.limit_name != "swarm.timeout_s" else
                    "set swarm.on_peer_failure=continue to go on without it")
            raise PeerFailure(f"{text}; aborted ({hint})")
        log.warning("%s; continuing without it this round (swarm.on_peer_failure=continue)", text)

    def leave(self, tags: Iterable[str]) -> None:
        """Mark this node's exchanges ``tags`` as left (signed), so peers stop waiting for it at once."""
        for tag in tags:  # (never over a posted mark: peers may still read that exchange)
            self._store_call(self.store.compare_set, f"{tag}/status/{self.rank}", "",
                             f"left:{self._signed(f'left|{tag}|{self.rank}')}")
