"""Which peers are still in a round exchange, as their servers say (issue 31, h31s: the waits past
:meth:`~dgrpo.transports.waits.Schedule.safe`; the rule is in transports/waits.py's module docstring), and in a swarm
of 3, where the one other peer decides alone, how long a fellow is waited for past it (:func:`fellow_hold`, task
h31t2)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Callable

from dgrpo.transports.accusations import quorum
from dgrpo.transports.waits import slack_s, window_s

if TYPE_CHECKING:
    from concurrent.futures import Future

    from dgrpo.transports.peerserve import PeerChannel
    from dgrpo.transports.waits import Schedule


class Witnesses:
    """Which of the other live peers of round exchange ``tag`` are still in it, as their servers say (``end/{tag}``:
    :meth:`~dgrpo.transports.waits.WaitNotes.ended`), for a wait past
    :meth:`~dgrpo.transports.waits.Schedule.safe`.

    Args:
        rank: this node.
        chan: its :class:`~dgrpo.transports.peerserve.PeerChannel`.
        tag: the round exchange, ``r{n}`` or ``eq{n}``.
        roster: the live nodes of the exchange (this node included).
        submit: ``submit(fn, *args) -> Future`` (the exchange's reader pool: a slow server holds only its own read).
    """

    def __init__(self, rank: int, chan: "PeerChannel", tag: str, roster, submit: Callable[..., "Future"]):
        self.chan, self.tag, self.submit = chan, tag, submit
        self.others = set(roster) - {rank}
        self.need = len(set(roster) | {rank}) - quorum(len(set(roster) | {rank}))  # (others held: the rest < quorum)
        self.left: set[int] = set()
        self.asked: set[int] = set()  # peers whose server answered at least one read (HeldBefore)
        self.reads: dict[int, tuple["Future", float]] = {}  # peer → (its read in flight, when it began)

    def poll(self, deadline: float) -> None:
        """Take the reads that finished; read each peer not known to have left again (at most every 0.2 s, each
        read within 0.5 s and ``deadline``)."""
        now = time.monotonic()
        for peer, (fut, _) in [(p, r) for p, r in self.reads.items() if r[0].done()]:
            if peer not in self.chan.down:  # (its server answered)
                self.asked.add(peer)
            if fut.result()[0] is not None:
                self.left.add(peer)
        self.reads = {p: r for p, r in self.reads.items() if not r[0].done() or now - r[1] < 0.2}
        for peer in sorted(self.others - self.left - set(self.reads)):
            self.reads[peer] = (self.submit(self.chan.fetch, peer, f"end/{self.tag}", 64, min(deadline, now + 0.5),
                                            0.5), now)

    def held(self, peer: int, besides=()) -> bool:
        """Whether enough other peers (``peer`` and ``besides`` apart) are still in the exchange that those that left,
        with ``peer``, are short of a quorum of the roster (a peer whose server does not say counts as still in: a dead
        one accuses nobody). ``besides``: in ``r{n}``, this node's fellows when ``peer`` is none and its relay of
        ``eq{n-1}`` never came here (review r31t T1: two victims held together in ``eq{n-1}`` kept each other waiting
        for the withholder's ``r{n}`` after the on-time nodes had left, took it and relayed it past their round's end:
        a split; a peer whose relay came late, itself held by the withholder, is waited for as before: r31m F2)."""
        return len(self.others - {peer} - self.left - set(besides)) >= self.need


class HeldBefore:
    """In a round payload exchange ``r{n}`` (n > 0): which peers are still in ``eq{n-1}`` with another (review r31q Q3;
    :meth:`~dgrpo.transports.waits.Schedule.extended`): two victims of a relay withheld behind a note are held there to
    their round's end, and this node, which had every relay, waits for their ``r{n}`` to
    :meth:`~dgrpo.transports.waits.Schedule.held_bound`. A peer alone in ``eq{n-1}`` (the withholder posing as held)
    gets nothing from it; a peer counts as still in only once a read of its ``end/eq{n-1}`` came back without it (a
    server that does not answer proves nothing here). Read from 0.5 s before a deadline a note may extend."""

    def __init__(self, rank: int, chan: "PeerChannel", tag: str, roster, submit: Callable[..., "Future"]):
        n = tag[1:]
        on = tag.startswith("r") and n.isdigit() and int(n) > 0
        self.prev = Witnesses(rank, chan, f"eq{int(n) - 1}", roster, submit) if on else None

    def poll(self, end: float | None) -> None:
        """Read again (at most every 0.2 s, each read within 0.5 s and ``end``)."""
        if self.prev is not None and end is not None:
            self.prev.poll(end)

    def held(self, peer: int, suspects=()) -> bool:
        """Whether ``peer`` and enough others (it apart) are still in ``eq{n-1}``, each as its server said; a suspect
        (:meth:`suspects`) is never held, nor counted."""
        w, out = self.prev, set(suspects)
        return w is not None and peer in w.asked - w.left - out and len(w.asked - w.left - {peer} - out) >= w.need

    def suspects(self, hits, mine) -> set[int]:
        """The peers that the signed notes of ``eq{n-1}`` of at least two other peers still in it (as their servers
        said) name as the one they waited for there, while this node did not wait for them there (``mine``: exchange →
        the peers this node noted waiting for, :attr:`WaitNotes.mine <dgrpo.transports.waits.WaitNotes.mine>`;
        ``hits``: peer → ((exchange, whom it noted waiting for), ...), :attr:`SideReads.hits
        <dgrpo.transports.sidereads.SideReads.hits>`): a withholder, its relay served here in time and not to them,
        held by nobody (review r31t T1: it served its ``end/eq{n-1}`` to one on-time node only; the other counted it
        held with its victims, waited for its ``r{n}`` to :meth:`~dgrpo.transports.waits.Schedule.held_bound` and
        kept them waiting for it, a carrier of what the first cut). Two, so that the withholder's own false note
        cannot make an honest victim one; still in, and not late here, so that notes of an honest relay that was late
        for everyone (its writer made late by the withholder: test_round_deadlines, r31m F2) do not either."""
        w, named = self.prev, {}
        if w is None:
            return set()
        for q, hit in hits.items():
            if hit[0][0] == w.tag and q in w.asked - w.left:
                for p in hit[0][1]:
                    named.setdefault(p, set()).add(q)
        return {p for p, by in named.items() if len(by - {p}) >= 2 and p not in mine.get(w.tag, ())}


def fellow_hold(schedule: "Schedule", tag: str, peer: int, others) -> float:
    """In a swarm of 3, the time until which this node waits in round payload ``tag`` = ``r{n}`` for ``peer``, a fellow
    (:meth:`~dgrpo.transports.waits.Schedule.fellows_of`: it held this node in ``eq{n-1}``), past
    :meth:`~dgrpo.transports.waits.Schedule.safe` whatever the one other peer ``x`` says (task h31t2): this node's
    ``r{n}`` post + W, at most ``timeout_s`` - 2 S after its last read that found ``x``'s relay ``eq{n-1}`` not served
    (``Schedule.absent``). ``x`` alone decides there (``n - quorum(n)`` = 1, :class:`Witnesses`): where ``x`` is the
    withholder of the two-victim hold it says at once it left ``r{n}``, and the first victim out cut the second, which
    trained on its own round payload alone (a split). Safe for this node whichever of ``peer``, ``x`` is honest (one
    node cannot tell: a rank posing as a fellow, review r31n G1, holds this node in ``eq{n-1}`` behind an honest ``x``'s
    late relay): an honest ``x`` posted ``eq{n-1}`` after that read, so its ``r{n}`` post came later still. Where it
    read this node's ``r{n}`` it posted ``eq{n}`` after this node's post and waits for this node's relay (whose note of
    ``r{n}``, served at the latest as this wait begins, it reads) to at least the earlier of its ``r{n}`` post +
    ``timeout_s`` and its relay post + E; where it cut it (unaccused, or this node is expelled anyway), it posted its
    relay no earlier than W after the read (its own W or ``safe``) and waits E more. Either way until at least the
    earlier of this node's post + E and the read + ``timeout_s`` - S: stopping S before leaves this node's relay S, as
    ``safe`` does. Within this node's window: the round's budget is unchanged. 0.0 where the rule does not apply (not a fellow,
    another swarm size, no such read)."""
    n = tag[1:]
    rest = set(others) - {peer}
    if not (tag.startswith("r") and n.isdigit() and int(n) > 0 and len(rest) == 1 and tag in schedule.posted
            and peer in schedule.fellows_of(tag)):
        return 0.0
    seen, t = schedule.absent.get(f"eq{int(n) - 1}", {}).get(next(iter(rest))), schedule.timeout_s
    return 0.0 if seen is None else min(seen + t - 2 * slack_s(t), schedule.posted[tag] + window_s(t))
