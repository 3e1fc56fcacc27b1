"""The torch.distributed transport's value exchanges (:meth:`DistributedTransport.gather_values
<dgrpo.transports.distributed.DistributedTransport.gather_values>`): a small string of every live rank, e.g. the run
name, or a start-up value (role, config fingerprint, resume round, start-up record) that every rank must serve within
``swarm.startup_timeout_s``.

A start-up exchange needs every rank that joined (named so in its errors); a ``config`` or ``resume`` value is signed
and compared (:mod:`dgrpo.transports.startagree`); a rank that stops in one says why, signed, so its peers quote it
instead of calling it silent.

**One start-up budget** (review r31r R3). Before, each start-up exchange waited up to ``swarm.startup_timeout_s`` from
this rank's own post, so one rank serving one value late to one reader in each of three exchanges (16 s each, under
``startup_timeout_s=20``) held every rank 48 s, ~2.4 x the setting, and nobody was named. Now a rank's waits after its
check-in (the process group's join, every start-up exchange, the ready barrier: :class:`StartBudget`) add up to at most
``swarm.startup_timeout_s`` in all; the time it spends on its own work in between (loading its model) is not counted,
so honest ranks of unequal speed start as before. Each start-up exchange may end :data:`STEP_S` past the budget's
end and each later one (:data:`ORDER`) :data:`STEP_S` later than the one before (:meth:`StartBudget.wait_s`), so a
rank held until its budget ends stops before the peers waiting for it in the next exchange give up on it (at most
21 s more in all). And
a start-up value that reached this rank more than
:data:`LATE_S` after it posted its own names its rank (:func:`name_late`: a WARNING line and, with the first round's
refusals, ``peers.jsonl``): ``late``, or ``waited`` when the value says (unchecked) that its rank was itself held in
its previous start-up exchange; such a claim is named under its writer only, never under those it names, as after
start-up (:func:`dgrpo.transports.latenames.name_late`).
"""

from __future__ import annotations

import json
import logging
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING

from dgrpo.errors import PeerFailure
from dgrpo.transports.startagree import CHECKED, checked_values
from dgrpo.transports.storewait import STOP_GRACE_S

if TYPE_CHECKING:
    from dgrpo.transports.distributed import DistributedTransport

log = logging.getLogger("dgrpo.transports.distributed")

LATE_S = 5.0  # a start-up value that came more than this after this rank posted its own names its rank
HELD = "\n@held "  # in a start-up value, after the value: [exchange, seconds, nodes] its rank waited for before it
ORDER = ("role", "config", "config_seen", "startup", "ready", "resume", "resume_seen", "clock", "clock_seen")  # the start-up exchanges in turn
STEP_S = STOP_GRACE_S  # a start-up exchange's deadline past the budget's end: this much more than the one before it
JOIN_S = LATE_S  # the process group's join is given up this long after this rank entered it (review r31s S3)


