"""Bounded exchanges between ranks that each serve their own round data: posting, waiting, blame.

Round data never goes through the shared c10d store, where any rank can delete or overwrite any key
(issue 31, review r31b). Each rank serves its own values from its own read-only server
(:mod:`dgrpo.transports.peerserve`) and reads its peers' there:

* ``{tag}/data/{k}``: node k's payload of exchange ``tag``, served by k. A payload not served by the
  deadline is k's doing: k is accused (signed) and is a failed peer of that round under
  ``on_peer_failure``; one served over its byte cap or slower than the time budget is named
  (``transport`` in ``peers.jsonl``, under k) and left out of that round, without an accusation.
* ``accuse``: node j's own signed accusations, served by j (:mod:`dgrpo.transports.accusations`): k is
  expelled (left out of later exchanges, and told so when it posts) once more than half of the live
  roster of one exchange accused it in that exchange; a lone accusation expels nobody and is named
  under its signer.
* ``{tag}/status/{k}`` in the store: lines ``left:{signature}`` appended by k, which stopped on an error and
  will not post ``tag`` (its server may be gone). Only a line k's roster key signed for this launch counts;
  anything else there is named once in the log (its signer, or unsigned / another launch's); before the
  keys exist all are ignored.

Marks and accusations are bound to the run context and to their signer's launch nonce: 32 fresh random hex
digits each rank draws per process and publishes in its signed start-up record (:meth:`check_startup`),
so a mark or accusation kept from an earlier run or launch of the same name and config (a rerun, a
``dgrpo resume``) does not verify (review r31c F4).

Every wait ends at the exchange's deadline (``timeout_s`` after this node posted): peers are polled
at once with bounded reads (:meth:`PeerChannel.fetch`). Start-up exchanges (``timeout_s`` given to
:meth:`gather_values`) need every rank that joined.
"""

from __future__ import annotations

import datetime
import json
import logging
import re
import secrets
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Iterable

from dgrpo.errors import PeerFailure
from dgrpo.registry import LazyModule
from dgrpo.transports.accusations import Accusations, quorum  # noqa: F401 (quorum: re-exported)
from dgrpo.transports.framing import OPEN

log = logging.getLogger(__name__)
dist = LazyModule("torch.distributed")

_SLICE_S = 0.25  # longest pause between two polls of the store
_NONCE = re.compile(r"[0-9a-f]{32}")  # a launch nonce: 16 random bytes in lower-case hex


def _seconds(s: float) -> datetime.timedelta:
    return datetime.timedelta(seconds=max(s, 0.001))


