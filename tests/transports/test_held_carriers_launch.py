"""Review r31t T1 (HIGH) in a 4-rank launch: rank 3 serves false wait notes naming node 2 in ``r2``, ``eq2``, ``r3``,
``eq3``, never serves its relay ``eq2`` to nodes 0 and 1 (held together there to their round's end, r31q Q3's
two-victim hold), never serves its ``r3`` to node 2 and serves it to nodes 0 and 1 only 3.5 s after each first asked
for it: past node 2's stretched round end (about 7.4 s after its ``r3`` post). Before, each victim kept the other
waiting for it past ``Schedule.safe`` (``need`` = 1), took it and relayed it after node 2 had left ``eq3``: node 2
trained round 3 on {0, 1, 2}, the victims on {0, 1, 2, 3}. Now only non-fellows count as witnesses for a non-fellow
(``Witnesses.held(besides)``): the victims cut rank 3 once node 2 left ``r3`` and every honest rank trains on one set
(docs/distributed.md "Held victims do not carry what the on-time nodes cut")."""

import pytest
from split_launch import assert_one_set_each_round


@pytest.mark.slow
def test_held_victims_carry_no_payload_the_on_time_node_cut(tmp_path, tiny_model_dir):
    rounds = 4
    scenario = ",".join([*(f"fnote:3:{t}:2" for t in ("r2", "eq2", "r3", "eq3")), "withhold:3:0:^eq2/data/",
                         "withhold:3:1:^eq2/data/", "withhold:3:2:^r3/data/", "delay:3:0:^r3/data/:3.5",
                         "delay:3:1:^r3/data/:3.5"])
    assert_one_set_each_round(tmp_path, tiny_model_dir, scenario, rounds)
