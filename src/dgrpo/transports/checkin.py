"""The start-up check-in: who joined, and whom the others gave up on (issue 31, must-haves 4 and 5).

Before the (collective) group set-up every rank writes a *mark* under ``dgrpo/join/{k}`` of the
rendezvous store and waits for everyone's. Then it writes its *view* under ``dgrpo/join/vote/{k}``:
``[]`` once it saw every rank's mark, else, once ``swarm.startup_timeout_s`` passed, the ranks it
missed. A rank decides only on the views of a quorum of the roster (more than half of it, the rule of
the accusations: :func:`~dgrpo.transports.accusations.quorum`) that say the same thing: every rank
joined, or the same ranks are absent. So no single rank can make another leave at start-up, nor make
the others go on without it: a lone view (or the old unsigned ``dgrpo/join/abandoned`` list) is named
under its writer and changes nothing. A rank that a quorum found absent (it started after they gave
up) leaves in one line, and the others go on without it under ``on_peer_failure=continue`` (under
``abort`` each rank that timed out stops at once, naming the missing ranks). Two quorums of different
views cannot both exist, as each rank writes one view (a rank whose key signed two is counted for
neither, and named).

With a roster file (:class:`~dgrpo.transports.peerserve.AddressKeys`) marks and views are signed with
the writer's roster key, bound to the config fingerprint and to their purpose (``join|{k}``,
``join/view|{k}|{absent}``); a line that does not verify under its node's key is ignored and named once
in the log (its signer, or ``unsigned``) and returned in :attr:`Joined.named` (``peers.jsonl``).
Without a roster file (``swarm.unsafe_key_exchange``, loopback only) any line counts: a local process
can write another rank's mark or view. Anyone can delete store keys: each rank puts its own mark and
view back while it waits; one deleted after its owner decided can only hold a slower rank until its
wait ends (a start-up stop in one line, never a split swarm). A rank writes its own keys over whatever
is there whenever its line is not among the first ``_LINES`` (junk written first cannot keep it out).

A rank of another config cannot sign a mark this rank accepts, so it would only be "missing" after
``startup_timeout_s``. Each rank therefore also writes a *config claim* under ``dgrpo/join/config/{k}``: its
config fingerprint signed with its roster key, bound to nothing else. When a rank's mark does not verify
but its claim does, under its own key, for another fingerprint, the check-in stops at once in one line
naming that rank (a value that differs between ranks stops the run at start-up, never a split swarm). A
claim copied from an earlier run of another config can stop a start-up the same way (named as a copy it
might be), never let anyone in.
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

log = logging.getLogger("dgrpo.transports.rendezvous")
dist = LazyModule("torch.distributed")

JOIN = "dgrpo/join"
ABANDONED = f"{JOIN}/abandoned"  # the old unsigned list: read only to name it (it changes nothing)
_LINES = 64  # most lines read under one key


def config_key(node: int) -> str:
    """The store key of ``node``'s config claim."""
    return f"{JOIN}/config/{node}"


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

    def __init__(self, store, rank: int, world: int, timeout_s: float, go_on: bool, keys=None):
        self.store, self.rank, self.world, self.timeout_s, self.go_on, self.keys = store, rank, world, timeout_s, go_on, keys
        self.need = quorum(world)
        self.named: list[tuple[int, str]] = []
        self._said: set[str] = set()
        self._marked: set[int] = set()  # ranks whose valid mark this rank saw (kept if deleted later)

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
        self._say(by, f"check-in: refused a {what} for node {node} in the store: " +
                  (f"signed by node {by}, not node {node}" if by is not None else
                   f"not signed by node {node} for this config (a rank of another config, or unsigned: its writer "
                   "cannot be named)"))

    def is_marked(self, node: int) -> bool:
        if node in self._marked:
            return True
        lines = [x for x in self._lines(f"{JOIN}/{node}") if x.strip()]
        for line in lines:
            by = self._signer(node, f"join|{node}", line)
            if by == node:
                self._marked.add(node)
                return True
        for line in lines:
            self._refused(node, "check-in mark", self._signer(node, f"join|{node}", line))
        if lines:
            self._other_config(node)
        return False

    def _claim(self, node: int, fp: str) -> bytes:
        return f"dgrpo/join-config|{node}|{fp}".encode()

    def _write_claim(self) -> None:
        if self.keys is not None:
            fp = self.keys.bound
            rec = json.dumps({"fp": fp, "sig": self.keys.key.sign(self._claim(self.rank, fp)).hex()})
            self._call(self.store.set, config_key(self.rank), f"{rec}\n".encode())

    def _other_config(self, node: int) -> None:
        """Stop at once when ``node``'s own key signed a config claim of another fingerprint."""
        if self.keys is None:
            return
        from cryptography.exceptions import InvalidSignature

        from dgrpo.swarm.identity import SIGNATURE_HEX, canonical_hex

        for line in self._lines(config_key(node)):
            try:
                rec = json.loads(line)
                fp, raw = str(rec["fp"])[:128], canonical_hex(rec["sig"], SIGNATURE_HEX)
                if raw is None or fp == self.keys.bound:
                    continue
                pub = self.keys.roster.public(node)
                if pub is None:
                    continue
                pub.verify(raw, self._claim(node, fp))
            except (ValueError, KeyError, TypeError, RecursionError, InvalidSignature):
                continue
            raise PeerFailure(f"node {node} runs another config than node {self.rank} (its signed check-in names "
                              f"config fingerprint {fp[:16]}…, this rank's is {self.keys.bound[:16]}…; or its claim "
                              "of an earlier run was copied into the store): start every rank with the same "
                              "config file and overrides")

    def views(self, node: int) -> set[tuple[int, ...]]:
        """The distinct views ``node`` signed (each a sorted tuple of the ranks it found absent)."""
        out = set()
        for line in self._lines(vote_key(node)):
            try:
                rec = json.loads(line)
                absent = tuple(sorted(set(rec["absent"])))
                if not all(isinstance(k, int) and 0 <= k < self.world and k != node for k in absent):
                    raise ValueError(absent)
            except (ValueError, KeyError, TypeError, RecursionError):
                if line.strip():
                    self._refused(node, "check-in view", None)
                continue
            by = self._signer(node, f"join/view|{node}|{','.join(map(str, absent))}", rec.get("sig"))
            if by == node:
                out.add(absent)
            else:
                self._refused(node, "check-in view", by)
        return out

    def decide(self) -> tuple[tuple[int, ...] | None, dict[int, tuple[int, ...]]]:
        """(the view of a quorum, or None; node → its one view) from the views in the store now."""
        counted = {}
        for node in range(self.world):
            vs = self.views(node)
            if len(vs) == 1:
                counted[node] = next(iter(vs))
            elif vs:
                self._say(node, f"check-in: node {node} signed {len(vs)} different views of who joined "
                                f"({sorted(map(list, vs))}); counted for none")
        for view, count in Counter(counted.values()).items():
            if count >= self.need:
                return view, counted
        return None, counted

    def _put_back(self, mine: tuple[int, ...] | None) -> None:
        """This rank's own mark and view in the store again if someone deleted them, wrote over them or
        appended so much before them that a reader would not reach them (written over: only its own line)."""
        self._marked.discard(self.rank)
        if not self.is_marked(self.rank):
            self._call(self.store.set, f"{JOIN}/{self.rank}", f"{self._sig(f'join|{self.rank}')}\n".encode())
        if mine is not None and mine not in self.views(self.rank):
            self._vote(mine)

    def _vote(self, view: tuple[int, ...]) -> None:
        csv = ",".join(map(str, view))
        line = json.dumps({"absent": list(view), "sig": self._sig(f"join/view|{self.rank}|{csv}")})
        self._call(self.store.set, vote_key(self.rank), f"{line}\n".encode())

    # ------------------------------------------------------------------ the wait
    def _missing_text(self, absent) -> str:
        return (f"nodes {list(absent)} did not join within swarm.startup_timeout_s={self.timeout_s:g}s (not started, "
                "or started too late)")

    def run(self) -> Joined:
        deadline = time.monotonic() + self.timeout_s
        mine, give_up = None, None
        self._write_claim()
        while True:
            self._put_back(mine)
            view, counted = self.decide()
            if view is not None:
                return self._finish(view, counted)
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
            raise PeerFailure(f"node {self.rank} started after its peers stopped waiting for it "
                              f"(swarm.startup_timeout_s={self.timeout_s:g}s): start every rank within it")
        if view:
            if not self.go_on:
                raise PeerFailure(f"{self._missing_text(view)}: start every rank within it")
            log.warning("%s; going on without them (swarm.on_peer_failure=continue)", self._missing_text(view))
        return Joined(list(view), self.named)