class StartBudget:
    """One rank's start-up waits, summed: each start-up exchange's deadline is at most what is left of
    ``swarm.startup_timeout_s`` (review r31r R3).

    Attributes:
        spent: seconds waited so far (None before the first start-up exchange; then from the check-in's end, so the
            process group's join counts too).
        held: (exchange, seconds, nodes) of this rank's last start-up exchange when a value came over :data:`LATE_S`
            late (told to its peers with its next start-up value, :data:`HELD`), else None.
    """

    def __init__(self):
        self.spent: float | None = None
        self.held: tuple[str, float, list[int]] | None = None

    def begin(self, since: float | None) -> None:
        """Start counting (once): from ``since`` (the check-in's end, monotonic) if given, else from now."""
        if self.spent is None:
            self.spent = 0.0 if since is None else max(0.0, time.monotonic() - since)

    def left(self, timeout_s: float) -> float:
        """Seconds this rank may still wait at start-up (``timeout_s``: ``swarm.startup_timeout_s``)."""
        return max(0.0, timeout_s - (self.spent or 0.0))

    def wait_s(self, tag: str, timeout_s: float) -> float:
        """How long start-up exchange ``tag`` may wait from now: what is left of the budget, plus :data:`STEP_S` for
        it and each start-up exchange before it (:data:`ORDER`), at most ``timeout_s``. A rank held in one exchange so
        long that its budget ends there stops (after :data:`STOP_GRACE_S`, looking for its holder's stop notice) and
        says why before its peers, who wait for it in the next exchange, give up on it: they quote its reason instead
        of calling it silent. And no exchange gets less than :data:`STEP_S` (a rank that held the process group's join
        until the budget was nearly spent cannot leave the honest ranks milliseconds to exchange their roles)."""
        return min(timeout_s, self.left(timeout_s) + STEP_S * (ORDER.index(tag) + 1 if tag in ORDER else 1))

    def settle_s(self, timeout_s: float) -> float:
        """How long the launch-proof wait (:func:`~dgrpo.transports.launchproof.settle`, before the first start-up
        exchange) may wait for its peers' answers: what is left of the budget, at least :data:`STEP_S`, at most
        ``timeout_s / 2`` (a rank that stops there for a missing answer is quoted by its peers within their own wait
        in the first start-up exchange; review r31s S2)."""
        return min(timeout_s / 2, max(self.left(timeout_s), STEP_S))

    def joined(self, seconds: float | None, missing: list[int] | None = None, finished: bool = True) -> None:
        """This rank waited ``seconds`` in the process group's join (None: it did not join one). Over half of
        :data:`LATE_S` there (the join gives up after :data:`JOIN_S`), or a join that did not finish (this rank may
        have come after its peers gave up on it, held at its check-in), and its next start-up value says it was held
        (:data:`HELD`: ``["join", seconds, missing]``, ``missing``: the ranks it still waited for, as the store said,
        unchecked), so its peers name it ``waited``, never ``late``, if it comes late (review r31s S3)."""
        if seconds is not None and (seconds > LATE_S / 2 or not finished) and self.held is None:  # (a launch hold
            self.held = ("join", seconds, sorted(missing or []))  # names its holder: it goes first)

    @contextmanager
    def waiting(self):
        """Count the time spent inside as waited."""
        start = time.monotonic()
        try:
            yield
        finally:
            self.spent = (self.spent or 0.0) + time.monotonic() - start

    def note(self) -> str:
        """What this rank says, with its next start-up value, of its last wait (empty: it waited no longer than
        :data:`LATE_S`)."""
        return "" if self.held is None else HELD + json.dumps([self.held[0], round(self.held[1], 1), self.held[2]])


def _claim(note: str) -> tuple[str, float, list[int]] | None:
    """A peer's :data:`HELD` note as (exchange, seconds, nodes), None if absent or malformed."""
    try:
        tag, secs, nodes = json.loads(note)
    except (ValueError, TypeError, RecursionError):
        return None
    if not (isinstance(tag, str) and isinstance(secs, (int, float)) and isinstance(nodes, list)
            and all(isinstance(n, int) for n in nodes)):
        return None
    return tag[:40], float(secs), nodes[:64]


def name_late(rank: int, tag: str, texts: dict[int, str], posted: float, arrived: dict[int, float],
              budget: StartBudget) -> tuple[dict[int, str], list[tuple[int, str]]]:
    """The values of start-up exchange ``tag`` (node → what it served: the value, then its :data:`HELD` note if any)
    and who is named for lateness.

    Args:
        rank: this rank; ``posted``: when it posted its own value; ``arrived``: node → when its value came
            (monotonic).
        budget: this rank's :class:`StartBudget`; its ``held`` becomes this exchange's wait if one came late.

    Returns:
        (node → value, without the note; [(node, reason)] for each value that came over :data:`LATE_S` after
        ``posted``: ``late``, or ``waited`` quoting the unchecked note of a rank that says it was held itself).
    """
    values, named, late_by = {}, [], {}
    for node, raw in sorted(texts.items()):
        values[node], _, note = raw.partition(HELD)
        late = arrived.get(node, posted) - posted
        if node == rank or late <= LATE_S:
            continue
        late_by[node] = late
        claim = _claim(note)
        if claim is not None:
            named.append((node, f"waited: served start-up exchange {tag!r} {late:.1f}s after this node posted, saying "
                                f"it waited {claim[1]:.1f}s for nodes {claim[2]} in exchange {claim[0]!r}"))
        else:
            named.append((node, f"late: served start-up exchange {tag!r} {late:.1f}s after this node posted (over "
                                f"{LATE_S:g}s: it held its value back from this node, or came to the exchange late)"))
    budget.held = (tag, max(late_by.values()), sorted(late_by)) if late_by else None
    return values, named


