"""When a wait note naming this node buys nothing from it (review r31e G1, narrowed by review r31n G2:
``sidereads.own_doing``), by hand-worked cases, without a launch (the launch of the attack:
test_round_deadlines.py, slow set).

The rule: a note of exchange ``x`` by node ``k`` naming this node is of ``k``'s own doing when this node had noted
waiting for ``k`` in one of the two exchanges before ``x`` and for nobody else there, and ``k`` served no note of the
exchange just before that one. ``timeout_s = 2``: ``S = min(2 / 5, 0.2 + 1) = 0.4``, ``W = (2 - 2 S) / 2 = 0.6``,
``E = W + S = 1.0``: a peer posting its round payload 0.9 s after this node's post comes in with the extension
(0.9 < W + E = 1.6) and not without it (0.9 > W)."""

import threading
import time

import pytest

from dgrpo.transports.sidereads import own_doing
from dgrpo.transports.waits import extension_s, slack_s, window_s

from signed_ranks import _ranks

T = 2.0


def _node0_after(mine_r2, notes_of_2, rec=False):
    """Four in-process ranks; node 0 entered eq1, r2, eq2 (``rec``: eq1, rec1, r2, eq2, as the main rank or any node
    of a heterogeneous swarm, which post round records), noted waiting in r2 for ``mine_r2``; node 2 serves the
    notes ``notes_of_2`` (exchange → whom). Returns the ranks."""
    ts, _ = _ranks(n=4, timeout_s=T)
    a = ts[0]
    for tag in ("eq1", "rec1", "r2") if rec else ("eq1", "r2"):
        a.exchanger.schedule.enter(tag)
    a.exchanger.notes.note("r2", mine_r2)
    a.exchanger.schedule.enter("eq2")
    for tag, whom in notes_of_2.items():
        ts[2].exchanger.notes.note(tag, whom)
    return ts


# (node 0's note of r2, node 2's notes) → whether node 2's note of eq2 is of its own doing for node 0
CASES = [
    # review r31n G2's unit case: node 2 was late into r2 by a noted wait (eq1, rank 3): not its doing
    ([2], {"eq1": [3], "eq2": [0, 1, 3]}, False),
    # node 0 waited in r2 for rank 3 too (as in the review's run): node 0's lateness was not node 2's alone
    ([2, 3], {"eq2": [0, 1, 3]}, False),
    # review r31e G1: node 2 made node 0 wait (and nobody else), no wait of its own before it: its own doing
    ([2], {"eq2": [0, 1, 3]}, True),
    ([2], {"eq2": [0, 1]}, True),  # ("whatever else it names": naming others buys nothing here)
    # a note of eq1 naming nobody is no note: its own doing, as above
    ([2], {"eq1": [], "eq2": [0, 1]}, True),
    # the note does not name node 0: never refused on this rule
    ([2], {"eq2": [1, 3]}, False),
    # node 0 did not wait for node 2 before: never refused on this rule
    ([3], {"eq2": [0, 1, 3]}, False),
]


@pytest.mark.parametrize("rec", [False, True], ids=["peer", "reporting"])  # (review r31o H4: with rec1 in node 0's
@pytest.mark.parametrize("mine_r2, notes_of_2, own", CASES)                 # history the first case was True before)
def test_own_doing_by_hand(mine_r2, notes_of_2, own, rec):
    ts = _node0_after(mine_r2, notes_of_2, rec)
    ex = ts[0].exchanger
    why = ex.notes.waited(2, ["eq2"], time.monotonic() + 1)
    assert why == ("eq2", sorted(notes_of_2["eq2"]))
    assert own_doing(ex, 2, why, time.monotonic() + 1) is own


@pytest.mark.parametrize("mine_r2, notes_of_2, own", [CASES[0], CASES[1], CASES[2]])
def test_node0_gives_node2_the_extension_in_r3_unless_the_wait_was_its_own_doing(mine_r2, notes_of_2, own):
    """The collect of r3: node 2 posts r3 0.9 s after node 0 (over W = 0.6 s, inside W + E = 1.6 s). Review r31n
    G2's case (node 2 noted waiting for node 3 in eq1 and for [0, 1, 3] in eq2; node 0 noted waiting for node 2 in
    r2): node 0 gives it the extension and names it `waited`. Before, node 0 stopped at W and named it `missing
    payload` (a quorum with the attacker's accusation expelled it in the review's launch). A wait of its own doing
    still buys nothing (review r31e G1)."""
    assert (slack_s(T), window_s(T), extension_s(T)) == (pytest.approx(0.4), pytest.approx(0.6), pytest.approx(1.0))
    ts = _node0_after(mine_r2, notes_of_2)
    a = ts[0]
    threading.Timer(0.9, lambda: ts[2].chan.set("r3/data/2", b"two")).start()
    a.rejected = []
    start = time.monotonic()
    got = a.exchanger.collect("r3", [2], start + T, 1 << 20)
    took = time.monotonic() - start
    if own:
        assert got == {} and took < 0.85, took
        assert [(n, r.split(":")[0]) for n, r in a.rejected] == [(2, "missing payload")]
    else:
        assert got == {2: b"two"} and 0.85 < took < 1.6, took
        assert [(n, r.split(":")[0]) for n, r in a.rejected] == [(2, "waited")]
    time.sleep(max(0.0, start + 1.0 - time.monotonic()))
