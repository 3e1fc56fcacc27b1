"""What the distributed transport still keeps in the shared c10d store, signed: leave marks, the signed copies
of accusations, and each rank's signed start-up record (:class:`SignedStore`).

Any rank can delete or overwrite any key of the store (issue 31, review r31b), so nothing read there
counts unless its node signed it for this launch:

* ``{tag}/status/{k}``: lines ``left:{signature}`` appended by k, which stopped on an error and will not
  post ``tag`` (its server may be gone). Only a line k's roster key signed for this launch counts;
  anything else there is named once in the log (its signer, or unsigned / another launch's); before the
  keys exist all are ignored.
* the start-up record (exchanged through the ranks' own servers, :meth:`SignedStore.startup_record`): the
  values a rank runs with and its launch nonce, signed with its roster key.

Marks and accusations are bound to the run context and to their signer's launch nonce: 32 fresh random hex
digits each rank draws per process and publishes in its signed start-up record, so a mark or accusation
kept from an earlier run or launch of the same name and config (a rerun, a ``dgrpo resume``) does not
verify (review r31c F4).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import logging
import re
import secrets
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

from dgrpo.errors import PeerFailure
from dgrpo.registry import LazyModule

if TYPE_CHECKING:
    from dgrpo.swarm.identity import SignatureVerifier, Signer

log = logging.getLogger("dgrpo.transports.storewait")  # (one logger for the exchange and its blame)
dist = LazyModule("torch.distributed")

_NONCE = re.compile(r"[0-9a-f]{32}")  # a launch nonce: 16 random bytes in lower-case hex


def seconds(s: float) -> datetime.timedelta:
    """``s`` seconds as the ``timedelta`` torch.distributed's stores and groups take (at least 1 ms: 0 means none)."""
    return datetime.timedelta(seconds=max(s, 0.001))


@dataclass
class Wait:
    """How long an exchange waits for a peer after posting (seconds), and the setting it comes from (named
    in errors): ``swarm.timeout_s``, or ``swarm.startup_timeout_s`` for a start-up exchange
    (:meth:`DistributedTransport.gather_values` swaps both for its duration)."""

    timeout_s: float
    limit_name: str = "swarm.timeout_s"


