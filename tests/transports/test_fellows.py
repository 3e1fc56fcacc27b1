"""The fellows rule (transports/waits.py: ``Schedule.held_with``, ``Schedule.fellows_of``; review r31l F2, r31m F2) by
hand-worked numbers, without a launch: a peer still in ``eq{n-1}`` while this node was held there past its relay post +
E is its fellow, waited for in ``r{n}`` as any peer and never accused by it; one that did not hold it is accused as
before; a wait that ends exactly at the relay post + E holds nobody. (The launch tests of the attack are in
test_round_deadlines.py, slow set.)

``timeout_s = 5``: ``S = min(5 / 5, 0.5 + 1) = 1``, ``W = (5 - 2 S) / 2 = 1.5``, ``E = W + S = 2.5`` (all exact in
binary, so the times below compare exactly)."""

import math
import threading
import time

import pytest

from dgrpo.transports.waits import Schedule, extension_s, slack_s, window_s

from signed_ranks import _ranks

T = 5.0


def test_the_schedules_numbers_at_timeout_5():
    assert (slack_s(T), window_s(T), extension_s(T)) == (1.0, 1.5, 2.5)
    s = Schedule(T)
    for tag in ("r0", "eq0"):
        s.enter(tag)
    s.posted.update({"r0": 100.0, "eq0": 101.0})
    assert s.safe("eq0") == 103.5  # (its relay post + E)
    assert s.safe("r1") == 105.0  # (its relay post + timeout_s - S)
    assert s.base("r1", 200.0) == 195.0 + 1.5  # (not posted yet: the deadline - timeout_s, + W)


def test_fellows_of_r_n_are_the_peers_held_with_in_eq_n_minus_1_and_nothing_else():
    s = Schedule(T)
    for tag in ("r0", "eq0"):
        s.enter(tag)
    assert s.fellows_of("r1") == set()
    s.held_with("eq0", {2})
    s.held_with("eq0", [3])
    assert s.fellows_of("r1") == {2, 3}
    assert s.fellows_of("eq0") == s.fellows_of("eq1") == s.fellows_of("r2") == s.fellows_of("r0") == set()
    assert s.fellows_of("rec0") == set()
    s.fellows_of("r1").add(4)  # (a copy: the record is not changed through it)
    assert s.fellows_of("r1") == {2, 3}
    for n in range(1, 5):  # (the last 8 exchanges are kept: eq0 and its fellows go with it)
        s.enter(f"r{n}")
        s.enter(f"eq{n}")
    assert "eq0" not in s.history and s.fellows_of("r1") == set()


def test_a_fellow_missed_in_r_n_owes_it_as_served_where_its_note_bought_time_else_as_carried_by_a_relay():
    """Review r31o H1: of the fellows missed in r1, the one whose note bought this node's extension (3) owes its r1 as
    served by the end of eq1 (owed_in), the other (2) as carried by another node's relay of eq1 (unnoted_in); a noted
    peer that was no fellow missed there (1) owes nothing; nothing is owed in any other exchange."""
    s = Schedule(T)
    for tag in ("r0", "eq0", "r1"):
        s.enter(tag)
    s.owe("r1", {2, 3}, {1, 3})
    s.owe("r1", set(), {1})
    assert (s.owed_in("eq1"), s.unnoted_in("eq1")) == ({3}, {2})
    assert s.owed_in("r1") == s.unnoted_in("r1") == s.owed_in("eq0") == s.unnoted_in("eq2") == set()
    s.enter("eq1")
    for n in range(2, 6):  # (kept while r1 is among the last 8 exchanges)
        s.enter(f"r{n}")
        s.enter(f"eq{n}")
    assert "r1" not in s.history and s.owed_in("eq1") == s.unnoted_in("eq1") == set()


def _in_eq0(n: int, serving: int, relay_post_after_r0: float):
    """``n`` ranks (timeout_s=T); node ``serving`` serves its relay eq0 ("relay two"/"relay three"…), node 0 entered r0
    and eq0, having posted r0 at p (a multiple of 0.25 s, 4 s ago) and eq0 ``relay_post_after_r0`` later. Returns
    (the ranks, node 0's transport, its schedule, p)."""
    ts, _ = _ranks(n=n, timeout_s=T)
    a, sched = ts[0], ts[0].exchanger.schedule
    ts[serving].chan.set(f"eq0/data/{serving}", f"relay {['zero', 'one', 'two', 'three'][serving]}".encode())
    p = math.floor(4 * time.monotonic()) / 4 - 4.0
    sched.enter("r0")
    sched.enter("eq0")
    sched.posted.update({"r0": p, "eq0": p + relay_post_after_r0})
    return ts, a, sched, p


