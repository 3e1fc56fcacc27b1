"""A swarm of 2 (task h31k item 2; issue 31 point 5): the one peer is the quorum (``quorum(2) == 1``), so its lone
accusation used to expel the honest node it named: that node left the swarm ("declared failed by its peers", exit 3)
and the accuser was named nowhere. Now a node accused by the only other live node of an exchange takes the accuser
for the failed peer (:func:`dgrpo.transports.alone.lone_accuser`). In-process ranks on one store, real servers."""

import pytest

from dgrpo.errors import PeerFailure

from signed_ranks import _ranks


def test_the_honest_node_of_two_accused_by_its_peer_names_it_and_goes_on_alone():
    (a, b), _ = _ranks(n=2, timeout_s=2.0)
    b.ledger.accuse(0, "r0")  # (node 1 says node 0 missed r0: a lie, node 0 never met r0 yet)
    assert a.exchange("r0", b"mine") == {0: b"mine"}  # (before: PeerFailure, node 0 declared failed)
    assert a.alive == {0} and a.failed == {1: "r0"}
    assert [n for n, why in a.rejected if why.startswith("accusation: node 1 accused node 0 of missing exchange "
                                                          "'r0' alone in a swarm of 2")] == [1]
    assert a.exchange("eq0", b"relay") == {0: b"relay"}  # (named once, and it goes on)
    assert sum(why.startswith("accusation:") for _, why in a.rejected) == 1


def test_under_abort_the_honest_node_of_two_stops_in_one_line_naming_its_accuser():
    (a, b), _ = _ranks(n=2, timeout_s=2.0)
    a.exchanger.on_peer_failure = "abort"
    b.ledger.accuse(0, "r0")
    with pytest.raises(PeerFailure) as err:
        a.exchange("r0", b"mine")
    line = str(err.value)
    assert line.startswith("node 1 accused node 0 of missing exchange 'r0' alone in a swarm of 2") and "\n" not in line
    assert "declared failed" not in line


def test_with_three_live_nodes_one_accuser_expels_nobody_and_two_expel_the_accused():
    """n >= 3 unchanged: a lone accuser is named, two of 3 expel (``quorum(3) == 2``); once the live roster of an
    exchange is 2 (node 2 expelled), node 1's lone word against node 0 is the swarm-of-2 case."""
    (a, b, c), _ = _ranks(n=3, timeout_s=2.0)
    b.ledger.accuse(0, "r0")
    b.exchanger.post("r0", b"r0 of 1")
    c.exchanger.post("r0", b"r0 of 2")
    assert set(a.exchange("r0", b"r0 of 0")) == {0, 1, 2} and a.alive == {0, 1, 2}
    c.ledger.accuse(0, "r0")
    with pytest.raises(PeerFailure, match=r"^node 0 was declared failed by its peers in exchange 'r0': nodes \[1, 2\]"):
        a.exchange("eq0", b"eq0 of 0")
    (a, b, c), _ = _ranks(n=3, timeout_s=2.0)
    for t in (a, b):
        t.ledger.accuse(2, "r0")
    b.exchanger.post("r0", b"r0 of 1")
    assert set(a.exchange("r0", b"r0 of 0")) == {0, 1} and a.alive == {0, 1}  # (node 2 expelled: 2 of 3)
    b.ledger.accuse(0, "eq0")
    assert a.exchange("eq0", b"eq0 of 0") == {0: b"eq0 of 0"} and a.alive == {0}  # (1 of the 2 live in eq0)


def _run_of(t, run_dir, owner):
    """The part of a :class:`~dgrpo.training.build.Run` the main's writers use, as build_run makes it for ``t``."""
    from types import SimpleNamespace

    from dgrpo.config import RunConfig
    from dgrpo.metrics.logger import MetricsLogger
    from dgrpo.training.build import build_run_dir

    cfg = RunConfig(out_dir=str(run_dir.parent), name=run_dir.name, swarm={"nodes": 2, "transport": "distributed"})
    built = build_run_dir(cfg, owner=owner)  # (owner: claims the folder, as the main rank does at start)
    return SimpleNamespace(cfg=cfg, run_dir=built, transport=t, logger=MetricsLogger.for_run(built, cfg, owner),
                           owns_dir=owner)


