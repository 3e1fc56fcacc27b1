"""The process group's join and the ready barrier, within the start-up's one budget and named (review r31s S3;
transports/rendezvous.join_process_group, startgather.StartBudget, startready.name_late_readies).

Before, a rank that entered the process group's join 15 s late held every rank there, within the budget, and nobody
was named (torch's wait tells nobody who came last); and a ready confirmation that came late was waited for, unnamed.
Now the join is given up ``JOIN_S`` after a rank entered it (the rest of the lateness shows, and is named, in the
first start-up exchange), and a late ready confirmation names its rank like any start-up value."""

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

import dgrpo
from dgrpo.errors import PeerFailure
from dgrpo.transports.startgather import HELD, LATE_S, STEP_S, StartBudget, name_late

SRC = str(Path(dgrpo.__file__).resolve().parents[1])  # (the subprocess runs the dgrpo under test)


def test_the_launch_proof_wait_is_half_the_setting_at_most_and_what_is_left_of_the_budget_at_least_one_step():
    budget = StartBudget()
    budget.begin(None)
    assert budget.settle_s(20.0) == 10.0  # (nothing spent: half of startup_timeout_s)
    budget.spent = 14.0
    assert budget.settle_s(20.0) == 6.0  # (what is left)
    budget.spent = 19.0
    assert budget.settle_s(20.0) == STEP_S == 3.0  # (never under one step)
    budget.spent = 40.0
    assert budget.settle_s(20.0) == 3.0 and budget.settle_s(4.0) == 2.0  # (never over half the setting)


def test_a_rank_held_over_half_of_late_s_in_the_group_s_join_or_whose_join_failed_says_so_with_its_next_value():
    budget = StartBudget()
    budget.joined(LATE_S / 2, [3])
    assert budget.held is None  # (a join of at most half LATE_S: nothing to say)
    budget.joined(None)
    assert budget.held is None  # (no process group: nothing waited)
    budget.joined(5.04, [3])
    assert budget.held == ("join", 5.04, [3]) and budget.note() == HELD + '["join", 5.0, [3]]'
    _, named = name_late(0, "role", {0: "honest|s0", 1: "honest|s1" + budget.note()}, 10.0, {1: 15.5}, StartBudget())
    assert named == [(1, "waited: served start-up exchange 'role' 5.5s after this node posted, saying it waited 5.0s "
                         "for nodes [3] in exchange 'join'")]
    held = StartBudget()
    held.held = ("launch", 9.0, [2])  # (a launch answer held back names its holder: that note goes first)
    held.joined(5.0, [3])
    assert held.held == ("launch", 9.0, [2])
    short = StartBudget()
    short.joined(0.02, [], finished=False)  # (came after its peers gave up: held before it, at its check-in)
    assert short.held == ("join", 0.02, []) and short.note() == HELD + '["join", 0.0, []]'


_ALONE = """
import json, sys, time
import torch.distributed as dist
from dgrpo.transports import rendezvous, startgather
startgather.JOIN_S = 1.0
store = dist.TCPStore("127.0.0.1", 0, 1, True, wait_for_workers=False)  # (its wait names the key)
start = time.monotonic()
waited, missing, joined = rendezvous.join_process_group(store, "gloo", 0, 3)
print(json.dumps({"waited": waited, "missing": missing, "joined": joined, "took": time.monotonic() - start,
                  "initialized": dist.is_initialized()}))
"""


def test_a_join_whose_peers_never_enter_is_given_up_after_join_s_and_the_rank_goes_on_without_a_group():
    """Rank 0 of 3 alone in a real gloo join (``JOIN_S`` set to 1 s): it goes on without a process group, naming the
    rank the store still lacked; before, it waited there until ``swarm.startup_timeout_s`` (the budget)."""
    out = subprocess.run([sys.executable, "-c", _ALONE], capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": SRC, "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1",
                              "GLOO_SOCKET_IFNAME": "lo", "TORCH_CPP_LOG_LEVEL": "ERROR"})
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["initialized"] is False and got["joined"] is False, got
    assert got["waited"] >= 0.5, got  # (gloo gives up its store wait at JOIN_S - 0.5)
    assert got["missing"] and set(got["missing"]) <= {1, 2}, got  # (gloo waits for its peers' addresses in turn)
    assert "the process group's join did not finish within 1s of this node entering it (still waiting for the " \
           "address of node" in out.stderr, out.stderr[-2000:]