def _eq0_then_r1(relay_post_after_r0: float, note: bool = False):
    """Node 0 of 3 (timeout_s=5) posted r0 at p and its relay eq0 at p + ``relay_post_after_r0``, p a multiple of 0.25
    s with p + timeout_s (the round's end) 0.75-1 s from now; node 1 withholds its relay eq0, node 2 serves its relay
    but says nothing of leaving eq0 (no ``end/eq0``: still in it). Node 0's wait for node 1 in eq0 ends at the round's
    end, p + 5 (min(now + S, p + timeout_s); no note, so no extension); node 2's relay is read at once, at least
    0.25 s before safe (a peer still awaited past safe would be recorded as a fellow too). Then node 0 posts r1 and
    nobody else does: it waits W = 1.5 s for both (``note``: node 2 serves a note of eq0 naming node 1, which buys it
    E, so node 0 waits W + E = 4 s for it). Returns (the ranks, node 0's fellows of r1, whom it accused of r1,
    refusals of r1)."""
    ts, a, sched, p = _in_eq0(3, 2, relay_post_after_r0)
    assert sched.base("eq0", p + 2 * T) == p + T  # (node 0's deadline for node 1's relay: the round's end)
    assert a.exchanger.collect("eq0", [1, 2], p + 2 * T, 1 << 20) == {2: b"relay two"}
    fellows = sched.fellows_of("r1")
    if note:
        ts[2].exchanger.notes.note("eq0", [1])
    a.rejected = []
    a.exchanger.post("r1", b"mine")
    assert a.exchanger.collect("r1", [1, 2], time.monotonic() + T, 1 << 20) == {}
    accused = {peer for peer in (1, 2) if "r1" in a.ledger.accusations(peer)}
    return ts, fellows, accused, sorted((n, r.split(":")[0]) for n, r in a.rejected)


def test_a_peer_that_held_this_node_in_eq_past_its_relay_post_plus_e_is_never_accused_in_the_next_round():
    """Relay posted at p + 2: safe = p + 2 + E = p + 4.5 (0.25-0.5 s after eq0's wait begins), and node 0 waits for
    node 1 to p + 5 while node 2 is still in eq0 (it holds node 0: Witnesses, 1 of the 2 others needed): node 2 is a
    fellow. In r1 it misses its window W (served nothing 1.5 s after node 0's post), is named (missing payload) and
    never accused by node 0; node 1, which held nobody, is accused as before."""
    _, fellows, accused, refused = _eq0_then_r1(2.0)
    assert fellows == {2}
    assert accused == {1}
    assert refused == [(1, "missing payload"), (2, "missing payload")]


def test_a_wait_that_ends_exactly_at_the_relay_post_plus_e_makes_no_fellow():
    """The boundary: relay posted at p + 2.5, so safe = p + 2.5 + E = p + 5, exactly the end of node 0's wait for
    node 1 in eq0: it was never held past safe (a wait past it is ``until > now >= safe``), so node 2 is no fellow and
    in r1 both are accused as before the rule."""
    _, fellows, accused, refused = _eq0_then_r1(2.5)
    assert fellows == set()
    assert accused == {1, 2}
    assert refused == [(1, "missing payload"), (2, "missing payload")]


def test_the_withholder_this_node_waits_for_is_never_its_fellow():
    """Node 0 of 4 (h31v, the neighbour of review r31n G1): nodes 1 and 2 withhold their relays eq0, node 3 serves its
    relay and never says it left eq0. Past safe (p + 4.5) node 0 is held to the round's end (p + 5) by the others
    still in eq0 (Witnesses: 4 - quorum(4) = 1 other needed). Before, every peer still in but the one waited for was
    recorded, so each withholder was the other's witness and both became node 0's fellows: never accused in r1. Now a
    peer whose relay this node has not received is no fellow: only node 3 is, and in r1 nodes 1 and 2 are accused."""
    ts, a, sched, p = _in_eq0(4, 3, 2.0)
    assert a.exchanger.collect("eq0", [1, 2, 3], p + 2 * T, 1 << 20) == {3: b"relay three"}
    assert sched.fellows_of("r1") == {3}
    a.exchanger.post("r1", b"mine")
    assert a.exchanger.collect("r1", [1, 2, 3], time.monotonic() + T, 1 << 20) == {}
    assert {peer for peer in (1, 2, 3) if "r1" in a.ledger.accusations(peer)} == {1, 2}