def _write_round(run, r):
    """What a round makes a process write: its record (on the main), its peers line (and bans on the main)."""
    from dgrpo.training.loop import _log
    from dgrpo.training.main_dir import main_dir
    from dgrpo.training.records import log_peers

    if main_dir(run) is not None:
        _log(run, None, [{"round": r, "by": run.transport.rank}])
    log_peers(run, {"round": r, "by": run.transport.rank})


def test_a_split_swarm_of_two_never_has_two_processes_write_one_run_folder(tmp_path, caplog):
    """Issue 31 (review r31s): node 1 found node 0 missing and expelled it (quorum of one), node 0 took node 1 for
    the failed peer; both are the main. Before, node 1 appended its rounds to node 0's metrics.jsonl and peers.jsonl
    (no lock on the folder). Now node 0, which holds the run folder's lock, writes it alone, and node 1 writes its
    own rounds in d.node1, locked like a run folder, saying so in one line."""
    import json

    from dgrpo.metrics.logger import read_metrics
    from dgrpo.training.run_dir import release, take

    (a, b), _ = _ranks(n=2, timeout_s=1.0)
    ra, rb = _run_of(a, tmp_path / "d", True), _run_of(b, tmp_path / "d", False)
    _write_round(ra, 0), _write_round(rb, 0)
    assert b.exchange("r1", b"r1 of 1") == {1: b"r1 of 1"} and b.alive == {1}  # (node 0 missing: expelled)
    assert a.exchange("r1", b"r1 of 0") == {0: b"r1 of 0"} and a.alive == {0}  # (node 1 its lone accuser)
    assert a.is_main and b.is_main  # (the reviewer's reproduction)
    for r in (1, 2):
        _write_round(ra, r), _write_round(rb, r)
    try:
        d, own = tmp_path / "d", tmp_path / "d.node1"
        assert [(m["round"], m["by"]) for m in read_metrics(d)] == [(0, 0), (1, 0), (2, 0)]  # (before: 1 and 2 twice)
        assert [(m["round"], m["by"]) for m in read_metrics(own)] == [(1, 1), (2, 1)]
        peers = [json.loads(x)["by"] for x in (d / "peers.jsonl").read_text().splitlines()]
        assert peers == [0, 0, 0] and [json.loads(x)["by"] for x in (own / "peers.jsonl").read_text().splitlines()] == [1, 1]
        assert len((d / "peers.node1.jsonl").read_text().splitlines()) == 1  # (node 1's own line of round 0, as before)
        assert (own / "config.yaml").read_text() == (d / "config.yaml").read_text() and rb.run_dir == own
        assert not take(d) and not take(own)  # (each held by its writer, through another descriptor than this one's)
        lines = [m for m in caplog.messages if "is now the main" in m]
        assert len(lines) == 1 and lines[0].startswith("node 1 is now the main, but process ") and str(own) in lines[0]
    finally:
        release(tmp_path / "d"), release(tmp_path / "d.node1")


def test_a_new_main_takes_the_run_folder_once_the_main_before_it_let_go(tmp_path):
    """A swarm of 3 or more: the main expelled by a majority exits and its lock goes with it; the node that became
    the main then takes the run folder and goes on in it, as before (no folder of its own)."""
    from types import SimpleNamespace

    from dgrpo.metrics.logger import read_metrics
    from dgrpo.training.run_dir import release, take

    stub = SimpleNamespace(rank=1, local_nodes=[1], is_main=False)
    main, other = _run_of(SimpleNamespace(rank=0, local_nodes=[0], is_main=True), tmp_path / "d", True), \
        _run_of(stub, tmp_path / "d", False)
    _write_round(main, 0), _write_round(other, 0)
    release(tmp_path / "d")  # (the expelled main exited)
    stub.is_main = True
    _write_round(other, 1)
    try:
        assert [(m["round"], m["by"]) for m in read_metrics(tmp_path / "d")] == [(0, 0), (1, 1)]
        assert other.run_dir == main.run_dir and not (tmp_path / "d.node1").exists() and not take(tmp_path / "d")
    finally:
        release(tmp_path / "d")


