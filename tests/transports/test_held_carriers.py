"""Review r31t T1 (transports/witnesses.py ``Witnesses.held(besides)``, ``HeldBefore.suspects``), without a launch:
victims held together in ``eq{n-1}`` must not keep each other waiting for the withholder's ``r{n}`` once the on-time
nodes left ``r{n}`` (they took it after those nodes' round end and relayed it to nodes that had cut it: a split), and
a peer whose victims' signed notes of ``eq{n-1}`` name it is never "held" there with them, whatever its own server
says to one node (its ``end/eq{n-1}`` shown to one on-time node only made the other wait for it and carry it).

``timeout_s = 5``: ``S = 1``, ``W = 1.5``, ``E = 2.5``."""

import threading
import time

from dgrpo.transports.witnesses import HeldBefore

from signed_ranks import _ranks

T = 5.0


def _round0(ts, a):
    """Every peer serves its round 0 payload and relay at once; node ``a`` reads them all (it is then in round 1)."""
    n = len(ts)
    for k in range(n):
        if k != a:
            ts[k].chan.set(f"r0/data/{k}", b"x")
            ts[k].chan.set(f"eq0/data/{k}", b"relay")
    me, peers = ts[a].exchanger, [k for k in range(n) if k != a]
    me.post("r0", b"mine")
    assert len(me.collect("r0", peers, time.monotonic() + T, 1 << 20)) == n - 1
    me.post("eq0", b"relay")
    assert len(me.collect("eq0", peers, time.monotonic() + T, 1 << 20)) == n - 1


def _late(ts, ks, at):
    """A timer that serves ``r1`` of nodes ``ks`` ``at`` s from now."""
    timer = threading.Timer(at, lambda: [ts[k].chan.set(f"r1/data/{k}", b"late") for k in ks])
    timer.start()
    return timer


def test_a_victim_stops_waiting_for_a_non_fellow_once_only_its_fellows_are_still_in():
    """Node 0 of 4 is a victim: held in eq0 with node 1 (its fellow) to its round's end by node 3's relay, which never
    came, it is in r1 past ``Schedule.safe`` (its eq0 post + T - S, set 4.5 s back). Node 2, the on-time node, served
    r1 and left it; node 1 served r1 and is still in it (waiting, as node 0 is); node 3, the withholder, serves a note
    of eq0 naming node 2 and its r1 3.0 s after node 0's post. Before, node 1 alone kept node 0 waiting for node 3
    (``need`` = 1) and node 0 took node 3's r1 at 3.0 s, past node 2's round; now only non-fellows count as witnesses
    for a peer whose relay of eq0 never came: none is left in r1, so node 0 cuts node 3 at once (read within a poll of
    end/r1) and has nodes 1 and 2 only."""
    ts, _ = _ranks(n=4, timeout_s=T)
    a = ts[0].exchanger
    _round0(ts, 0)
    a.schedule.posted["eq0"] -= 4.5  # (held in eq0 to the round's end: past safe for r1 at once)
    a.schedule.fellows["eq0"] = {1}
    a.schedule.arrived["eq0"].pop(3)  # (node 3's relay eq0 never came: withheld from the victims)
    ts[3].exchanger.notes.note("eq0", [2])
    for k in (1, 2):
        ts[k].chan.set(f"r1/data/{k}", b"r1")
    ts[2].exchanger.notes.ended("r1")
    assert a.schedule.fellows_of("r1") == {1}
    a.post("r1", b"mine")
    t0 = time.monotonic()
    assert a.schedule.safe("r1") <= t0
    timer = _late(ts, (3,), 3.0)
    got = a.collect("r1", [1, 2, 3], t0 + T, 1 << 20)
    took = time.monotonic() - t0
    timer.join()
    assert sorted(got) == [1, 2], (sorted(got), took)  # (before: [1, 2, 3] at 3.1 s)


def test_a_peer_noted_by_two_victims_of_eq0_is_not_held_with_them():
    """Node 0 of 5 (the on-time node) had every relay of round 0. Nodes 1 and 2 serve signed notes of eq0 naming
    node 4 (they wait for its relay); node 4 serves one naming node 3 and, like them, never says it left eq0 (to this
    node: r31t T1's selective end/eq0); node 3 left eq0 and r1 at once. Nodes 1 and 2 serve r1 at 2.3 s, node 4 at
    5.2 s: past W + E (4.0 s), before its ``held_bound`` (about 6.5 s). Before, ``HeldBefore`` counted node 4 held
    with nodes 1, 2 (``need`` = 2) and node 0 waited for it to ``held_bound``, took it at 5.2 s and carried it; now
    two victims' notes name it (a suspect): cut at W + E, as a peer alone in eq0 is."""
    ts, _ = _ranks(n=5, timeout_s=T)
    a = ts[0].exchanger
    _round0(ts, 0)
    for k in (1, 2):
        ts[k].exchanger.notes.note("eq0", [4])
    ts[4].exchanger.notes.note("eq0", [3])
    ts[3].exchanger.notes.ended("eq0")
    ts[3].chan.set("r1/data/3", b"three")
    ts[3].exchanger.notes.ended("r1")
    a.post("r1", b"mine")
    t0 = time.monotonic()
    timers = [_late(ts, (1, 2), 2.3), _late(ts, (4,), 5.2)]
    got = a.collect("r1", [1, 2, 3, 4], t0 + T, 1 << 20)
    took = time.monotonic() - t0
    for timer in timers:
        timer.join()
    time.sleep(0.3)
    assert sorted(got) == [1, 2, 3], (sorted(got), took)  # (before: [1, 2, 3, 4] at 5.2 s)


def test_suspects_by_hand():
    """Named as the peer waited for in eq0 by the notes of two other peers still in eq0, while this node had its relay
    in time: a suspect. Not so where one of them left eq0, for one noter (the withholder's own false note naming an
    honest victim), for notes of another exchange, or where this node too noted waiting for it in eq0 (an honest relay
    late for everyone: its writer made late by the withholder, test_round_deadlines' r31m F2 scenario)."""
    prev = HeldBefore(0, None, "r1", range(5), None)
    prev.prev.asked = {1, 2, 3, 4}
    hit = lambda tag, names: ((tag, names), None, False)  # noqa: E731 - SideReads.hits' shape
    two = {1: hit("eq0", [4]), 2: hit("eq0", [4]), 4: hit("eq0", [1])}
    assert prev.suspects(two, {}) == {4}
    assert prev.suspects(two, {"eq0": {4}}) == set() and prev.suspects(two, {"r0": {4}}) == {4}
    assert prev.suspects({1: hit("eq0", [4]), 4: hit("eq0", [1])}, {}) == set()
    assert prev.suspects({1: hit("r0", [4]), 2: hit("r0", [4])}, {}) == set()
    prev.prev.left = {2}
    assert prev.suspects(two, {}) == set()
    assert HeldBefore(0, None, "eq1", range(5), None).suspects(two, {}) == set()