def check_in(store, rank: int, world: int, timeout_s: float, go_on: bool = False, keys=None) -> Joined:
    """Every rank marks itself checked in and waits for all before the (collective) group set-up, so that a
    rank missing after ``timeout_s`` is named by the others and a rank that starts after a quorum of them
    gave up is told so, each in one line (module docstring: marks, views, quorum, signatures).

    Args:
        store: the rendezvous store (its timeout is set to 2 s here and restored to ``timeout_s``).
        go_on: ``swarm.on_peer_failure=continue``: the ranks that joined go on without the ones a quorum
            found absent.
        keys: an :class:`~dgrpo.transports.peerserve.AddressKeys` (roster file: marks and views signed),
            or None (unsigned: the ``unsafe_key_exchange`` opt-in).

    Returns:
        :class:`Joined`: the ranks a quorum gave up on (empty when every rank joined), the writers named.

    Raises:
        PeerFailure: ranks missing after ``timeout_s`` without ``go_on`` (names them); this rank started after
            a quorum stopped waiting for it; the views did not agree within another ``timeout_s``; the store
            was lost.
    """
    store.set_timeout(datetime.timedelta(seconds=2))
    try:
        return CheckIn(store, rank, world, timeout_s, go_on, keys).run()
    finally:
        store.set_timeout(datetime.timedelta(seconds=max(timeout_s, 0.001)))
