"""A peer's own signed departure shown to one node only is relayed to every node, so the honest nodes keep one live
roster (review r31n G5, G6; transports/departures.py). 4 ranks on loopback, rank 3 attacks (slow set)."""

import pytest
from test_store_attacks import ARGS, run

from dgrpo.metrics.logger import read_metrics


@pytest.mark.slow
@pytest.mark.parametrize("scenario, said", [("selleave:3:0:r1", "it left the swarm (its signed leave mark)"),
                                            ("selstop:3:0:r1", "it stopped at start-up")])
def test_a_departure_shown_to_one_node_takes_its_signer_out_at_every_node_alike(tmp_path, tiny_model_dir, scenario,
                                                                               said):
    """Rank 3 serves its own signed leave mark of r1 (or pushes its signed stop notice as it posts r1) to node 0 only
    and hides r1 from it. Before, node 0 alone took it out ('left the swarm'), nodes 1-2 kept it: live rosters of 3 and
    4, and a rank that then withheld its payloads from everyone was never expelled (review r31n G6, 3 of 3 runs). Now
    node 0 relays the signed departure in eq1 and nodes 1-2 take rank 3 out in the same round: no honest rank exits,
    every honest node counts 3 live nodes from round 1's relay on, and no honest node is taken out."""
    results, run_dir = run(tmp_path, [f"model.name={tiny_model_dir}", *ARGS, "rounds=3"], scenario)
    assert [r.returncode for r in results[:3]] == [0, 0, 0], [r.output[-2000:] for r in results[:3]]
    for k in (1, 2):
        assert f"node 3 is out of the swarm from exchange 'eq1': {said}" in results[k].output, results[k].output[-3000:]
        assert "as node 0's relay carries it" in results[k].output
    assert "node 3 is out of the swarm from exchange 'r1'" in results[0].output
    records = read_metrics(run_dir)
    assert [r.get("swarm/nodes_alive") for r in records][:3] == [None, 3, 3], records
    assert [r.get("swarm/messages") for r in records][:3] == [8, 8, 6], records  # (r1: rank 3's, through the relays)
    out = "".join(r.output for r in results[:3])
    assert not any(f"node {k} is out of the swarm" in out or f"node {k} was declared failed" in out for k in (0, 1, 2))


def test_a_relayed_departure_counts_only_signed_by_the_node_itself_for_this_launch():
    """No launch (transports/departures.py): node 1's own leave mark of r1 takes it out; the same mark signed by node
    3's key, for another exchange than it names, or of an earlier launch of the run, and malformed relays, count for
    nothing, so relaying can take out only a node that said it stopped."""
    import json

    from signed_ranks import _ranks

    from dgrpo.transports import departures

    old, keys = _ranks(n=4)
    stale = old[1].signed_store.sign("left|r1|1")  # (an earlier launch of the same run and roster)
    ts, _ = _ranks(n=4, keys=keys)
    own, forged = ts[1].signed_store.sign("left|r1|1"), ts[3].signed_store.sign("left|r1|1")
    assert departures.valid(ts[2], 1, {"tag": "r1", "left": own}) == "it left the swarm (its signed leave mark)"
    for ev in ({"tag": "r1", "left": forged}, {"tag": "r2", "left": own}, {"tag": "r1", "left": stale}):
        assert departures.valid(ts[2], 1, ev) is None
    relay = json.dumps({"departed": {"1": {"tag": "r1", "left": own}, "x": {}, "2": {"tag": "r1; rm", "left": own},
                                     "3": {"stop": "y" * 5000}}}).encode()
    assert departures.parse(relay, 4) == {1: {"tag": "r1", "left": own}}
    assert departures.parse(b"junk", 4) == {} and departures.parse(b'{"departed": [1]}', 4) == {}
    departures.act(ts[2], "eq1", {0: relay})
    assert ts[2].alive == {0, 2, 3} and ts[2].failed == {1: "eq1"}
    departures.act(ts[0], "eq1", {2: json.dumps({"departed": {"1": {"tag": "r1", "left": forged}}}).encode()})
    assert ts[0].alive == {0, 1, 2, 3}
