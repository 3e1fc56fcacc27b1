"""Review r31t T1's adaptive form s4n2ev2 (task h31u1; open) in a 4-rank launch: rank 3 serves false wait notes naming
node 2 in ``r2``, ``eq2``, ``r3``, ``eq3``, serves its relay ``eq2`` to nodes 0 and 1 only 4.0 s after its post (late,
not withheld: the victims leave ``eq2`` then and post ``r3`` about 4 s after node 2), never serves its ``r3`` to node 2
and serves it to nodes 0 and 1 7.6 s after its post. The victims take it inside their own window (``W + E`` from their
late post) just after node 2 left ``eq3`` and relay it to nobody who still reads: node 2 trains round 3 on 6 messages,
the victims on 8 (3 of 3 runs of this test on main at load 5-7). An expected failure, not strict: whether node 2's round
end covers the victims' relays is a matter of jitter in the attack's neighbours, and no rule closes it yet
(docs/distributed.md, "Held victims do not carry what the on-time nodes cut", *Limits (open)*). This is the relative
schedule (``swarm.protocol.schedule=relative``, pinned by ``split_launch``); on the clocked schedule, the default since
task h31d, the same scenario leaves one set (``test_clocked_launch.py``)."""

import pytest
from split_launch import assert_one_set_each_round


@pytest.mark.slow
@pytest.mark.xfail(reason="open on the relative schedule (pinned by split_launch): s4n2ev2, a withholder's late round "
                          "payload taken by victims released late (r31t T1)", strict=False)
def test_a_withholder_s_payload_read_late_by_its_victims_is_kept_or_dropped_alike(tmp_path, tiny_model_dir):
    rounds = 4
    scenario = ",".join([*(f"fnote:3:{t}:2" for t in ("r2", "eq2", "r3", "eq3")), "serveat:3:0.1:^eq2/data/:4.0:2",
                         "withhold:3:2:^r3/data/", "serveat:3:0.1:^r3/data/:7.6:3"])
    assert_one_set_each_round(tmp_path, tiny_model_dir, scenario, rounds)
