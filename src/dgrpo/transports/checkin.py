"""The start-up check-in: who joined, and whom the others gave up on (issue 31, must-haves 4 and 5).

Before the (collective) group set-up every rank starts its own server (:mod:`~dgrpo.transports.peerserve`, its signed
address record with its launch nonce under ``dgrpo/addr/{k}``), writes a *mark* under ``dgrpo/join/{k}`` and waits for
everyone. Then it writes its *view* (``dgrpo/join/vote/{k}``, and served by its own server, where nobody can delete
it): ``[]`` once every rank joined, else, once ``swarm.startup_timeout_s`` passed, the ranks it missed. A rank decides
only on the views of a quorum of the roster (more than half: :func:`~dgrpo.transports.accusations.quorum`) that say
the same thing, so no single rank can make another leave at start-up, nor make the others go on without it: a lone
view (or the old unsigned ``dgrpo/join/abandoned`` list) is named under its writer and changes nothing. A rank a
quorum found absent leaves in one line; the others go on without it under ``on_peer_failure=continue`` (under
``abort`` each rank that timed out stops, naming the missing ranks and what of them it lacked). A rank whose key
signed two views is counted for neither, and named (in the stop line too, when no view reached a quorum); a rank the
check-in stops says why, signed (:meth:`PeerChannel.announce_stop`), so a rank that went on quotes it. A rank that
finds a quorum before it wrote its own view writes and serves the view it decided on before it leaves (review r31r
R1: before, it wrote none, and a view shown to it alone left the others one view short); and it serves the launches it
proved with its peers' answers to a challenge bound to them, so one owner's two launches stop every rank naming it
(:mod:`~dgrpo.transports.launchproof`, R2; checked after the group's set-up, where a rank that stops is quoted).

With a roster file (:class:`~dgrpo.transports.peerserve.AddressKeys`) a rank has joined when its server answers a
fresh challenge for the launch nonce of its signed address record (read from the store, or pushed by the rank itself
in its requests to this rank's server: :meth:`PeerChannel.offer`), so a mark, record or view kept from an earlier run
of the same config and roster checks nobody in (review r31c; it is named, never counted against its signer). Marks
(``join|{k}|{nonce}``) and views (``join/view|{k}|{absent}|{nonce}``) are signed with the writer's roster key for the
config and its launch nonce; a line another key signed (or none) is ignored and named once (its signer, or
``unsigned``) in :attr:`Joined.named` (``peers.jsonl``). Without a roster file (``swarm.unsafe_key_exchange``) each
rank's record carries its fresh public key, learned by each reader (:meth:`AddressKeys.trial`), then all holds as
above. With ``keys=None`` any line counts. Anyone can delete store keys: each rank puts its own back while it waits
(over junk written first, too); a rank whose address record was kept from a reader is named precisely (what was
missing, whose key it was), since a shared store cannot say who deleted it.

A rank of another config cannot sign a mark this rank accepts: each rank also writes a signed *config claim*
(:mod:`~dgrpo.transports.checkin_claims`), and a rank whose own key signed a claim of another config that its server
answers for stops the check-in at once in one line naming it (never a split swarm).
"""

from __future__ import annotations

import datetime
import json
import logging
import time
from collections import Counter
from dataclasses import dataclass, field

from dgrpo.errors import PeerFailure
from dgrpo.registry import LazyModule
from dgrpo.transports.accusations import quorum
from dgrpo.transports.checkin_claims import JOIN, ConfigClaims, config_key  # noqa: F401 (config_key re-exported)
from dgrpo.transports.launchproof import Proofs

log = logging.getLogger("dgrpo.transports.rendezvous")
dist = LazyModule("torch.distributed")

ABANDONED = f"{JOIN}/abandoned"  # the old unsigned list: read only to name it (it changes nothing)
_LINES = 64  # most lines read under one key


def vote_key(node: int) -> str:
    """The store key of ``node``'s view."""
    return f"{JOIN}/vote/{node}"


