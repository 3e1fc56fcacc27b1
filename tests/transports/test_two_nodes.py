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


@pytest.mark.slow
def test_two_ranks_the_honest_one_accused_by_its_peer_finishes_and_names_it(tmp_path, tiny_model_dir):
    """2 ranks on loopback (continue): rank 1 accuses node 0 of missing r0 (signed, alone; ``accuse:1:0``). Before,
    node 0 left the swarm, "declared failed by its peers", exit code 3, and node 1 was named nowhere. Now node 0 takes
    node 1 for the failed peer, names it (``accusation`` in peers.jsonl) and finishes every round, exit code 0."""
    import json

    from distributed_helpers import launch
    from test_distributed import B2, COMMON

    from dgrpo.metrics.logger import read_metrics

    args = ["run", f"model.name={tiny_model_dir}", "swarm.nodes=2", *COMMON, B2, "rounds=2", "eval.every=10",
            "swarm.timeout_s=5", "swarm.startup_timeout_s=10", "swarm.on_peer_failure=continue", f"out_dir={tmp_path}",
            "name=d", "swarm.transport=distributed"]
    results = launch(2, args, scenario="accuse:1:0", timeout=120, log_dir=str(tmp_path))
    assert results[0].returncode == 0, results[0].output[-3000:]
    assert "declared failed" not in results[0].output
    assert "node 1 accused node 0 of missing exchange 'r0' alone in a swarm of 2" in results[0].output
    peers = [json.loads(line) for line in (tmp_path / "d" / "peers.jsonl").read_text().splitlines()]
    assert sum(p["peers"].get("1", {}).get("transport", {}).get("accusation", 0) for p in peers) == 1, peers
    assert all(p["peers"].get("0", {}).get("transport", {}) == {} for p in peers)  # (node 0 named for nothing)
    assert [r["round"] for r in read_metrics(tmp_path / "d")] == [0, 1, 2]
