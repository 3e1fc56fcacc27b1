"""Bounded exchanges through a c10d store that every rank can write: posting, waiting, blame.

The store has no access control: any rank can set, append to or delete any key. So nothing a rank
reads there decides by itself who failed or who spoke (issue 31):

* ``{tag}/data/{k}`` holds node k's payload; ``{tag}/status/{k}`` is set by k to a posted mark that
  names the payload's digest, signed by k (:mod:`dgrpo.transports.marks`). A reader takes exactly that
  payload (its frame first, what others appended after it) and polls while it is not there; k writes
  back its keys and marks that another rank deleted or replaced. A mark k did not sign is no evidence:
  the payload is then read as found at the deadline (at start-up, before any key exists, once it stayed
  unchanged for ``_UNSIGNED_GRACE_S``), named ``unverified`` under k's key, and nobody is accused.
* ``{tag}/status/{k}`` = ``left:{signature}``: k stopped on an error and will not post ``tag``.
  Signed by k's roster key; an unsigned one (start-up: no key yet) is ignored.
* ``accuse/{k}``: lines ``{"by": j, "tag": t, "sig": …}`` appended by each node j that found k missing
  in exchange t, signed by j. k is expelled (left out of later exchanges, and told so when it
  posts) once more than half of the live nodes accused it in one exchange; a lone accusation
  expels nobody and is named (``accusation`` in ``peers.jsonl``, under its signer).

Every wait ends at the exchange's deadline (``timeout_s`` after this node posted): status marks and
payloads are polled with store calls of bounded duration, never a ``get`` without a timeout. A peer
whose valid mark names a payload missing at the deadline (never written, or deleted by another rank)
is a failed peer for that round under ``on_peer_failure``, without an accusation (who deleted it is
unknowable); only a peer with neither a valid mark nor any data is accused. Start-up exchanges
(``timeout_s`` given to :meth:`gather_values`) need every rank that joined.
"""

from __future__ import annotations

import datetime
import json
import logging
import time
from typing import Iterable

from dgrpo.errors import PeerFailure
from dgrpo.registry import LazyModule
from dgrpo.transports import marks
from dgrpo.transports.framing import OPEN

log = logging.getLogger(__name__)
dist = LazyModule("torch.distributed")

_SLICE_S = 0.25  # longest pause between two polls of the store
_UNSIGNED_GRACE_S = 1.0  # start-up (no keys yet): a payload unchanged this long is taken without a valid mark


def _seconds(s: float) -> datetime.timedelta:
    return datetime.timedelta(seconds=max(s, 0.001))


