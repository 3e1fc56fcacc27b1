"""The two-victim hold in a swarm of 3 (task h31t2; transports/witnesses.py ``fellow_hold``), without a launch: node 0
was held in ``eq0`` past its relay post + E by node 2's relay (withheld behind a note, released late) while node 1
was still there too (its fellow). In ``r1`` node 2 says at once it left; before, node 0 cut node 1 at
``Schedule.safe`` on node 2's word alone (the first victim out cut the second, which trained on its own round payload
alone). Now node 0 waits for its fellow until its own r1 post + W, at most timeout_s - 2 S after its last read that
found node 2's relay not served (an honest node 2 posted ``eq0`` after that read and waits for node 0's relay long
enough that node 0 keeps S for it: ``fellow_hold``).

``timeout_s = 5``: ``S = 1``, ``W = 1.5``, ``E = 2.5`` (exact in binary)."""

import threading
import time

import pytest

from dgrpo.transports.waits import Schedule, slack_s, window_s

from signed_ranks import _ranks

T = 5.0


def test_the_fellow_hold_by_hand():
    """Node 0 posted r1 at 103.8 and last found node 2's relay eq0 not served at 103.2: its fellow 1 is waited for in r1
    to its window's end, 105.3, whatever node 2 says (before: cut at safe, 104.2); had that read been at 101.0, to
    101.0 + timeout_s - 2 S = 104.0. Not a fellow (2), not a round payload past r0, another swarm size, no such read,
    or r1 not posted: 0.0 (no hold)."""
    from dgrpo.transports.witnesses import fellow_hold

    s = Schedule(T)
    for tag in ("r0", "eq0", "r1"):
        s.enter(tag)
    s.posted.update({"r0": 100.0, "eq0": 100.2, "r1": 103.8})
    s.held_with("eq0", {1})
    s.absent["eq0"] = {2: 103.2}
    assert fellow_hold(s, "r1", 1, {1, 2}) == 103.8 + window_s(T) == 105.3
    assert s.safe("r1") == 104.2  # (before: node 1 cut here, once node 2 said it left r1)
    s.absent["eq0"][2] = 101.0
    assert fellow_hold(s, "r1", 1, {1, 2}) == 101.0 + T - 2 * slack_s(T) == 104.0
    assert fellow_hold(s, "r1", 2, {1, 2}) == 0.0  # (node 2 held nobody: no fellow)
    assert fellow_hold(s, "eq1", 1, {1, 2}) == fellow_hold(s, "r0", 1, {1, 2}) == 0.0
    assert fellow_hold(s, "r1", 1, {1, 2, 3}) == 0.0  # (a swarm of 4: the on-time node decides, held_bound)
    s.absent["eq0"] = {1: 103.0}
    assert fellow_hold(s, "r1", 1, {1, 2}) == 0.0  # (no read found node 2's relay missing)
    s.absent["eq0"] = {2: 103.2}
    del s.posted["r1"]
    assert fellow_hold(s, "r1", 1, {1, 2}) == 0.0


def _three(fellow_s):
    """Node 0 of 3: round 0's payloads at once; node 2's relay eq0 withheld from it until 3.4 s after its post (node 2
    noted waiting for nodes 0 and 1 in r0: the relay extension), node 1's served at once, node 1 never says it left eq0 (still
    in: node 0, past its relay post + E, is held there with it, its fellow). In r1 node 2 serves r1 at once and says it
    left r1; node 1 serves a note of eq0 naming node 2 and r1 ``fellow_s`` after node 0's eq0 post. Returns (node 0's
    r1, seconds from its eq0 post to the end of its r1 collect, its safe point from that post)."""
    ts, _ = _ranks(n=3, timeout_s=T)
    a = ts[0]
    for k in (1, 2):
        ts[k].chan.set(f"r0/data/{k}", b"x")
    ts[1].chan.set("eq0/data/1", b"relay")
    ts[2].exchanger.notes.note("r0", [0, 1])
    a.exchanger.post("r0", b"mine")
    assert len(a.exchanger.collect("r0", [1, 2], time.monotonic() + T, 1 << 20)) == 2
    a.exchanger.post("eq0", b"relay")
    e0 = a.exchanger.schedule.posted["eq0"]
    timers = [threading.Timer(3.4, lambda: ts[2].chan.set("eq0/data/2", b"relay"))]
    ts[1].exchanger.notes.note("eq0", [2])
    timers.append(threading.Timer(fellow_s, lambda: ts[1].chan.set("r1/data/1", b"late")))
    for t in timers:
        t.start()
    assert len(a.exchanger.collect("eq0", [1, 2], time.monotonic() + T, 1 << 20)) == 2
    assert a.exchanger.schedule.fellows_of("r1") == {1}, a.exchanger.schedule.fellows
    ts[2].chan.set("r1/data/2", b"two")
    ts[2].exchanger.notes.ended("r1")
    a.exchanger.post("r1", b"mine")
    got = a.exchanger.collect("r1", [1, 2], e0 + 10.0, 1 << 20)
    took = time.monotonic() - e0
    for t in timers:
        t.join()
    return got, took, a.exchanger.schedule.safe("r1") - e0


def test_in_a_swarm_of_three_a_fellow_is_not_cut_at_safe_on_the_word_of_the_only_other_peer():
    """Node 1's r1 comes 4.5 s after node 0's eq0 post: past node 0's safe point (4.0 s; before, node 2 said it left r1
    and node 0 cut node 1 there, taking r1 of node 2 alone), before its hold (node 0's r1 post, just after node 2's
    relay came at 3.4 s, + W). Node 0 reads it."""
    got, took, safe = _three(4.5)
    assert safe == pytest.approx(T - 1.0)
    assert sorted(got) == [1, 2], (sorted(got), took)


def test_in_a_swarm_of_three_a_fellow_is_cut_at_its_hold():
    """Node 1's r1 comes only 6.5 s after node 0's eq0 post: node 0 stops at its hold (about 4.9-5.0 s), not at its
    window W + E from its r1 post (about 7.4 s), so node 0's relay keeps S before an honest node 2's relay deadline."""
    got, took, _ = _three(6.5)
    assert sorted(got) == [2], (sorted(got), took)
    assert took < 6.0, took
