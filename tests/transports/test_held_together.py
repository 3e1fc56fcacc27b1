"""Review r31q Q3 (transports/waits.py ``Schedule.held_bound``, transports/witnesses.py ``HeldBefore``), without a
launch: two peers held together in ``eq{n-1}`` to their round's end (a relay withheld behind a false note) post
``r{n}`` about ``timeout_s`` after a node that had every relay; that node waits for them to their bound (their
``r{n-1}`` arrival + timeout_s + its own compute + W) instead of cutting them at W + E, so their round payloads reach
every honest node and the message sets stay one. A peer alone in ``eq{n-1}`` gets nothing from it.

``timeout_s = 5``: ``S = 1``, ``W = 1.5``, ``E = 2.5`` (exact in binary)."""

import threading
import time

import pytest

from dgrpo.transports.waits import Schedule, extension_s, slack_s, window_s

from signed_ranks import _ranks

T = 5.0


def test_the_held_bound_by_hand_and_the_round_end_it_moves():
    """r0 of node 1 arrived at 100.2, this node left eq0 at 100.5 and posted r1 at 101.0 (0.5 s of compute): node 1,
    held in eq0 to its round's end (by 100.2 + 5), posts r1 by 105.2 + 0.5 + W = 107.2. Given to a peer with a note of
    eq0 that was held there with another (``held``), the wait goes there and the round's end (r1 and eq1) to 107.2 + S;
    without ``held``, or for a note of another exchange, it is W + E past the post as before, within 106."""
    assert (slack_s(T), window_s(T), extension_s(T)) == (1.0, 1.5, 2.5)
    s = Schedule(T)
    for tag in ("r0", "eq0", "r1"):
        s.enter(tag)
    s.posted.update({"r0": 100.0, "eq0": 100.3, "r1": 101.0})
    s.arrived["r0"] = {1: 100.2, 2: 100.1}
    s.left["eq0"] = 100.5
    assert s.held_bound("r1", 1) == pytest.approx(107.2)
    assert s.held_bound("r1", 3) is None and s.held_bound("eq1", 1) is None  # (no r0 of node 3; not a round payload)
    base = s.base("r1", 106.0)
    assert base == 102.5
    assert s.extended("r1", 1, base, "eq0", 106.0) == 105.0 and s.cap("r1", 106.0) == 106.0  # (not held: W + E)
    assert s.extended("r1", 1, base, "r0", 106.0, held=True) == 105.0  # (a note of r0: no hold in eq0)
    assert s.extended("r1", 1, base, "eq0", 106.0, held=True) == pytest.approx(107.2)
    assert s.cap("r1", 106.0) == s.cap("eq1", 106.0) == pytest.approx(108.2)  # (+ S for the relays)
    s.arrived["r0"][2] = 104.0  # (an arrival this late cannot be: the bound is still this node's post + T + W)
    assert s.held_bound("r1", 2) == 101.0 + T + window_s(T)


def _held_in_eq0(still_in):
    """Node 0 of 4 had every round payload and relay of round 0 at once (it posted r1 right after); nodes 1 and 2 serve
    a signed note of eq0 naming node 3 (they wait for its relay), node 3 and those of 1, 2 not in ``still_in`` say
    they left eq0 (``end/eq0``). Node 3 serves r1 at once and says it left r1; nodes 1 and 2 serve r1 4.6 s after
    node 0's post: past its W + E (4.0 s), within its round's end (5.0 s). Returns (node 0's r1, seconds it took)."""
    ts, _ = _ranks(n=4, timeout_s=T)
    a = ts[0]
    for k in (1, 2, 3):
        ts[k].chan.set(f"r0/data/{k}", b"x")
        ts[k].chan.set(f"eq0/data/{k}", b"relay")
    a.exchanger.post("r0", b"mine")
    assert len(a.exchanger.collect("r0", [1, 2, 3], time.monotonic() + T, 1 << 20)) == 3
    a.exchanger.post("eq0", b"relay")
    assert len(a.exchanger.collect("eq0", [1, 2, 3], time.monotonic() + T, 1 << 20)) == 3
    for k in (1, 2):
        ts[k].exchanger.notes.note("eq0", [3])
    for k in {1, 2, 3} - set(still_in):
        ts[k].exchanger.notes.ended("eq0")
    ts[3].chan.set("r1/data/3", b"three")
    ts[3].exchanger.notes.ended("r1")
    a.exchanger.post("r1", b"mine")
    t0 = time.monotonic()
    timer = threading.Timer(4.6, lambda: [ts[k].chan.set(f"r1/data/{k}", b"late") for k in (1, 2)])
    timer.start()
    got = a.exchanger.collect("r1", [1, 2, 3], t0 + T, 1 << 20)
    took = time.monotonic() - t0
    timer.join()
    time.sleep(0.3)
    return got, took


def test_two_peers_held_together_in_the_relay_exchange_are_waited_for_past_w_plus_e():
    """Both victims still in eq0: node 0 waits for them past W + E (before: cut at 4.0 s, their r1 used by
    themselves alone) and reads their r1 at 4.6 s (node 3 left r1, each victim is the other's witness there)."""
    got, took = _held_in_eq0(still_in=(1, 2))
    assert sorted(got) == [1, 2, 3], (sorted(got), took)
    assert 4.55 < took < 5.5, took


def test_a_peer_alone_in_the_relay_exchange_gets_no_longer_wait():
    """Only node 1 still in eq0 (node 2 said it left, as the withholder posing as held would be alone): no other node
    is held with it, so both late peers are cut at W + E (4.0 s) as before."""
    got, took = _held_in_eq0(still_in=(1,))
    assert sorted(got) == [3], (sorted(got), took)
    assert extension_s(T) + window_s(T) - 0.05 < took < 4.55, took