def quorum(live: int) -> int:
    """Accusers needed to expel a node from a swarm of ``live`` live nodes (itself included): more than
    half of them (3 of 4, 2 of 3); in a swarm of 2, the one peer (no majority exists there)."""
    return max(1, min(live // 2 + 1, live - 1))


class StoreExchange:
    """Post, collect and blame through ``self.store`` (mixed into the distributed transport).

    Expects ``store`` (a PrefixStore), ``rank``, ``world_size``, ``alive``, ``failed``, ``rejected``,
    ``timeout_s``, ``limit_name``, ``on_peer_failure``, ``signer`` and ``verifier`` on ``self``.
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
        values = {"context": protocol.verifier.context, "honest": self.honest,  # equal on every rank
                  "roster": protocol.verifier.roster.fingerprint}
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
        if forged or odd:
            parts = [f"the start-up records of nodes {forged} do not verify with the keys node {self.rank} holds for "
                     "them (a public key or the record was overwritten in the store)" if forged else "",
                     "; ".join(f"nodes {[n for n in odd if tuple(odd[n]) == ks]} run with another {', '.join(ks)} than node "
                               f"{self.rank}" for ks in sorted({tuple(k) for k in odd.values()}))]
            raise PeerFailure(f"{'; '.join(p for p in parts if p)}: a rank wrote over another's start-up values in "
                              "the store (or the ranks were started differently); stopping before round 0 rather "
                              "than splitting the swarm")

    def _status(self, tag: str, peer: int, deadline: float) -> tuple[str | None, str | None]:
        """(``posted``, the digest it signed), (``left``, None) for a leave mark it signed, or (None, None):
        nothing, junk, a forged mark, or an unsigned leave mark (start-up: no key signs it yet)."""
        raw = self._read(f"{tag}/status/{peer}", deadline)
        if raw is None:
            return None, None
        mark = marks.parse_mark(raw)
        if mark is not None:
            ok = self._valid(peer, marks.statement(tag, peer, mark[0]), mark[1])
            return ("posted", mark[0]) if ok else (None, None)
        text = raw.decode(errors="replace")
        if (text.startswith("left:") and getattr(self, "keys", None) is not None
                and self._valid(peer, f"left|{tag}|{peer}", text[5:])):
            return "left", None
        return None, None

    def accusations(self, peer: int, deadline: float) -> dict[str, set[int]]:
        """Exchange tag → the live nodes whose valid accusation against ``peer`` names that exchange."""
        raw = self._read(f"accuse/{peer}", deadline) or b""
        out: dict[str, set[int]] = {}
        for line in raw.splitlines()[: 64 * self.world_size]:
            try:
                item = json.loads(line)
            except (ValueError, RecursionError):
                continue
            if not isinstance(item, dict):
                continue
            by, tag = item.get("by"), item.get("tag")
            if (isinstance(by, int) and isinstance(tag, str) and by != peer and by in self.alive
                    and self._valid(by, f"accuse|{tag}|{peer}", item.get("sig"))):
                out.setdefault(tag, set()).add(by)
        return out

    def _accuse(self, peer: int, tag: str) -> None:
        line = json.dumps({"by": self.rank, "tag": tag, "sig": self._signed(f"accuse|{tag}|{peer}")}) + "\n"
        self._store_call(self.store.append, f"accuse/{peer}", line.encode())

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
        """Publish this node's payload of exchange ``tag`` (``framed``: appended as a frame).

        Raises:
            PeerFailure: a quorum of its peers expelled this node (it stalled past their timeout).
        """
        deadline = time.monotonic() + self.timeout_s
        out = self._expelled(self.rank, deadline)
        if out is not None:
            self.alive.discard(self.rank)
            raise PeerFailure(f"node {self.rank} was declared failed by its peers in exchange {out[0]!r}: nodes "
                              f"{out[1]} did not receive its messages within {self.limit_name}={self.timeout_s:g}s "
                              "(stalled?); leaving the swarm")
        data_key, status_key = f"{tag}/data/{self.rank}", f"{tag}/status/{self.rank}"
        body = self._frame(payload) if framed else payload
        self._store_call(self.store.append if framed else self.store.set, data_key, body)
        digest = marks.digest(payload)
        mark = marks.make_mark(digest, self._signed(marks.statement(tag, self.rank, digest)))
        self._own_keys.append((data_key, body, framed))
        self._own_keys.append((status_key, mark, None))  # (None: a mark, kept when the data keys are deleted)
        self._store_call(self.store.set, status_key, mark)

    def _restore_own(self) -> None:
        """Write again any payload or posted mark of this node that another rank deleted or replaced while
        peers may still read it (readers wait for the value the mark signed); a framed payload whose frame
        is still among the first the caps let a reader take is left as it is."""
        for key, body, framed in self._own_keys:
            value = self._read(key, time.monotonic() + 2.0)
            if framed and value is not None and marks.match(value, marks.digest(body[14:]), getattr(self, "caps", OPEN)):
                continue  # its frame is there, within the caps (what others appended is read after it)
            if value != body:
                if key not in self._restored:
                    self._restored.add(key)
                    log.warning("node %d: its %s %s was %s the store by another rank; written again", self.rank,
                                "posted mark" if framed is None else "payload", key,
                                "deleted from" if value is None else "changed in")
                self._store_call(self.store.set, key, body)

    def collect(self, tag: str, peers: Iterable[int], deadline: float | None = None) -> dict[int, bytes]:
        """Payloads of live ``peers`` in exchange ``tag``, polled until they are in or ``deadline``
        (default: now + timeout_s); see the module docstring for what a missing peer becomes.

        Raises:
            PeerFailure: a peer failed and ``on_peer_failure`` is ``abort`` (names it).
        """
        deadline = time.monotonic() + self.timeout_s if deadline is None else deadline
        pending = sorted((set(peers) & self.alive) - {self.rank})
        got: dict[int, bytes] = {}
        no_data: set[int] = set()  # a valid mark, but not the payload it signed (yet)
        found: dict[int, bytes] = {}  # the data as last found, for peers without a matching valid mark
        left: list[int] = []
        caps = getattr(self, "caps", OPEN)
        unsigned, since = getattr(self, "keys", None) is None, {}
        next_blame, delay = time.monotonic() + 1.0, 0.005
        while pending:
            for peer in list(pending):
                state, digest = self._status(tag, peer, deadline)
                if state == "left":
                    left.append(peer)
                    pending.remove(peer)
                    continue
                data = self._read(f"{tag}/data/{peer}", deadline)
                body = marks.match(data, digest, caps) if state == "posted" and data is not None else None
                if body is not None:  # its own frame first, then what others wrote there (signed or refused)
                    own = self._frame(body)
                    got[peer] = body if data == body else own + data.replace(own, b"", 1)
                    pending.remove(peer)
                    no_data.discard(peer)
                    found.pop(peer, None)
                    continue
                if state == "posted":
                    no_data.add(peer)
                if data is not None:
                    if found.get(peer) != data:
                        since[peer] = time.monotonic()
                    found[peer] = data
                    if unsigned and time.monotonic() - since[peer] >= _UNSIGNED_GRACE_S:
                        pending.remove(peer)  # start-up: no key signs a mark yet, so a jammed one says nothing
                        self._take_found(tag, peer, found.pop(peer), got, peer in no_data)
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
            self._restore_own()
            if pending:  # (polled: a c10d wait that times out logs a C++ warning every time)
                time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
                delay = min(delay * 1.5, _SLICE_S)
        for peer in left:
            self._expel(peer, tag, [], why="left the swarm (it stopped on an error)")
        if left and self.on_peer_failure == "abort":
            self._fail(left, tag, "sent nothing")
        for peer in [p for p in pending if p in found]:  # no valid mark for what is there: read as found
            self._take_found(tag, peer, found[peer], got, peer in no_data)
        pending = [p for p in pending if p not in found]
        missing = [p for p in pending if p not in no_data]
        empty = [p for p in pending if p in no_data]
        for peer in empty:
            self.rejected.append((peer, f"missing payload: marked exchange {tag!r} posted, payload not in the store"))
        if missing:
            for peer in missing:
                self._accuse(peer, tag)
            for peer in missing:
                out = self._expelled(peer, deadline)
                if out is not None:
                    self._expel(peer, *out)
        if missing or empty:
            self._fail(missing, tag, "sent nothing", empty)
        return got

    def _take_found(self, tag: str, peer: int, data: bytes, got: dict[int, bytes], marked: bool) -> None:
        """Take a peer's payload as found (no valid mark for it): logged, and named under its key."""
        got[peer] = data
        what = "not the payload its mark signed" if marked else "no posted mark it signed"
        log.warning("node %d: exchange %r: node %d's payload read as found (%s: overwritten or jammed by another "
                    "rank?)", self.rank, tag, peer, what)
        self.rejected.append((peer, f"unverified: exchange {tag!r} payload read without a matching signed mark ({what})"))

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
            parts.append(f"{who} marked exchange {tag!r} posted but its payload was missing from the store within "
                         f"{self.limit_name}={self.timeout_s:g}s (never written, or deleted by another rank)")
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
