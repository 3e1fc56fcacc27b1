"""The two-victim hold in a swarm of 3 (issue 31, task h31t2; review r31q Q3's attack with no on-time node). Rank 2
serves a false wait note in every ``r{n}`` naming nodes 0 and 1 and never serves them its relay ``eq{n}``: both
victims are held in ``eq{n}`` and post ``r{n+1}`` late, at moments the withholder chooses. The only other live peer
that could say "still in ``r{n+1}``" is the attacker itself, so the first victim out, past ``Schedule.safe``, must not
cut the second: a round payload that reached no other honest node would be trained on by its signer alone
(``merge_views`` counts a node's own view whole), the honest message sets split (docs/distributed.md "Nodes held
together are waited for together")."""

import re

import pytest
from distributed_helpers import launch
from peer_scenarios import views
from test_round_deadlines import COMMON

THREE = [a for a in COMMON if not a.startswith(("swarm.nodes=", "swarm.group_size="))] + ["swarm.nodes=3",
                                                                                      "swarm.group_size=3"]


def _run(tmp_path, tiny_model_dir, scenario, rounds):
    return launch(3, ["run", f"model.name={tiny_model_dir}", *THREE, f"rounds={rounds}", "eval.every=10",
                      "eval.first=false", f"out_dir={tmp_path}", "name=d", "swarm.transport=distributed"],
                  scenario=scenario, timeout=150, log_dir=str(tmp_path))


def _scenario(rounds: int, release_s: float | None) -> str:
    """The two-victim hold, every round. ``release_s`` None: rank 2's relays never reach nodes 0 and 1 (the quorum of
    the two victims expels it at ``eq0``). Else the r31m F2 variant for 3: node 0 gets rank 2's relay ``release_s``
    after it first asks (inside its extension, so node 0 never accuses it; node 1, held with node 0, leaves ``eq{n}`` a
    poll after it), and in ``r{n+1}`` rank 2 says at once it left (``end/r{n+1}``), accuses node 1 and never reads
    node 1's round payload (so no relay carries node 1's messages to node 0)."""
    out = [*(f"fnote:2:r{r}:0.1" for r in range(rounds)), "withhold:2:1"]
    if release_s is None:
        return ",".join(out + ["withhold:2:0"])
    return ",".join(out + [f"delay:2:0:^eq\\d+/data/:{release_s}", "skipread:2:1:1",
                           *(f"endacc:2:r{r}:1" for r in range(1, rounds))])


@pytest.mark.slow
@pytest.mark.parametrize("release_s", [None, 3.8], ids=["withheld", "released"])
def test_the_two_victim_hold_in_a_swarm_of_three_leaves_both_honest_ranks_the_same_message_set(
        tmp_path, tiny_model_dir, release_s):
    rounds = 4
    results = _run(tmp_path, tiny_model_dir, _scenario(rounds, release_s), rounds)
    assert [r.returncode for r in results[:2]] == [0, 0], [r.output[-2000:] for r in results]
    out = "".join(r.output for r in results[:2])
    assert not re.search(r"node [01] is out of the swarm", out), out[-3000:]  # (no honest node expelled)
    assert not re.search(r"node [01] accused node [01]", out), re.findall(r"node [01] accused node [01].*", out)
    sets = views(tmp_path, range(2))
    assert [len(s) for s in sets] == [rounds] * 2
    for r in range(rounds):  # (each honest rank's message set of round r, as it trained on it)
        assert sets[0][r] == sets[1][r], (r, [sorted({m[0] for m in s[r]}) for s in sets])
