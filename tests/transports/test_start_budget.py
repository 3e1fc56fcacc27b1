"""One start-up budget, and the rank that made a reader wait named (review r31r R3; transports/startgather.py).

Before, each start-up exchange waited up to ``swarm.startup_timeout_s`` from this rank's own post: rank 3 serving one
value late to one reader in each of three exchanges (16 s under ``startup_timeout_s=20``) held every rank 48 s and
nobody was named. Now a rank's start-up waits add up to at most ``startup_timeout_s``, and a value that came over
``LATE_S`` after this rank posted names its rank (``late``; ``waited`` for a rank that says it was held itself)."""

import threading
import time

import pytest
from signed_ranks import _ranks

from dgrpo.errors import PeerFailure
from dgrpo.transports.startgather import HELD, LATE_S, ORDER, STEP_S, StartBudget, name_late
from dgrpo.transports.storewait import STOP_GRACE_S


def test_a_value_over_late_s_after_this_rank_posted_names_its_rank_late():
    budget = StartBudget()
    values, named = name_late(2, "role", {0: "a", 1: "b", 2: "c", 3: "d"}, 100.0,
                              {0: 100.2, 1: 100.0 + LATE_S - 0.5, 3: 116.0}, budget)
    assert values == {0: "a", 1: "b", 2: "c", 3: "d"}
    assert named == [(3, f"late: served start-up exchange 'role' 16.0s after this node posted (over {LATE_S:g}s: it "
                         "held its value back from this node, or came to the exchange late)")]
    assert budget.held == ("role", 16.0, [3]) and budget.note() == HELD + '["role", 16.0, [3]]'


def test_a_rank_that_says_it_was_held_is_named_waited_under_its_own_name_only():
    """Its note (unchecked) is quoted under its writer; the nodes it names are not named for it."""
    budget = StartBudget()
    values, named = name_late(0, "config", {0: "x", 2: "fp|sig" + HELD + '["role", 16.1, [3]]'}, 50.0, {2: 66.0},
                              budget)
    assert values == {0: "x", 2: "fp|sig"}  # (the note is no part of the value)
    assert named == [(2, "waited: served start-up exchange 'config' 16.0s after this node posted, saying it waited "
                         "16.1s for nodes [3] in exchange 'role'")]
    _, named = name_late(0, "config", {2: "fp" + HELD + "not json"}, 50.0, {2: 66.0}, budget)
    assert named[0][1].startswith("late: ")  # (a malformed note is no claim)


def test_values_in_time_name_nobody_and_clear_the_hold():
    budget = StartBudget()
    budget.held = ("role", 9.0, [3])
    assert name_late(1, "config", {0: "a", 3: "b"}, 10.0, {0: 10.1, 3: 10.0 + LATE_S}, budget)[1] == []
    assert budget.held is None and budget.note() == ""


def test_the_budget_counts_waits_only_from_the_check_in_s_end():
    budget = StartBudget()
    budget.begin(time.monotonic() - 3.0)  # (the process group's join took 3 s)
    budget.begin(time.monotonic() - 100.0)  # (once)
    assert 16.9 < budget.left(20.0) <= 17.0
    with budget.waiting():
        time.sleep(0.2)
    assert budget.left(20.0) <= 16.8 and budget.left(1.0) == 0.0


def test_each_later_start_up_exchange_may_end_one_step_later_past_the_budget():
    """So a rank held in one exchange until its budget ends stops (and says why) before its peers waiting for it in the
    next exchange give up on it; never past ``timeout_s`` from the exchange's start."""
    budget = StartBudget()
    budget.begin(None)
    budget.spent = 18.0
    assert [budget.wait_s(tag, 20.0) for tag in ORDER] == [5.0, 8.0, 11.0, 14.0, 17.0, 20.0, 20.0, 20.0, 20.0]  # (STEP_S: 3 s; clock: last)
    assert budget.wait_s("name", 20.0) == 5.0 and STEP_S >= STOP_GRACE_S  # (an exchange of no order: one step)
    budget.spent = 25.0  # (spent: e.g. the process group's join held that long; each exchange still gets a step)
    assert budget.wait_s("role", 20.0) == STEP_S


def _serve_late(t, key: str, reader: str, seconds: float) -> None:
    """Rank ``t``'s server serves ``key`` to ``reader`` only ``seconds`` after it first refused it (as the review's
    ``x_delay``): every other reader at once."""
    serve, first = t.chan.serve, {}

    def slow(k, r):
        if k == key and r == reader and time.monotonic() - first.setdefault(k, time.monotonic()) < seconds:
            return None
        return serve(k, r)

    t.chan.serve = slow