def test_a_store_lost_during_the_join_stops_the_rank_as_before(monkeypatch):
    from dgrpo.transports import rendezvous

    class Gone:
        def check(self, keys):
            raise RuntimeError("Connection reset by peer")

    def init(*a, **k):
        raise RuntimeError("wait timeout after 5000ms, keys: /pg/0//cpu//0/2")

    monkeypatch.setattr(rendezvous, "dist", SimpleNamespace(init_process_group=init, PrefixStore=lambda p, s: s,
                                                            DistError=RuntimeError))
    with pytest.raises(PeerFailure, match=r"^node 1 lost the rendezvous store while joining the process group: "
                                          r"RuntimeError: Connection reset by peer"):
        rendezvous.join_process_group(Gone(), "gloo", 1, 4)


def test_a_join_that_hangs_holds_this_rank_join_s_at_most_and_is_left_running(monkeypatch):
    """gloo's connect can hang several times its timeout for a rank that comes to the join after its peers left it
    (25 s at ``JOIN_S=5`` in a 4-rank launch): the rank stops waiting at ``JOIN_S`` and goes on; its close then tears no
    group down while the join runs."""
    import threading

    from dgrpo.transports import rendezvous, startgather

    release = threading.Event()

    def hang(*a, **k):
        release.wait(60)

    class Store:
        def check(self, keys):
            return False

    monkeypatch.setattr(startgather, "JOIN_S", 0.6)
    monkeypatch.setattr(rendezvous, "dist", SimpleNamespace(init_process_group=hang, PrefixStore=lambda p, s: s,
                                                            DistError=RuntimeError))
    try:
        waited, missing, joined = rendezvous.join_process_group(Store(), "gloo", 2, 4)
        assert rendezvous.group_joining() and not release.is_set()  # (returned while torch's join still ran)
        assert waited >= 0.6 and missing == [] and not joined
    finally:
        release.set()
    rendezvous._JOINING[0].join(10)
    assert not rendezvous.group_joining()


def _serve_late_to_all(t, key: str, seconds: float) -> None:
    """Rank ``t``'s server serves ``key`` to each reader only ``seconds`` after it first refused it to that reader."""
    serve, first = t.chan.serve, {}

    def slow(k, reader):
        if k == key and time.monotonic() - first.setdefault(reader, time.monotonic()) < seconds:
            return None
        return serve(k, reader)

    t.chan.serve = slow


def test_a_ready_confirmation_over_late_s_late_names_its_rank_and_one_that_says_it_was_held_waited():
    """Rank 3 serves its ready confirmation LATE_S + 1 s late to every reader: each other rank names it ``late``.
    Rank 2, held in ``startup`` (its note says so), serves its own as late: named ``waited`` under its own name, its
    claim quoted, never node 3 on its word. Before, both were waited for within the budget and nobody was named."""
    from test_startup_ready import _checked

    from dgrpo.transports.startready import barrier, name_late_readies, ready_record

    ts, _ = _checked()
    ts[2].start_budget.held = ("startup", 6.0, [3])
    for k in (2, 3):
        _serve_late_to_all(ts[k], f"ready/data/{k}", LATE_S + 1.0)
    out = {}

    def one(t):
        came = {}
        readies = barrier(t, ready_record(t.signed_store, t.start_budget.held), 30.0, came=came)
        name_late_readies(t, readies, came)
        out[t.rank] = readies

    threads = [threading.Thread(target=one, args=(t,), daemon=True) for t in ts]
    for th in threads:
        th.start()
    for th in threads:
        th.join(90)
    for t in ts:
        t.chan.close()
    assert sorted(out) == [0, 1, 2, 3] and all(sorted(r) == [0, 1, 2, 3] for r in out.values()), out
    for t in ts:
        named = dict(t._notes)
        assert sorted(named) == sorted({2, 3} - {t.rank}), (t.rank, t._notes)
        if t.rank != 3:
            assert named[3].startswith("late: served start-up exchange 'ready' "), named[3]
        if t.rank != 2:
            assert named[2].startswith("waited: served start-up exchange 'ready' ") and named[2].endswith(
                "s after this node posted, saying it waited 6.0s for nodes [3] in exchange 'startup'"), named[2]
    assert json.loads(out[0][2])["held"] == ["startup", 6.0, [3]] and "held" not in json.loads(out[0][3])
    assert ts[0].start_budget.held[0] == "ready" and ts[0].start_budget.held[2] == [2, 3]  # (told with `resume`)