@dataclass
class Joined:
    """What the check-in decided: ``absent`` (sorted ranks a quorum gave up on; empty when all joined) and
    ``named`` ((writer, reason) of each refused mark or view, and each lone view, for ``peers.jsonl``)."""

    absent: list[int] = field(default_factory=list)
    named: list[tuple[int, str]] = field(default_factory=list)


class CheckIn:
    """One rank's check-in (:func:`check_in`); ``keys``: an AddressKeys, or None without a roster file."""

    def __init__(self, store, rank: int, world: int, timeout_s: float, go_on: bool, keys=None, chan=None):
        self.store, self.rank, self.world, self.timeout_s, self.go_on, self.keys = store, rank, world, timeout_s, go_on, keys
        self.chan = chan  # this rank's PeerChannel (its server is up: peers challenge it), or None (unsigned)
        self.need = quorum(world)
        self.named: list[tuple[int, str]] = []
        self._said: set[str] = set()
        self._marked: set[int] = set()  # ranks whose valid mark this rank saw (kept if deleted later)
        self._seen_keys: set[int] = set()  # ranks whose mark key this rank saw in the store
        self.two_faced: dict[int, list[list[int]]] = {}  # rank → the different views its key signed (a proof)
        self.claims = ConfigClaims(self)
        self.proofs = Proofs(chan) if chan is not None and keys is not None else None  # (launches it proved: launchproof)

    # ------------------------------------------------------------------ store
    def _call(self, fn, *args):
        try:
            return fn(*args)
        except dist.DistError as err:
            raise PeerFailure(f"node {self.rank} lost the rendezvous store while the ranks checked in: "
                              f"{type(err).__name__}: {(str(err).splitlines() or [''])[0][:200]}") from err

    def _lines(self, key: str) -> list[str]:
        if not self._call(self.store.check, [key]):
            return []
        try:
            raw = self.store.get(key)
        except dist.DistStoreError:  # deleted between the check and the get (the store's timeout is short here)
            return []
        except dist.DistError as err:
            raise PeerFailure(f"node {self.rank} lost the rendezvous store while the ranks checked in: "
                              f"{type(err).__name__}: {(str(err).splitlines() or [''])[0][:200]}") from err
        return raw[: _LINES * 512].decode(errors="replace").splitlines()[:_LINES]

    def _say(self, writer: int | None, reason: str) -> None:
        if reason in self._said:
            return
        self._said.add(reason)
        log.warning("node %d: %s", self.rank, reason)
        if writer is not None:
            self.named.append((writer, reason))

    # ------------------------------------------------------------------ marks and views
    def _sig(self, what: str) -> str:
        return self.keys.sign(what) if self.keys is not None else "1"

    def _signer(self, node: int, what: str, sig) -> int | None:
        return node if self.keys is None else self.keys.signed_by(node, what, sig)

    def _refused(self, node: int, what: str, by: int | None) -> None:
        if by is None and self.keys is not None and self.keys.world is not None and node not in self.keys.roster.keys:
            return  # (unsafe key exchange: node's key not learned yet, so nothing can be said of the line yet)
        self._say(by, f"check-in: refused a {what} for node {node} in the store: " +
                  (f"signed by node {by}, not node {node}" if by is not None else
                   f"not signed by node {node} for this config (a rank of another config, or unsigned: its writer "
                   "cannot be named)"))

    def launch(self, node: int) -> str | None:
        """``node``'s launch nonce as its own server proved it (its address record in the store, signed by it for
        this config, answered by its server for that nonce: :meth:`PeerChannel.address_of`), else None."""
        if self.chan is None:
            return None
        self.chan.address_of(node)
        return self.chan.launches.get(node)

    def is_marked(self, node: int) -> bool:
        """Whether ``node`` checked in: with a roster file, its server answered for its signed address record of
        this launch (a mark or record of an earlier run, copied into the store, cannot: review r31c); without
        one, any line under its mark key."""
        if node in self._marked:
            return True
        if self.keys is not None and self.chan is not None and self.launch(node) is not None:
            self._marked.add(node)
            return True
        lines = [x for x in self._lines(f"{JOIN}/{node}") if x.strip()]
        if lines:
            self._seen_keys.add(node)
        if lines and (self.keys is None or self.chan is None):
            self._marked.add(node)  # (unsigned: the unsafe_key_exchange opt-in)
            return True
        for line in lines:
            nonce, sig = _fields(line, "nonce")
            by = self._signer(node, f"join|{node}|{nonce}", sig)
            if by == node:
                self._say(None, f"check-in: ignored a check-in mark of node {node} signed for a launch its server "
                                "does not answer for (a mark of an earlier run or launch copied into the store, or "
                                f"its server is unreachable; not counted against node {node})")
            else:
                self._refused(node, "check-in mark", by)
        if lines:
            self.claims.check(node)
        return False

    def _mark(self) -> str:
        nonce = self.chan.nonce if self.chan is not None else ""
        return json.dumps({"nonce": nonce, "sig": self._sig(f"join|{self.rank}|{nonce}")})

    def views(self, node: int) -> set[tuple[int, ...]]:
        """The distinct views ``node`` signed (each a sorted tuple of the ranks it found absent)."""
        out = set()
        signed = self.keys is not None and self.chan is not None
        launch = self.launch(node) if signed else ""
        for line in self._lines(vote_key(node)) + self._served_view(node):
            try:
                rec = json.loads(line)
                absent, nonce = tuple(sorted(set(rec["absent"]))), str(rec.get("nonce", ""))[:64]
                if not all(isinstance(k, int) and 0 <= k < self.world and k != node for k in absent):
                    raise ValueError(absent)
            except (ValueError, KeyError, TypeError, RecursionError, AttributeError):
                if line.strip():
                    self._refused(node, "check-in view", None)
                continue
            by = self._signer(node, f"join/view|{node}|{','.join(map(str, absent))}|{nonce}", rec.get("sig"))
            if by != node:
                self._refused(node, "check-in view", by)
            elif not signed or nonce == launch:
                out.add(absent)
            elif launch is not None:  # (else: its server not proved yet; read again)
                self._say(None, f"check-in: ignored a view of node {node} signed for a launch its server does not "
                                "answer for (a view of an earlier run or launch copied into the store; not counted "
                                f"against node {node})")
        return out

    def _served_view(self, node: int) -> list[str]:
        """``node``'s view as its own server serves it (nobody can delete that one), once its address is known."""
        if self.chan is None or (node != self.rank and self.launch(node) is None):
            return []
        value, _ = self.chan.fetch(node, "join/view", _LINES * 512, time.monotonic() + 1.0, budget=1.0)
        return (value or b"").decode(errors="replace").splitlines()[:_LINES]

    def decide(self) -> tuple[tuple[int, ...] | None, dict[int, tuple[int, ...]]]:
        """(the view of a quorum, or None; node → its one view) from the views in the store now."""
        counted = {}
        for node in range(self.world):
            vs = self.views(node)
            if len(vs) == 1:
                counted[node] = next(iter(vs))
            elif vs:
                self.two_faced[node] = sorted(map(list, vs))
                self._say(node, f"check-in: node {node} signed {len(vs)} different views of who joined "
                                f"({sorted(map(list, vs))}); counted for none")
        for view, count in Counter(counted.values()).items():
            if count >= self.need:
                return view, counted
        return None, counted

    def _put_back(self, mine: tuple[int, ...] | None) -> None:
        """This rank's own mark and view in the store again if someone deleted them, wrote over them or
        appended so much before them that a reader would not reach them (written over: only its own line)."""
        if self.chan is not None:
            self.chan.reassert()  # (its address record is its mark: peers challenge its server for it)
        self.claims.write(again=True)
        mark = self._mark()
        if mark not in self._lines(f"{JOIN}/{self.rank}"):
            self._call(self.store.set, f"{JOIN}/{self.rank}", f"{mark}\n".encode())
        if mine is not None and mine not in self.views(self.rank):
            self._vote(mine)

    def _vote(self, view: tuple[int, ...]) -> None:
        csv, nonce = ",".join(map(str, view)), self.chan.nonce if self.chan is not None else ""
        line = json.dumps({"absent": list(view), "nonce": nonce, "sig": self._sig(f"join/view|{self.rank}|{csv}|{nonce}")})
        self._call(self.store.set, vote_key(self.rank), f"{line}\n".encode())
        if self.chan is not None:
            self.chan.set("join/view", f"{line}\n")  # (served by its own server too: nobody can withhold it)

    # ------------------------------------------------------------------ the wait
    def _missing_text(self, absent) -> str:
        return (f"nodes {list(absent)} did not join within swarm.startup_timeout_s={self.timeout_s:g}s (not started, "
                f"or started too late{self._what_missing(absent)})")

    def _what_missing(self, absent) -> str:
        """What this rank lacked of each absent rank, when that is not plainly nothing: a record in the store
        refused, or one deleted after it was there (its writer cannot be named in a shared store)."""
        parts = [self.claims.note(k) for k in absent if self.claims.note(k)]
        for k in absent if self.chan is not None else ():
            if k in self.chan.bad_addr:
                parts.append(f"node {k}'s server address record (addr/{k}) was refused: it {self.chan.bad_addr[k]}")
            elif k in self._seen_keys:
                parts.append(f"node {k}'s check-in mark is in the store but its server address record (addr/{k}) "
                             "never was (deleted by another rank? a shared store cannot say who)")
        return "; " + "; ".join(parts) if parts else ""

    def run(self) -> Joined:
        deadline = time.monotonic() + self.timeout_s
        mine, give_up = None, None
        self.claims.end = deadline + self.timeout_s  # (no challenge of a config claim outlives the check-in)
        self.claims.write()
        while True:
            self._put_back(mine)
            self.claims.settle()  # (a challenge begun before this rank's view may end after it)
            view, counted = self.decide()
            if view is not None:
                if mine is None and self.rank not in view:  # (decided on others' views: its own written and
                    mine = view  # served all the same, so every honest reader holds the honest views; review r31r R1)
                    self._vote(mine)
                if self.proofs is not None:
                    self.proofs.refresh(time.monotonic() + 1.0)  # (served: its peers check it after the group set-up)
                return self._finish(view, counted)
            if mine is not None and self.proofs is not None:
                self.proofs.refresh(time.monotonic() + 1.0)  # (its peers' answers to its challenge, served early)
            now = time.monotonic()
            if mine is None:
                missing = tuple(k for k in range(self.world) if not self.is_marked(k))
                if not missing or now >= deadline:
                    mine, give_up = missing, now + self.timeout_s
                    self._vote(mine)
                    if missing and not self.go_on:
                        raise PeerFailure(f"{self._missing_text(missing)}: start every rank within it")
                    continue
            elif now >= give_up:
                seen = ", ".join(f"node {n}: {list(v)}" for n, v in sorted(counted.items()))
                if self.two_faced:  # (both views verify under its key: it showed its peers different views)
                    raise PeerFailure("; ".join(f"node {n} signed {len(vs)} different views of who joined ({vs}, both "
                                                f"verify under node {n}'s key: it showed its peers different views)"
                                                for n, vs in sorted(self.two_faced.items())) +
                                      f", so no view reached {self.need} of {self.world} at node {self.rank} (its "
                                      f"count: {seen}); stopping before round 0 rather than splitting the swarm")
                raise PeerFailure(f"node {self.rank}: the ranks' views of who is absent ({seen}) did not agree within "
                                  f"swarm.startup_timeout_s={self.timeout_s:g}s ({self.need} of {self.world} must "
                                  "agree; ranks started around the timeout?): start every rank within it")
            time.sleep(min(0.2, max(0.01, (deadline if mine is None else give_up) - now)))

    def _finish(self, view: tuple[int, ...], counted: dict[int, tuple[int, ...]]) -> Joined:
        for node, theirs in sorted(counted.items()):
            extra = sorted(set(theirs) - set(view))
            if extra and node != self.rank:
                self._say(node, f"check-in: node {node} alone found nodes {extra} absent at start-up "
                                f"({sum(v == theirs for v in counted.values())} of the {self.need} views needed); "
                                "nobody is left out for it")
        if self._call(self.store.check, [ABANDONED]):
            self._say(None, f"check-in: ignored an unsigned list of absent ranks in the store ({ABANDONED}; "
                            "its writer cannot be named)")
        if self.rank in view:
            who = sorted(n for n, v in counted.items() if v == view)
            raise PeerFailure(f"node {self.rank} started after its peers stopped waiting for it "
                              f"(swarm.startup_timeout_s={self.timeout_s:g}s): start every rank within it (nodes {who} "
                              f"found it absent; if it started in time, its server address record addr/{self.rank} "
                              "was kept from them: deleted or overwritten in the store)")
        for k in view:  # (absent: named anyway; a rank that checked in is never named for claims anyone can copy)
            if self.claims.note(k):
                self._say(k, f"check-in: {self.claims.note(k)}; it did not check in")
        if view:
            if not self.go_on:
                raise PeerFailure(f"{self._missing_text(view)}: start every rank within it")
            log.warning("%s; going on without them (swarm.on_peer_failure=continue)", self._missing_text(view))
        return Joined(list(view), self.named)