def _gather_all(ts, tags, limit):
    """Every rank gathers ``tags`` in turn (each in a thread): rank → the values, or what it raised."""
    out = {}

    def one(t):
        try:
            out[t.rank] = [t.gather_values(tag, f"{tag} of {t.rank}", timeout_s=limit) for tag in tags]
        except Exception as err:  # noqa: BLE001 - the outcome under test
            out[t.rank] = err

    threads = [threading.Thread(target=one, args=(t,), daemon=True) for t in ts]
    for th in threads:
        th.start()
    for th in threads:
        th.join(3 * limit + 30)
    for t in ts:
        t.chan.close()
    return out


def test_a_rank_whose_budget_is_spent_waits_one_step_for_a_value_held_back_and_names_its_holder():
    """Node 2 has spent its start-up budget (``startup_timeout_s=10``) in earlier waits; rank 3 serves it its ``role``
    5 s late. Node 2 waits one STEP_S (3 s), not 10 s, and stops naming node 3 and the budget; the others, served at
    once, go on."""
    limit = 10.0
    ts, _ = _ranks(timeout_s=limit)
    ts[2].start_budget.begin(None)
    ts[2].start_budget.spent = limit
    _serve_late(ts[3], "role/data/3", "2", 5.0)
    out = _gather_all(ts, ["role"], limit)
    assert isinstance(out[2], PeerFailure), out
    line = str(out[2])
    assert line.startswith("node 3 sent nothing for exchange 'role' within swarm.startup_timeout_s=10s"), line
    assert "a rank's start-up waits add up to at most swarm.startup_timeout_s=10s (one budget: node 2 had waited 10.0s" in line
    for k in (0, 1, 3):
        assert out[k] == [{n: f"role of {n}" for n in range(4)}], (k, out[k])


@pytest.mark.slow
def test_values_held_back_from_one_reader_in_two_exchanges_stop_it_within_one_budget_naming_the_holder():
    """Rank 3 serves node 2 its ``role`` 11 s late, then its ``config`` 11 s late, under ``startup_timeout_s=14``.
    Each hold fits one exchange's old bound, so before node 2 waited 22 s and went on, nobody named. Now node 2's
    waits add up past its one budget (plus two STEP_S for ``config``, the second start-up exchange): it stops in
    ``config`` naming node 3 and the budget, after naming node 3 ``late`` for ``role``. The others read node 2's
    ``config`` 11 s late (named ``waited``, quoting its claim under its own name: never node 3 on its word) and,
    waiting for node 2's echo, quote its signed reason instead of calling it silent."""
    limit = 14.0
    ts, _ = _ranks(timeout_s=limit)
    _serve_late(ts[3], "role/data/3", "2", 11.0)
    _serve_late(ts[3], "config/data/3", "2", 11.0)
    out = _gather_all(ts, ["role", "config"], limit)
    assert all(isinstance(out[k], PeerFailure) for k in (0, 1, 2)), out
    line = str(out[2])
    assert line.startswith("node 3 sent nothing for exchange 'config' within swarm.startup_timeout_s=14s"), line
    assert "a rank's start-up waits add up to at most swarm.startup_timeout_s=14s (one budget: node 2 had waited" in line
    assert [n for n, _ in ts[2]._notes] == [3] and ts[2]._notes[0][1].startswith("late: served start-up exchange "
                                                                                   "'role' ")
    for k in (0, 1):
        assert str(out[k]).startswith(f"node 2 stopped at start-up ({line}"), (k, out[k])
        assert [n for n, _ in ts[k]._notes] == [2], (k, ts[k]._notes)
        why = ts[k]._notes[0][1]
        assert why.startswith("waited: served start-up exchange 'config' ") and why.endswith(
            "s for nodes [3] in exchange 'role'"), why


def test_a_launch_answer_held_back_names_its_holder_and_the_held_rank_says_so_with_its_role():
    """Review r31s S1: rank 3 answered node 1's launch challenge 9 s late. Node 1 names node 3 ``late`` (a WARNING line
    and round 0's peers.jsonl), and its role value carries the hold, so its peers name node 1 ``waited`` under its own
    name only, never ``late``; before, node 3 was named by nobody and node 1 ``late`` by every other rank."""
    from types import SimpleNamespace

    from dgrpo.transports.startgather import name_slow_answers

    one = SimpleNamespace(rank=1, _notes=[], start_budget=StartBudget())
    name_slow_answers(one, {0: 0.1, 2: LATE_S - 0.1, 3: 9.04})
    assert one._notes == [(3, f"late: answered node 1's launch challenge 9.0s after it was asked (over {LATE_S:g}s: its "
                              "server held the answer back from this node)")]
    note = one.start_budget.note()
    assert note == HELD + '["launch", 9.0, [3]]'
    _, named = name_late(0, "role", {0: "honest|s0", 1: "honest|s1" + note}, 20.0, {1: 29.2}, StartBudget())
    assert named == [(1, "waited: served start-up exchange 'role' 9.2s after this node posted, saying it waited 9.0s "
                         "for nodes [3] in exchange 'launch'")]
    name_slow_answers(one, {0: 0.1, 3: LATE_S})  # (answers in time clear the hold)
    assert one.start_budget.held is None and one._notes[1:] == []