class StoreExchange(Accusations):
    """Post, collect and blame through each rank's own server (``self.chan``, :mod:`peerserve`) and, for
    leave marks and the accusations of a gone peer, ``self.store`` (mixed into the distributed transport).

    Expects ``store`` (a PrefixStore), ``chan``, ``rank``, ``world_size``, ``alive``, ``failed``, ``rejected``,
    ``timeout_s``, ``limit_name``, ``on_peer_failure``, ``signer``, ``verifier``, ``_junk_accusers`` on ``self``.
    """

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
        """This node's signature of ``what`` (``bound``: for this run context and this process's launch
        nonce only); "" before the keys exist."""
        signer, keys = getattr(self, "signer", None), getattr(self, "keys", None)
        if signer is None or keys is None:
            return ""
        return signer._key.sign(f"dgrpo/{what}|{self._bound(self.rank) if bound else ''}".encode()).hex()

    def _valid(self, node: int, what: str, sig, bound: bool = True) -> bool:
        """Whether ``sig`` is node's signature of ``what`` (``bound``: for this run context and the launch
        nonce ``node`` published at the start-up check); always, before the keys exist."""
        keys = getattr(self, "keys", None)
        if getattr(self, "signer", None) is None or keys is None:
            return True
        return keys.valid(node, f"dgrpo/{what}|{self._bound(node) if bound else ''}".encode(), sig)

    def _bound(self, node: int) -> str:
        """What a bound signature of ``node`` covers: the run context and node's launch nonce ("" while
        unknown: no mark an honest rank signs verifies then, since it draws its nonce before it signs)."""
        nonce = getattr(self, "nonce", "") if node == self.rank else getattr(self, "nonces", {}).get(node, "")
        return f"{self.keys.context}|{nonce}"

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
        self.nonce = getattr(self, "nonce", "") or secrets.token_hex(16)  # this launch's, before any mark is signed
        self.signer, self.keys = protocol.signers.get(self.rank), protocol.verifier
        chan = self.chan  # every rank's server address as this rank resolved it (an address overwritten in
        # the store before a rank read it would show here as a different map): never read again after this
        values = {"context": protocol.verifier.context, "honest": self.honest,  # equal on every rank
                  "roster": protocol.verifier.roster.fingerprint,
                  "servers": {str(k): chan.address_of(k) for k in range(self.world_size) if k in self.alive}}
        body = json.dumps(values, sort_keys=True)
        mine = json.dumps({"values": values, "nonce": self.nonce,
                           "sig": self._signed(f"startup|{body}|{self.nonce}", bound=False)})  # (the run
        # context is one of the values: a signature bound to it could not tell a forgery from a mismatch)
        forged, odd, nonces = [], {}, {}
        for node, raw in sorted(self.gather_values("startup", mine, timeout_s=timeout_s).items()):
            try:
                rec = json.loads(raw)
                theirs, nonce = rec["values"], rec["nonce"]
                ok = (isinstance(theirs, dict) and isinstance(nonce, str) and _NONCE.fullmatch(nonce) is not None
                      and self._valid(node, f"startup|{json.dumps(theirs, sort_keys=True)}|{nonce}", rec["sig"],
                                      bound=False))
            except (ValueError, RecursionError, KeyError, TypeError):
                ok = False
            if not ok:
                forged.append(node)
                continue
            nonces[node] = nonce
            if theirs != values:
                odd[node] = sorted(k for k in values.keys() | theirs.keys() if values.get(k) != theirs.get(k))
        chan.frozen = True
        self.nonces = nonces  # each rank's launch nonce, as its own server served it (marks bind to it)
        if forged or odd:
            parts = [f"the start-up records of nodes {forged} do not verify with the keys node {self.rank} holds for "
                     "them (a public key or the record was overwritten in the store)" if forged else "",
                     "; ".join(f"nodes {[n for n in odd if tuple(odd[n]) == ks]} run with another {', '.join(ks)} than node "
                               f"{self.rank}" for ks in sorted({tuple(k) for k in odd.values()}))]
            raise PeerFailure(f"{'; '.join(p for p in parts if p)}: a rank wrote over another's start-up values in "
                              "the store (or the ranks were started differently); stopping before round 0 rather "
                              "than splitting the swarm")

    def _status(self, tag: str, peer: int, deadline: float) -> str | None:
        """``left`` if ``peer`` appended a leave mark it signed for ``tag`` in the store (it stopped on an error:
        its own server may be gone), else None. Anything else there (junk, a mark another key signed, an
        unsigned one) is refused and named once in the log: its signer, or ``unsigned``."""
        raw = self._read(f"{tag}/status/{peer}", deadline)
        if raw is None or getattr(self, "keys", None) is None:  # (before the keys exist: unsigned, ignored)
            return None
        lines = raw[:4096].decode(errors="replace").splitlines()[:16]
        if any(x.startswith("left:") and self._valid(peer, f"left|{tag}|{peer}", x[5:]) for x in lines):
            return "left"
        if (tag, peer) not in self._marks_named:
            self._marks_named.add((tag, peer))
            by = [n for n in sorted(self.keys.roster.keys) for x in lines
                  if x.startswith("left:") and self._valid(n, f"left|{tag}|{peer}", x[5:])]
            log.warning("node %d: refused a leave mark for node %d in the store (%s/status/%d): %s", self.rank, peer,
                        tag, peer, f"signed by node {by[0]}, not node {peer}" if by else
                        f"not signed by node {peer} for this launch (unsigned, or a mark of an earlier run or "
                        "launch: its writer cannot be named)")
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

    # ------------------------------------------------------------------ exchange
    def post(self, tag: str, payload: bytes, framed: bool = False) -> None:
        """Serve this node's payload of exchange ``tag`` from its own server (``framed``: as one frame).

        Raises:
            PeerFailure: a quorum of its peers expelled this node (it stalled past their timeout).
        """
        deadline = time.monotonic() + self.timeout_s
        self._acc_cache = None
        self.live_at(tag)
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
        self.live_at(tag)
        pending = sorted((set(peers) & self.alive) - {self.rank})
        got: dict[int, bytes] = {}
        bad: dict[int, str] = {}
        left: list[int] = []
        cap = self._cap(tag)
        next_blame, delay = time.monotonic() + 1.0, 0.005
        while pending:
            self.chan.reassert()  # (start-up: this rank's signed address back in the store if overwritten)
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
        forged = [f"the server address of node {p} in the store (addr/{p}): it {self.chan.bad_addr[p]}" for p in pending
                  if p in self.chan.bad_addr and p not in self.chan.addrs]
        if forged:  # (start-up only: addresses are never read again once the ranks checked them)
            raise PeerFailure(f"node {self.rank} refused {'; '.join(forged)}; another rank wrote over it (until "
                              f"{self.limit_name}={self.timeout_s:g}s); stopping before round 0")
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
        """Mark this node's exchanges ``tags`` as left (signed, appended: junk another rank wrote there
        first cannot keep the mark out), so peers stop waiting for it at once."""
        for tag in tags:
            self._store_call(self.store.append, f"{tag}/status/{self.rank}",
                             f"\nleft:{self._signed(f'left|{tag}|{self.rank}')}\n".encode())  # (own line)