def _fields(line: str, name: str) -> tuple[str, object]:
    """(``name``'s value, the signature) of a JSON record line; ("", the line) for anything else."""
    try:
        rec = json.loads(line)
        return str(rec.get(name, ""))[:64], rec.get("sig")
    except (ValueError, RecursionError, AttributeError):
        return "", line.strip()


def check_in(store, rank: int, world: int, timeout_s: float, go_on: bool = False, keys=None, chan=None) -> Joined:
    """Every rank marks itself checked in and waits for all before the (collective) group set-up, so that a
    rank missing after ``timeout_s`` is named by the others and a rank that starts after a quorum of them
    gave up is told so, each in one line (module docstring: marks, views, quorum, signatures).

    Args:
        store: the rendezvous store (its timeout is set to 2 s here and restored to ``timeout_s``).
        go_on: ``swarm.on_peer_failure=continue``: the ranks that joined go on without the ones a quorum
            found absent.
        keys: an :class:`~dgrpo.transports.peerserve.AddressKeys` (roster file: marks and views signed),
            or None (unsigned: the ``unsafe_key_exchange`` opt-in).
        chan: this rank's :class:`~dgrpo.transports.peerserve.PeerChannel`, its server up (it serves this
            rank's view and answers its peers' challenges); made here (on ``dgrpo/`` of ``store``) when None.

    Returns:
        :class:`Joined`: the ranks a quorum gave up on (empty when every rank joined), the writers named.

    Raises:
        PeerFailure: ranks missing after ``timeout_s`` without ``go_on`` (names them); this rank started after
            a quorum stopped waiting for it; the views did not agree within another ``timeout_s``; the store
            was lost.
    """
    store.set_timeout(datetime.timedelta(seconds=2))
    if chan is None:
        from dgrpo.transports.peerserve import PeerChannel

        chan = PeerChannel(rank, dist.PrefixStore("dgrpo", store), keys=keys)
    try:
        return CheckIn(store, rank, world, timeout_s, go_on, keys, chan).run()
    except PeerFailure as err:  # (signed: its peers that went on quote it instead of calling it silent; r31f H6)
        chan.announce_stop(str(err))
        raise
    finally:
        store.set_timeout(datetime.timedelta(seconds=max(timeout_s, 0.001)))