def name_slow_answers(t: "DistributedTransport", came: dict[int, float]) -> None:
    """Name each peer whose answer to this rank's launch challenge came over :data:`LATE_S` after it was asked
    (``came``: owner → seconds, :func:`~dgrpo.transports.launchproof.settle`): a WARNING line and a ``late`` refusal in
    round 0's ``peers.jsonl``, and this rank's next start-up value says it was held (:data:`HELD`), so its peers name
    it ``waited`` under its own name, never ``late`` (review r31s S1: before, the holder was named by nobody and the
    held honest rank ``late`` by every other)."""
    late = {k: s for k, s in sorted(came.items()) if k != t.rank and s > LATE_S}
    report(t, [(k, f"late: answered node {t.rank}'s launch challenge {secs:.1f}s after it was asked (over {LATE_S:g}s: "
                   "its server held the answer back from this node)") for k, secs in late.items()])
    t.start_budget.held = ("launch", max(late.values()), sorted(late)) if late else None


def report(t: "DistributedTransport", named: list[tuple[int, str]]) -> None:
    """Each (node, reason) of ``named``: a WARNING line and a refusal in round 0's ``peers.jsonl``."""
    for node, why in named:
        log.warning("node %d: node %d %s", t.rank, node, why)
    t._notes.extend(named)  # (refusals of the first all-gather: peers.jsonl)


def gather(t: "DistributedTransport", tag: str, value: str, timeout_s: float | None = None) -> dict[int, str]:
    """Every live node's ``value`` in exchange ``tag`` (node → text, this rank's included).

    ``timeout_s``: a start-up wait (``swarm.startup_timeout_s``, named so in errors; every rank is needed; within
    what is left of this rank's :class:`StartBudget`, and a value over :data:`LATE_S` late named: :func:`name_late`);
    default ``swarm.timeout_s``.

    Raises:
        PeerFailure: a peer missed the exchange (start-up: always; later: under ``abort``), or a start-up value is
            unsigned, two-faced or falsely echoed (:func:`~dgrpo.transports.startagree.checked_values`).
    """
    if timeout_s is None:
        return {n: b.decode(errors="replace") for n, b in t.exchange(tag, value.encode()).items()}
    saved = t.wait.timeout_s, t.wait.limit_name
    t.wait.timeout_s, t.wait.limit_name = timeout_s, "swarm.startup_timeout_s"
    budget = t.start_budget
    budget.begin(t.chan.checked_in)
    cut = []  # (waited before, deadline) of an exchange whose deadline the budget brought forward

    def plain(tg: str, text: str) -> dict[int, str]:
        left = budget.wait_s(tg, timeout_s)
        cut[:] = [(timeout_s - budget.left(timeout_s), time.monotonic() + left)] if left < timeout_s else []
        start = time.monotonic()
        with budget.waiting():
            got = t.exchange(tg, (text + budget.note()).encode(), until=cut[0][1] if cut else None)
        sched = t.exchanger.schedule
        values, named = name_late(t.rank, tg, {n: b.decode(errors="replace") for n, b in got.items()},
                                  max(sched.posted.get(tg, start), start), sched.arrived.get(tg, {}), budget)
        report(t, named)
        return values

    try:
        return checked_values(t, tag, value, plain) if tag in CHECKED else plain(tag, value)
    except PeerFailure as err:  # a start-up stop: its peers read why (signed) instead of "sent nothing"
        if not (cut and time.monotonic() >= cut[0][1]):  # (not at a deadline the budget brought forward)
            t.chan.announce_stop(str(err))
            raise
        text = (f"{err}; a rank's start-up waits add up to at most swarm.startup_timeout_s={timeout_s:g}s (one "
                f"budget: node {t.rank} had waited {cut[0][0]:.1f}s of it before this exchange)")
        t.chan.announce_stop(text)
        raise PeerFailure(text) from None
    finally:
        t.wait.timeout_s, t.wait.limit_name = saved