class SignedStore:
    """This rank's client of the shared c10d store, and the signatures of what it writes there.

    Args:
        store: the process group's store under the ``dgrpo/`` prefix (a ``PrefixStore``).
        rank: this node.
        alive: the transport's live nodes (the same set): this rank leaves it when it finds the store gone
            after it stalled past its peers' timeout.
        wait: the transport's :class:`Wait` (its timeout and setting, named in errors).

    Attributes:
        signer: this node's :class:`~dgrpo.swarm.identity.Signer` (None until :meth:`arm`; None also when
            the run does not sign).
        keys: the roster's :class:`~dgrpo.swarm.identity.SignatureVerifier` (None until :meth:`arm`). With
            both set, leave marks, accusations and the start-up record are signed and checked; before,
            nothing is signed and every mark is taken (leave marks are ignored while ``keys`` is None).
        nonce: this launch's nonce, 32 lower-case hex digits drawn at :meth:`arm` ("" before).
        nonces: node → the launch nonce it published in its start-up record (:meth:`check_records`).
        records: node → ``[nonce, server nonce, signature]`` of the start-up record this rank read from it.
        last_contact: ``time.monotonic()`` of the last store call that succeeded (0.0: none yet).
    """

    def __init__(self, store, rank: int, alive: set[int], wait: Wait):
        self.store, self.rank, self.alive, self.wait = store, rank, alive, wait
        self.signer: Signer | None = None
        self.keys: SignatureVerifier | None = None
        self.nonce = ""
        self.nonces: dict[int, str] = {}
        self.records: dict[int, list[str]] = {}  # node → [nonce, server nonce, signature] of its start-up record
        self.last_contact = 0.0
        self.lost: PeerFailure | None = None  # the store's loss as a wait's check met it (probe), while still live
        self._marks_named: set[tuple[str, int]] = set()  # refused leave marks already named in the log
        self.serve = None  # serve(key, value): append to this node's own server's value (StoreExchange sets it)

    # ------------------------------------------------------------------ store calls
    @staticmethod
    def _raise(err: Exception):
        raise err

    def call(self, fn, *args):
        """``fn(*args)``; a store that cannot be reached is a one-line PeerFailure (a stalled node that
        comes back after its peers left says so)."""
        try:
            out = fn(*args)
        except dist.DistError as err:
            idle = time.monotonic() - self.last_contact
            if idle > self.wait.timeout_s and self.last_contact > 0:
                self.alive.discard(self.rank)
                raise PeerFailure(f"node {self.rank} was declared failed by its peers: it stalled {idle:.0f} s, more "
                                  f"than {self.wait.limit_name}={self.wait.timeout_s:g}s, and they have left (the "
                                  "rendezvous store is gone)") from err
            raise PeerFailure(f"node {self.rank} lost the rendezvous store (MASTER_ADDR:MASTER_PORT; hosted by the "
                              f"torchrun agent of the first machine, or by rank 0 without torchrun): "
                              f"{type(err).__name__}: {(str(err).splitlines() or [''])[0][:200]}") from err
        self.last_contact = time.monotonic()
        return out

    def exists(self, key: str) -> bool:
        return bool(self.call(self.store.check, [key]))

    def append(self, key: str, value: bytes) -> None:
        """Append ``value`` to ``key`` (a store that cannot be reached: PeerFailure, :meth:`call`)."""
        self.call(self.store.append, key, value)

    def probe(self, key: str, at_once: bool = False) -> None:
        """A wait's check of the store for ``key`` (a peer not served yet: its leave mark may be there); the store
        gone while this node is live is kept in :attr:`lost`, not raised (review r31k F8: a peer a moment late then
        stopped the node although it serves its data; the wait raises it if a peer is still missing at its end), and
        not asked again. A node back from a stall past its peers' end is told at once (:meth:`call`), and so is a
        start-up wait (``at_once``: it needs every rank)."""
        if self.lost is not None:
            return
        try:
            self.exists(key)
        except PeerFailure as err:
            if at_once or self.rank not in self.alive:
                raise
            self.lost = err

    def put(self, key: str, value: bytes) -> None:
        """Set ``key`` to ``value`` (a store that cannot be reached: PeerFailure, :meth:`call`)."""
        self.call(self.store.set, key, value)

    def read(self, key: str, deadline: float) -> bytes | None:
        """The value of ``key`` if it is there (a get bounded by the deadline: it may be deleted meanwhile)."""
        if not self.exists(key):
            return None
        self.call(self.store.set_timeout, seconds(max(2.0, deadline - time.monotonic())))
        try:
            return self.store.get(key)
        except dist.DistStoreError:  # deleted between the check and the get: waited out, not lost
            return None
        except dist.DistError as err:
            return self.call(self._raise, err)

    # ------------------------------------------------------------------ signatures
    def arm(self, signer: "Signer | None", keys: "SignatureVerifier") -> None:
        """From the start-up check on: sign with ``signer`` and check with ``keys``; this launch's nonce is
        drawn now (before any mark is signed) unless it was set already."""
        self.nonce = self.nonce or secrets.token_hex(16)
        self.signer, self.keys = signer, keys

    def sign(self, what: str, bound: bool = True) -> str:
        """This node's signature of ``what`` (hex; ``bound``: for this run context and this process's launch
        nonce only); "" before the keys exist."""
        if self.signer is None or self.keys is None:
            return ""
        return self.signer.sign_bytes(f"dgrpo/{what}|{self.bound(self.rank) if bound else ''}".encode())

    def valid(self, node: int, what: str, sig, bound: bool = True, cache: bool = True) -> bool:
        """Whether ``sig`` is node's signature of ``what`` (``bound``: for this run context and the launch
        nonce ``node`` published at the start-up check); always, before the keys exist. ``cache=False``: not kept
        in the verifier's cache (:meth:`SignatureVerifier.valid <dgrpo.swarm.identity.SignatureVerifier.valid>`)."""
        if self.signer is None or self.keys is None:
            return True
        return self.keys.valid(node, f"dgrpo/{what}|{self.bound(node) if bound else ''}".encode(), sig, cache=cache)

    def bound(self, node: int) -> str:
        """What a bound signature of ``node`` covers: the run context and node's launch nonce ("" while
        unknown: no mark an honest rank signs verifies then, since it draws its nonce before it signs)."""
        nonce = self.nonce if node == self.rank else self.nonces.get(node, "")
        return f"{self.keys.context}|{nonce}"

    # ------------------------------------------------------------------ the start-up record
    def startup_record(self, values: dict, server: str = "") -> str:
        """This rank's signed start-up record (JSON): ``values`` (what it runs with), its launch nonce, its
        server's launch nonce ``server`` (the one its server proves to every reader: a record of an earlier launch
        with the same values never passes for this one) and its signature of all three (not bound: the run context
        is one of the values, and a signature bound to it could not tell a forgery from a mismatch). Call after
        :meth:`arm`."""
        body = json.dumps(values, sort_keys=True)
        return json.dumps({"values": values, "nonce": self.nonce, "server": server,
                           "sig": self.sign(f"startup|{body}|{self.nonce}|{server}", bound=False)})

    def _record_ok(self, node: int, body: str, nonce, server, sig, servers: dict[int, str] | None) -> bool:
        """Whether (nonce, server, sig) is ``node``'s signed start-up record of ``body`` for this launch (its
        server's launch nonce as this rank proved it, when ``servers`` holds it)."""
        return (isinstance(nonce, str) and _NONCE.fullmatch(nonce) is not None and isinstance(server, str)
                and (not servers or servers.get(node, server) == server)
                and self.valid(node, f"startup|{body}|{nonce}|{server}", sig, bound=False))

    def check_records(self, values: dict, records: dict[int, str], servers: dict[int, str] | None = None) -> None:
        """Check every rank's start-up record (node → :meth:`startup_record` as its server served it)
        against this rank's ``values``; keep each valid record's nonce in :attr:`nonces` and the record in
        :attr:`records` (``servers``: node → its server's launch nonce as this rank proved it; a record for
        another server launch is refused).

        Raises:
            PeerFailure: a record does not verify under its roster key, or its values differ (one line
                naming the ranks and the values that differ).
        """
        forged, odd, nonces, kept = [], {}, {}, {}
        for node, raw in sorted(records.items()):
            try:
                rec = json.loads(raw)
                theirs, nonce, server = rec["values"], rec["nonce"], rec.get("server", "")
                ok = isinstance(theirs, dict) and self._record_ok(node, json.dumps(theirs, sort_keys=True), nonce,
                                                                  server, rec["sig"], servers)
            except (ValueError, RecursionError, KeyError, TypeError, AttributeError):
                ok = False
            if not ok:
                forged.append(node)
                continue
            nonces[node], kept[node] = nonce, [nonce, server, rec["sig"]]
            if theirs != values:
                odd[node] = sorted(k for k in values.keys() | theirs.keys() if values.get(k) != theirs.get(k))
        self.nonces, self.records = nonces, kept  # each rank's launch nonce, as its own server served it (marks bind to it)
        if forged or odd:
            parts = [f"the start-up records of nodes {forged} do not verify with the keys node {self.rank} holds for "
                     "them (a public key or the record was overwritten in the store)" if forged else "",
                     "; ".join(f"nodes {[n for n in odd if tuple(odd[n]) == ks]} run with another {', '.join(ks)} than node "
                               f"{self.rank}" for ks in sorted({tuple(k) for k in odd.values()}))]
            raise PeerFailure(f"{'; '.join(p for p in parts if p)}: a rank wrote over another's start-up values in "
                              "the store (or the ranks were started differently); stopping before round 0 rather "
                              "than splitting the swarm")

    def launch_id(self) -> str:
        """This launch's id: SHA-256 (first 32 hex digits) of ``node:nonce`` of every rank's launch nonce
        (:attr:`nonces`, from the signed start-up records), in rank order. Every rank that passed
        :meth:`check_records` holds the same nonces, so the same id; one rank's fresh nonce makes
        another id, so no rank chooses it alone and no two launches share it. The run's messages are
        signed for it (:meth:`dgrpo.swarm.protocol.Protocol.bind_launch`)."""
        text = "|".join(f"{n}:{self.nonces[n]}" for n in sorted(self.nonces))
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    # ------------------------------------------------------------------ leave marks
    def status(self, tag: str, peer: int, deadline: float, raw: bytes | None = None) -> str | None:
        """``left`` if ``peer`` appended a leave mark it signed for ``tag`` in the store (it stopped on an error:
        its own server may be gone; of its first and last 4 KiB, 16 lines each), else None. Anything else there
        (junk, a mark another key signed, an unsigned one) is refused and named once in the log: its signer, or
        ``unsigned``. ``raw``: the marks as read elsewhere (the wait loop's:
        :func:`~dgrpo.transports.sidereads.SideReads.ask_gone`), else read here."""
        raw = self.read(f"{tag}/status/{peer}", deadline) if raw is None else raw
        if raw is None or self.keys is None:  # (before the keys exist: unsigned, ignored)
            return None
        lines = (raw[:4096].decode(errors="replace").splitlines()[:16]  # (the first lines and the last: a mark is
                 + raw[-4096:].decode(errors="replace").splitlines()[-16:])  # appended, junk may come before or after)
        if any(x.startswith("left:") and self.valid(peer, f"left|{tag}|{peer}", x[5:]) for x in lines):
            return "left"
        if (tag, peer) not in self._marks_named:
            self._marks_named.add((tag, peer))
            by = [n for n in sorted(self.keys.roster.keys) for x in lines
                  if x.startswith("left:") and self.valid(n, f"left|{tag}|{peer}", x[5:])]
            log.warning("node %d: refused a leave mark for node %d in the store (%s/status/%d): %s", self.rank, peer,
                        tag, peer, f"signed by node {by[0]}, not node {peer}" if by else
                        f"not signed by node {peer} for this launch (unsigned, or a mark of an earlier run or "
                        "launch: its writer cannot be named)")
        return None

    def leave(self, tags: Iterable[str]) -> None:
        """Mark this node's exchanges ``tags`` as left (signed, appended: junk another rank wrote there
        first cannot keep the mark out), so peers stop waiting for it at once; served by this node's own server too
        (:attr:`serve`: its peers read the store's copy only once its server is gone, review r31j F7)."""
        for tag in tags:
            line = f"\nleft:{self.sign(f'left|{tag}|{self.rank}')}\n".encode()  # (own line)
            if self.serve is not None:
                self.serve(f"{tag}/status/{self.rank}", line)
            self.append(f"{tag}/status/{self.rank}", line)
