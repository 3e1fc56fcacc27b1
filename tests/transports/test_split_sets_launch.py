"""Review r31q Q3 (HIGH): the two-victim hold split the honest message sets. Rank 3 serves a false wait note
in every ``r{n}`` naming nodes 0 and 1 and never serves them its relay ``eq{n}`` (r31l F2's attack): nobody is
expelled (test_round_deadlines), but the two victims, held to their round's end, posted ``r{n+1}`` ~S after node 2 cut
them at W + E, the first victim out (past ``Schedule.safe``, nobody else left in ``r{n+1}``) cut the second, and the
second trained on its own round payload alone (``merge_views`` counts a node's own view whole): node 0 {0, 1, 2, 3},
node 1 {1, 2, 3}, node 2 {2, 3} in round 1, in about 2 of 3 runs. Now node 2, seeing both still in ``eq{n}`` at its
window, waits for them to ``Schedule.held_bound`` and, still in ``r{n+1}``, is the witness that keeps each victim
waiting for the other: every honest rank holds every honest round payload (docs/distributed.md "Nodes held together
are waited for together")."""

import pytest
from distributed_helpers import RELATIVE, launch
from peer_scenarios import views
from test_round_deadlines import COMMON


@pytest.mark.slow
def test_the_two_victim_hold_leaves_every_honest_rank_the_same_message_set(tmp_path, tiny_model_dir):
    rounds = 4
    scenario = ",".join([*(f"fnote:3:r{r}:0.1" for r in range(rounds)), "withhold:3:0", "withhold:3:1"])
    results = launch(4, ["run", RELATIVE, f"model.name={tiny_model_dir}", *COMMON, f"rounds={rounds}", "eval.every=10",
                         "eval.first=false", f"out_dir={tmp_path}", "name=d", "swarm.transport=distributed"],
                     scenario=scenario, timeout=150, log_dir=str(tmp_path))
    assert [r.returncode for r in results] == [0, 0, 0, 0], [r.output[-2000:] for r in results]
    assert "is out of the swarm" not in "".join(r.output for r in results)  # (nobody expelled, as before)
    sets = views(tmp_path, range(3))
    assert [len(s) for s in sets] == [rounds] * 3
    for r in range(rounds):  # (each honest rank's message set of round r, as it trained on it)
        assert sets[0][r] == sets[1][r] == sets[2][r], (r, [sorted({m[0] for m in s[r]}) for s in sets])