def _eq1(ts, served_late: bool) -> None:
    """Node 0 (after :func:`_eq0_then_r1`) posts its relay eq1 and collects nodes 1's and 2's; node 2 serves its relay
    0.3 s in and, ``served_late``, its r1 just before."""
    ts[1].chan.set("eq1/data/1", b"relay one")

    def serve():
        if served_late:
            ts[2].chan.set("r1/data/2", b"late two")
        ts[2].chan.set("eq1/data/2", b"relay two")

    threading.Timer(0.3, serve).start()
    ts[0].exchanger.post("eq1", b"relay")
    assert sorted(ts[0].exchanger.collect("eq1", [1, 2], time.monotonic() + T, 1 << 20)) == [1, 2]


@pytest.mark.parametrize("served_late", [True, False])
def test_a_fellow_whose_note_bought_it_time_is_accused_of_r1_at_the_end_of_eq1_unless_its_round_payload_came(
        served_late):
    """Review r31n G1: node 2 is node 0's fellow (as above: still in eq0 while node 0 was held past safe), serves a
    note of eq0 (node 0 gives it E in r1) and misses r1 all the same (node 0 names it, never accuses it there). In eq1
    it serves its relay. Served late: its r1 comes during eq1 (a fellow late by the withholder's doing), and it is
    never accused. Never served (a rank posing as a fellow that hid r1 from everyone): node 0 accuses it of r1 at the
    end of eq1. Before, it never did (nodes 0 and 1 of the review's run never accused it: it was never expelled)."""
    ts, fellows, accused, refused = _eq0_then_r1(2.0, note=True)
    a = ts[0]
    assert fellows == {2} and accused == {1}
    assert refused == [(1, "missing payload"), (2, "missing payload")]
    assert a.exchanger.schedule.owed_in("eq1") == {2} and a.exchanger.schedule.unnoted_in("eq1") == set()
    _eq1(ts, served_late)
    assert ("r1" in a.ledger.accusations(2)) is not served_late
    assert "r1" in a.ledger.accusations(1) and "eq1" not in a.ledger.accusations(2)
    # (review r31o H1's rule leaves it be: a victim the withholder released late is cut by every honest node, as in
    # r31m F2, and no relay carries its r1; its note of the wait it was held in vouches for it)
    from dgrpo.transports.sidereads import settle_unnoted

    settle_unnoted(a.exchanger, "eq1", {0, 1})
    assert ("r1" in a.ledger.accusations(2)) is not served_late


@pytest.mark.parametrize("carried", [True, False])
def test_a_fellow_that_served_no_note_owes_its_round_payload_as_carried_by_another_relay_not_as_served(carried):
    """Review r31o H1: node 2 is node 0's fellow and serves it no note (a rank posing as a fellow served its notes to
    another node only), misses r1 (named, not accused there) and serves its r1 during eq1, after node 0's cut: served,
    yet used by nobody. Before, node 0 read it there ("late, not missing") and owed it nothing. Now a fellow whose note
    bought it no time is accused of r1 once eq1's relays are merged unless another node's relay carries its messages
    (``carried``: some node had them in time, so it was late for node 0 only); the served copy clears nothing."""
    from dgrpo.transports.sidereads import settle_unnoted

    ts, fellows, accused, _ = _eq0_then_r1(2.0)
    a = ts[0]
    assert fellows == {2} and accused == {1}
    assert a.exchanger.schedule.owed_in("eq1") == set() and a.exchanger.schedule.unnoted_in("eq1") == {2}
    _eq1(ts, served_late=True)
    assert "r1" not in a.ledger.accusations(2)  # (at the end of eq1's collect: the relays are not merged yet)
    settle_unnoted(a.exchanger, "eq1", {0, 1, 2} if carried else {0, 1})
    assert ("r1" in a.ledger.accusations(2)) is not carried
    assert "eq1" not in a.ledger.accusations(2)
    settle_unnoted(a.exchanger, "eq2", set())  # (nothing owed in another round)
    assert set(a.ledger.accusations(2)) == (set() if carried else {"r1"})
