"""A message round of the hivemind transport and its one deadline: every wait of a round ends within
``swarm.timeout_s`` of the round's start (issue 31, must-have 4).

:meth:`~dgrpo.transports.hivemind.HivemindTransport.all_gather` starts the round's :class:`RoundClock` and runs
:func:`message_round`; its two local calls after the commit (the DHT's refusals, the launch record) wait what is
left of the round, at least 0.1 s each.

Under ``on_peer_failure=abort`` a failure read in the round stops this node only once the commit has decided it
(:class:`HeldStops`), so a payload, view or bye one honest node missed or read alone stops every honest node or none.

A round is four phases, each ending at a fixed share of ``timeout_s`` counted from the moment this node starts the
round (``all_gather`` is called, before its post), so no phase can push the next one later:

==============  ======  ===================================================================
phase           ends    what is waited for
==============  ======  ===================================================================
``payloads``    1/4     every live peer's payload ``r{round}`` (a later peer is failed)
``views``       2/4     every live peer's view ``v{round}`` (:mod:`dgrpo.transports.dht.commit`)
``echo``        3/4     the echo ``e{round}`` of every live peer and of every node a view read lists
``read again``  4/4     a payload this node missed and its peers' views list (ends :data:`TAIL_S` before 4/4)
==============  ======  ===================================================================

Why quarters: two honest nodes whose rounds start ``s`` apart with ``s`` < ``timeout_s``/4 (the payload phase: a
later payload is missed) each post a view by the end of their own payload phase, so each reads the other's view
by the end of its own views phase (1/4 later); each posts its echo by the end of its views phase, so each reads
the other's echo by the end of its own echo phase (1/4 later again). So every view an honest node read reaches
every honest node through its echo, as the commit needs (its no-split guarantee holds for honest nodes whose rounds
start within ``timeout_s``/4 of each other; docs/hivemind.md "Commit"), and a node that withholds its payload, its
view or its echo costs its peers at most the rest of that phase: the round ends by ``timeout_s`` either way. And
the honest nodes wait for the same echoes (:func:`dgrpo.transports.dht.commit.agreed_views`: those of the nodes
whose payload a view lists, which every honest node reads), so a round's ends are no further apart than its starts
and the next round starts within ``timeout_s``/4 again (review r31e G3: a view timed to reach one honest node alone,
then no echo, made that node alone wait, and it started the next round over ``timeout_s``/4 late).

Each DHT call made in a phase is limited to what is left of it, at least :data:`LAST_CALL_S` (one last read after
the phase's end), and never past the round's stop, ``timeout_s`` after its start (:attr:`RoundClock.stop`: while
:func:`message_round` runs, this node's :class:`~dgrpo.transports.dht.recordio.SignedRecords` cuts every wait there
(:meth:`~dgrpo.transports.dht.recordio.SignedRecords.until`),
a store's read-back included). The last phase gives up :data:`TAIL_S` of its quarter so that its last read of a
payload and of its relays still gets its :data:`LAST_CALL_S` each, and the two local calls after the commit (the
DHT's refusals, the launch record: milliseconds) wait only what is left before the stop. So no wait of a round
passes ``timeout_s`` after its start; what remains past it is the poll's own tolerance (a ``future.result`` returning
a few ms after its limit on a loaded machine) and this node's CPU work after its last wait (decoding, verifying
signatures), measured in tests/transports/test_hivemind_deadlines.py. Before, the last phase ended at 4/4 and its
calls and the local ones could run 0.4 s past ``timeout_s``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dgrpo.transports.hivemind import HivemindTransport

log = logging.getLogger("dgrpo.transports.hivemind")  # (the transport's log)
SHARES = {"payloads": 1, "views": 2, "echo": 3, "read again": 4}  # phase → its end, in quarters of timeout_s
LAST_CALL_S = 0.2  # seconds: the shortest limit of one DHT call (a read made at a phase's end still gets an answer)
TAIL_S = 2 * LAST_CALL_S + 0.1  # seconds carved out of the last phase: its last read of a payload and of its relays,
#                                 and the two local calls after the commit (milliseconds each)


def call_limit(deadline: float) -> float:
    """Time limit (seconds) of one DHT call made before ``deadline`` (a ``time.monotonic()`` value): what is left
    of it, at least :data:`LAST_CALL_S`, at most 10 s (cut at the round's stop by the node's records, if one runs)."""
    return min(10.0, max(LAST_CALL_S, deadline - time.monotonic()))


@dataclass(frozen=True)
class RoundClock:
    """The deadlines of one message round.

    Attributes:
        start: ``time.monotonic()`` when this node started the round (seconds).
        timeout_s: the round's whole wait (``swarm.timeout_s``, seconds).
    """

    start: float
    timeout_s: float

    @classmethod
    def now(cls, timeout_s: float) -> "RoundClock":
        return cls(time.monotonic(), timeout_s)

    @property
    def stop(self) -> float:
        """``time.monotonic()`` past which no wait of the round goes: ``timeout_s`` after its start."""
        return self.start + self.timeout_s

    def end(self, phase: str) -> float:
        """``time.monotonic()`` at which ``phase`` (a key of :data:`SHARES`) ends: its share of ``timeout_s`` after the
        start, the last phase :data:`TAIL_S` before the stop (never before the echo's end). Raises KeyError for another
        name."""
        end = self.start + SHARES[phase] * self.timeout_s / 4
        return max(self.start + 3 * self.timeout_s / 4, end - TAIL_S) if phase == "read again" else end

    def rest(self) -> float:
        """Seconds left before :attr:`stop` (0 once it passed): the wait of a local call after the commit."""
        return max(0.0, self.stop - time.monotonic())

    def left(self, phase: str) -> float:
        """Time limit (seconds) of one DHT call in ``phase``: :func:`call_limit` of its end."""
        return call_limit(self.end(phase))

    def limit(self, phase: str) -> str:
        """How a peer that missed ``phase`` is told: ``4.5s of the round (3/4 of swarm.timeout_s=6s)``."""
        return f"{SHARES[phase] * self.timeout_s / 4:g}s of the round ({SHARES[phase]}/4 of swarm.timeout_s={self.timeout_s:g}s)"


def message_round(t: "HivemindTransport", round_idx: int, payload: bytes, clock: RoundClock | None = None
                  ) -> dict[int, bytes]:
    """Post ``payload`` as exchange ``r{round_idx}``, collect the live peers' until the payload phase ends, then
    commit (:func:`dgrpo.transports.dht.commit.commit`): the payloads every honest node keeps alike, by node
    (this node's own included). ``clock``: the round's deadlines (default: starting now).

    Raises:
        PeerFailure: see :meth:`~dgrpo.transports.hivemind.HivemindTransport.collect` and the commit.
    """
    clock = clock or RoundClock.now(t.timeout_s)
    t.stops.open()  # (under abort: a failure stops this node once the commit decided it, alike at every honest node)
    try:
        with t.signed.until(clock.stop):  # (every DHT wait of the round ends by then)
            got = t.exchange(f"r{round_idx}", payload, on_wait=joiner_beacon(t, round_idx),
                             deadline=clock.end("payloads"), limit=clock.limit("payloads"))
            kept = t.commit(round_idx, got, clock)
    finally:
        t.stops.close()
    t.settle()
    return kept


class HeldStops:
    """A message round's failures under ``on_peer_failure=abort``, held to its commit, and the byes it read (task
    h31t3). A payload, view or bye one honest node missed or read alone is decided by the commit's views alike at
    every honest node (a payload kept is read again and its node readmitted; a signed bye relayed in a view fails its
    node at all: :mod:`dgrpo.transports.dht.commit`); only then does a node stop, in
    :meth:`HivemindTransport.settle <dgrpo.transports.hivemind.HivemindTransport.settle>`, on what is failed still.
    Before, the node that missed a payload or read a bye stopped alone at once (docs/hivemind.md, Churn).

    Attributes:
        on: within a message round (:func:`message_round`; outside it an abort stops at once).
        pending: failed node → the line naming it (dropped when the node is readmitted).
        byes: node → (body, record signature) of each signed bye read in this round, relayed in this node's view.
    """

    def __init__(self) -> None:
        self.on, self.pending, self.byes = False, {}, {}

    def open(self) -> None:
        self.on, self.pending, self.byes = True, {}, {}

    def close(self) -> None:
        self.on = False

    def hold(self, peers: list[int], text: str) -> bool:
        """Hold the abort on ``peers`` (named by ``text``) to the commit, within a round; False outside one."""
        if self.on:
            self.pending.update(dict.fromkeys(peers, text))
            log.warning("%s; the round's commit decides (swarm.on_peer_failure=abort)", text)
        return self.on

    def settle(self, failed: dict[int, str]) -> str | None:
        """The lines of the held nodes still ``failed`` (the transport's), joined; None if none. Forgets them."""
        lines = list(dict.fromkeys(line for n, line in sorted(self.pending.items()) if n in failed))
        self.pending = {}
        return "; ".join(lines) or None


def joiner_beacon(t: "HivemindTransport", round_idx: int):
    """While this node waits for the payloads of round ``round_idx``, the first round of a planned joiner: a callable
    that signs its launch record of the round before again every :data:`~dgrpo.transports.dht.joining.BEACON_S`
    (stored without waiting), so a joiner started while the swarm waits for it reads a record signed after it
    started (it ignores older ones: :mod:`dgrpo.transports.dht.joining`). None in any other round."""
    from dgrpo.transports.dht.joining import BEACON_S

    if round_idx <= 0 or not [n for n, r in t.join.items() if r == round_idx and n != t.rank and n not in t.failed]:
        return None
    due = [time.monotonic() + BEACON_S]

    def beacon() -> None:
        if time.monotonic() >= due[0]:
            from dgrpo.transports.dht.launch import publish_launch

            due[0] = time.monotonic() + BEACON_S
            publish_launch(t, round_idx - 1, wait_s=0.0)
    return beacon
