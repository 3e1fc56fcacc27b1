"""Signed skip notices of clocked rounds (``swarm.protocol.schedule=clock``, :mod:`dgrpo.transports.clocked`; task
h31k item 1).

Why. A node whose round-``n`` payload is not ready by ``P_n`` skips the round (it serves nothing, so every node leaves
it out alike). Before, every peer then missed it at ``A_n`` and accused it, and the quorum expelled a node that only
computed slowly (a slower machine, or the attacker's completions at the length cap lengthening its compute).

The rule.

* *Notice.* At ``P_n`` a node that has not served its round-``n`` payload serves instead, under the same key
  (``r{n}/data/{k}``), a notice signed for the run, its launch and round ``n`` (:func:`notice`: ``dgrpo/skip|r{n}``,
  bound like an accusation), from a watcher thread of its own (:class:`Skips`: the main thread may be deep in a
  compute past ``P_n``), every round until its main thread comes back (a node stalled for several rounds serves one
  a round). The decision is taken once a round under a lock: payload or notice, never both
  (:meth:`Skips.claim`); a payload ready after its notice was served is not served.
* *Honoured.* A peer that reads a valid notice of node ``k`` for round ``n`` by ``A_n`` does not accuse ``k`` of ``r{n}``
  nor of ``eq{n}``, as long as ``k`` had messages in one of this node's round sets of the last ``max_skips`` rounds
  (``swarm.protocol.max_skips``, default :data:`MAX_SKIPS`; rounds before the run's first here count as such). The
  round sets are one at every honest node (the clock's guarantee), so every honest node honours or refuses the same
  notice alike, whoever it was shown to: a node that skips every round gets ``max_skips`` rounds, then every honest
  node accuses it and the quorum expels it (a count of the notices each node was *shown* would let a rank that shows
  them to one honest node a round, in turn, free-ride forever). A notice not honoured is a missing payload. A
  round a node entered late (its set may differ; it blames nobody there) counts every live peer in at that node
  (:meth:`Skips.settle`), so its lateness never makes it refuse later a notice its peers honour.
* *Shown to some.* A rank that serves its notice to some honest readers and nothing (or its payload) to others splits
  nothing: its payload, wherever read by ``A_n``, reaches every honest set through the relays (the union rule is
  unchanged: a notice removes no message); the accusations of those that missed it are signed and read by every node,
  so the quorum's decision is one. A notice and messages of the same round under one key (payload shown to some
  readers, notice to others) is equivocation (:meth:`Skips.two_faced`): a node relays the notices it read by ``A_n``
  (``skipped`` in its relay ``eq{n}``, never vouching for its own), so a notice read by one honest node reaches every
  honest node by ``B_n`` as the messages do, and every honest node drops the signer's round alike, as two signed
  contents for one slot (``equivocation`` under it; a notice read by no honest node in time, or relayed only by its
  signer, counts nowhere).

*The first round.* The watcher is armed before the run's first round here (a fresh run's 0, a resumed run's agreed
round: :func:`~dgrpo.transports.clocked.start_at`, from the training loop's ``starts_at``), so a node still in its
first compute at ``T0`` (its first evaluation, a first compile, a slower host) serves its notice as in any later round
(task h31m; before, nothing until its main thread came back, and every peer accused it). Its notice is honoured by the
same count: rounds before the first count as rounds it was in, so a node that skips from the start has ``max_skips``
rounds, as after any round it was in, decided alike at every honest node (the first round is the same at every rank: 0, or the resumed run's, signed and
compared in the ``resume`` exchange).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dgrpo.transports.distributed import DistributedTransport

log = logging.getLogger("dgrpo.transports.distributed")

MAX_SKIPS = 2  # swarm.protocol.max_skips unset: rounds a node may be missing from the sets, notices honoured
PREFIX = b"DGRPO-SKIP "  # what a notice served as a round payload begins with (a payload is framed: DGRPO1...)
_KEPT = 4  # notices of the last this many rounds stay served (older keys deleted)


def notice(t: "DistributedTransport", n: int) -> bytes:
    """Node ``t.rank``'s notice that it skips round ``n``: :data:`PREFIX` + one JSON line ``{"by", "round", "sig"}``,
    ``sig`` = its signature of ``skip|r{n}`` bound to the run context and its launch nonce."""
    sig = t.signed_store.sign(f"skip|r{n}")
    return PREFIX + json.dumps({"by": t.rank, "round": n, "sig": sig}).encode()


def read_notice(t: "DistributedTransport", peer: int, n: int, data: bytes) -> bool:
    """Whether ``data``, read as ``peer``'s round-``n`` payload, is ``peer``'s valid notice that it skips round ``n``
    (anything else, junk after :data:`PREFIX` included, is a payload: decoded and refused as one)."""
    if not data.startswith(PREFIX) or len(data) > 1024:
        return False
    try:
        item = json.loads(data[len(PREFIX):])
        return (isinstance(item, dict) and item.get("by") == peer and item.get("round") == n
                and isinstance(item.get("sig"), str) and t.signed_store.valid(peer, f"skip|r{n}", item["sig"]))
    except (ValueError, RecursionError, TypeError):
        return False


class Skips:
    """This node's notices (served by a watcher thread at each ``P_n`` it has not posted by) and its peers' (held,
    honoured within ``max_skips``).

    Args:
        t: the transport (its ``clock``, ``chan``, ``signed_store``, ``rank``, ``alive``).
        max_skips: ``swarm.protocol.max_skips`` (None: :data:`MAX_SKIPS`; 0: no notice is honoured).

    Attributes:
        held: round → peer → its valid notice of that round as this node read it (the JSON after :data:`PREFIX`).
        last_in: peer → the last round whose set (this node's) held its messages.
    """

    def __init__(self, t: "DistributedTransport", max_skips: int | None = None):
        self.t, self.max_skips = t, MAX_SKIPS if max_skips is None else max_skips
        self.held: dict[int, dict[int, str]] = {}  # round → peer → its notice as read (the JSON after PREFIX)
        self.last_in: dict[int, int] = {}
        self._claimed: dict[int, str] = {}  # round → "payload" or "skip" (this node's, decided once)
        self._next: int | None = None  # the round the watcher serves a notice for at its P_n, if unclaimed
        self._served: deque[str] = deque()
        self._cv = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopped = False

    # ------------------------------------------------------------------ this node's notices
    def claim(self, n: int, ready: bool) -> bool:
        """Decide round ``n`` once (main thread): True if this node serves its payload (``ready``: before ``P_n``, and
        no notice served yet), False if it skips (its notice served now if the watcher has not)."""
        with self._cv:
            if n not in self._claimed:
                self._claimed[n] = "payload" if ready else "skip"
                if not ready:
                    self._serve(n)
            return self._claimed[n] == "payload"

    def watch(self, n: int) -> None:
        """From now on serve a notice at ``P_m`` for every round ``m >= n`` this node has not claimed by then."""
        with self._cv:
            self._next = n
            for m in [m for m in self._claimed if m < n - _KEPT]:
                del self._claimed[m]
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=f"dgrpo-skips-{self.t.rank}", daemon=True)
                self._thread.start()
            self._cv.notify_all()

    def stop(self) -> None:
        with self._cv:
            self._stopped = True
            self._cv.notify_all()

    def _run(self) -> None:
        with self._cv:
            while not self._stopped and self.t.rank in self.t.alive:
                m = self._next
                wait_s = self.t.clock.post_by(m) - time.time()
                if wait_s > 0:
                    self._cv.wait(timeout=min(wait_s, 1.0))
                    continue
                if m not in self._claimed:
                    self._claimed[m] = "skip"
                    self._serve(m)
                    log.warning("node %d: round %d's payload not ready by its post deadline (swarm.protocol.round_s="
                                "%g): serving its signed skip notice instead", self.t.rank, m, self.t.clock.round_s)
                self._next = m + 1

    def _serve(self, n: int) -> None:
        key = f"r{n}/data/{self.t.rank}"
        self.t.chan.set(key, notice(self.t, n))
        self._served.append(key)
        while len(self._served) > _KEPT:
            self.t.chan.delete_key(self._served.popleft())

    # ------------------------------------------------------------------ peers' notices
    def honoured(self, peer: int, n: int) -> bool:
        """Whether ``peer``'s notice of round ``n`` (held or not) keeps this node from accusing it of ``r{n}`` and
        ``eq{n}``: ``peer`` had messages in one of this node's sets of rounds ``n - max_skips`` .. ``n - 1``."""
        first = self.t.clock.first if self.t.clock.first is not None else n
        return n - self.last_in.get(peer, first - 1) <= self.max_skips

    def hold(self, peer: int, n: int, data: bytes) -> bool:
        """Record ``peer``'s valid notice of round ``n`` (``data``, as read); True if it is honoured (:meth:`honoured`)."""
        self.held.setdefault(n, {})[peer] = data[len(PREFIX):].decode()
        for m in [m for m in self.held if m < n - _KEPT]:
            del self.held[m]
        return self.honoured(peer, n)

    def excused(self, n: int) -> set[int]:
        """The peers whose notice of round ``n`` this node holds and honours (not accused of ``eq{n}`` either)."""
        return {p for p in self.held.get(n, {}) if self.honoured(p, n)}

    def relayed(self, n: int) -> dict[str, str]:
        """The notices of round ``n`` this node read (node → its JSON), carried in its relay ``eq{n}``
        (:func:`~dgrpo.transports.relay.build`): every honest node reads them by ``B_n``."""
        return {str(p): line for p, line in sorted(self.held.get(n, {}).items())}

    def two_faced(self, n: int, reports: dict[int, bytes], merged) -> dict[int, str]:
        """Node → why (``equivocation: …``) for every node with messages in ``merged`` (this node's round-``n`` set
        before the equivocators are dropped) whose valid notice of round ``n`` this node read by ``A_n`` or a relay
        ``reports[j]`` of another node ``j`` carries (a relay never vouches for its server's own notice, as for its
        messages). Both signed by one key: dropped from the round by every honest node alike, as two contents for one
        slot are (the notice read by an honest node by ``A_n`` is in its relay, read by every honest node by ``B_n``)."""
        found = {p: self.t.rank for p in self.held.get(n, {})}
        for j, raw in sorted(reports.items()):
            if j == self.t.rank:
                continue
            try:
                items = json.loads(raw).get("skipped") or {}
                items = items if isinstance(items, dict) else {}
            except (ValueError, RecursionError, AttributeError):
                continue
            for k, line in list(items.items())[:64]:
                p = int(k) if isinstance(k, str) and k.isdigit() else None
                if (p is not None and p != j and p not in found and isinstance(line, str)
                        and read_notice(self.t, p, n, PREFIX + line.encode())):
                    found[p] = j
        senders = {m.node for m in merged}
        return {p: (f"equivocation: node {p} signed a skip notice for round {n} (read by node {by}) and round-{n} "
                    "messages: both signed by its key (its payload shown to some readers, its notice to others)")
                for p, by in sorted(found.items()) if p in senders and p != self.t.rank}

    def settle(self, n: int, senders: set[int], blind: bool = False) -> None:
        """At the end of round ``n``: ``senders`` had messages in this node's set (its equivocators dropped).

        ``blind``: this node entered round ``n`` late (it blamed nobody there: its set may differ from its peers', the
        clock's assumptions failed here); every live peer counts as in that set, so a round this node could not see
        never makes it refuse, later, a notice its peers honour (review r31s: it lagged its peers' ``last_in`` by that
        round, and accused on time a peer the others excused). Lenient only: an accusation withheld wrongs nobody."""
        for p in set(senders) | (set(self.t.alive) - {self.t.rank} if blind else set()):
            self.last_in[p] = max(n, self.last_in.get(p, n))