def test_a_new_main_does_not_append_to_a_run_folder_whose_main_finished_the_run(tmp_path, caplog):
    """A split swarm of 2 whose faster half (node 0) ran every round and exited before node 1 became the main: the
    lock is free, but the folder holds a finished run. Before, node 1 took it and appended its rounds there (a loaded
    slow set: d's metrics read rounds 0, 1, 2, 0, 1, 2); now it writes them in d.node1, saying why in one line."""
    from types import SimpleNamespace

    from dgrpo.metrics.logger import read_metrics
    from dgrpo.training.run_dir import release, take

    stub = SimpleNamespace(rank=1, local_nodes=[1], is_main=False)
    main, other = _run_of(SimpleNamespace(rank=0, local_nodes=[0], is_main=True), tmp_path / "d", True), \
        _run_of(stub, tmp_path / "d", False)
    last = main.cfg.rounds
    for r in range(last + 1):  # (the whole run, its final record at round cfg.rounds)
        _write_round(main, r)
    release(tmp_path / "d")  # (node 0 finished and exited)
    stub.is_main = True
    _write_round(other, 0)
    try:
        assert [m["round"] for m in read_metrics(tmp_path / "d")] == list(range(last + 1))  # (node 0's run, untouched)
        assert [(m["round"], m["by"]) for m in read_metrics(tmp_path / "d.node1")] == [(0, 1)]
        assert other.run_dir == tmp_path / "d.node1" and take(tmp_path / "d")  # (d left free: nobody writes it)
        lines = [m for m in caplog.messages if "is now the main" in m]
        assert len(lines) == 1 and "its main finished the run in" in lines[0], lines
    finally:
        release(tmp_path / "d"), release(tmp_path / "d.node1")


@pytest.mark.slow
def test_two_ranks_the_honest_one_accused_by_its_peer_finishes_and_names_it(tmp_path, tiny_model_dir):
    """2 ranks on loopback (continue): rank 1 accuses node 0 of missing r0 (signed, alone; ``accuse:1:0``). Before,
    node 0 left the swarm, "declared failed by its peers", exit code 3, and node 1 was named nowhere. Now node 0 takes
    node 1 for the failed peer, names it (``accusation`` in peers.jsonl) and finishes every round, exit code 0; node 1,
    the main of its own half too, writes its rounds in d.node1, never in node 0's d (issue 31)."""
    import json

    from distributed_helpers import RELATIVE, launch
    from test_distributed import B2, COMMON

    from dgrpo.metrics.logger import read_metrics

    args = ["run", RELATIVE, f"model.name={tiny_model_dir}", "swarm.nodes=2", *COMMON, B2, "rounds=2", "eval.every=10",
            "swarm.timeout_s=5", "swarm.startup_timeout_s=10", "swarm.on_peer_failure=continue", f"out_dir={tmp_path}",
            "name=d", "swarm.transport=distributed"]
    results = launch(2, args, scenario="accuse:1:0", timeout=120, log_dir=str(tmp_path))
    assert results[0].returncode == 0, results[0].output[-3000:]
    assert "declared failed" not in results[0].output
    assert "node 1 accused node 0 of missing exchange 'r0' alone in a swarm of 2" in results[0].output
    peers = [json.loads(line) for line in (tmp_path / "d" / "peers.jsonl").read_text().splitlines()]
    assert sum(p["peers"].get("1", {}).get("transport", {}).get("accusation", 0) for p in peers) == 1, peers
    assert all(p["peers"].get("0", {}).get("transport", {}) == {} for p in peers)  # (node 0 named for nothing)
    assert [r["round"] for r in read_metrics(tmp_path / "d")] == [0, 1, 2]  # (node 0's alone: issue 31)
    # node 1 expelled node 0 (its lone accusation, quorum of one) and is the main too: whatever rounds it wrote went to
    # its own folder (d's metrics above hold node 0's three rounds, once each). How far node 1 gets before the launch
    # ends with node 0's exit depends on the machine's load (a loaded slow set saw it stop before its first write).
    if "node 1 is now the main, but process " in results[1].output:
        assert [r["round"] for r in read_metrics(tmp_path / "d.node1")][:1] == [0]
        assert (tmp_path / "d.node1" / "config.yaml").read_text() == (tmp_path / "d" / "config.yaml").read_text()
