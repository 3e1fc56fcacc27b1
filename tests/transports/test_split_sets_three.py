"""The two-victim hold in a swarm of 3 (issue 31, task h31t2; review r31q Q3's attack with no on-time node). Rank 2
serves a false wait note in every ``r{n}`` naming nodes 0 and 1 and never serves them its relay ``eq{n}``: both
victims are held in ``eq{n}`` and post ``r{n+1}`` late, at moments the withholder chooses. The only other live peer
that could say "still in ``r{n+1}``" is the attacker itself, so the first victim out, past ``Schedule.safe``, must not
cut the second: a round payload that reached no other honest node would be trained on by its signer alone
(``merge_views`` counts a node's own view whole), the honest message sets split. On the code before, the
``released`` variant split round 1 in 3 of 3 runs (node 0 {0, 2}, node 1 {0, 1, 2}). Now a fellow is waited for past
``Schedule.safe`` as long as this node can afford (``witnesses.fellow_hold``; docs/distributed.md "In a swarm of 3 a
fellow is waited for as long as this node can afford")."""

import re

import pytest
from distributed_helpers import RELATIVE, launch
from peer_scenarios import views
from test_round_deadlines import COMMON, POLL, T

from dgrpo.metrics.logger import read_metrics

THREE = [a for a in COMMON if not a.startswith(("swarm.nodes=", "swarm.group_size="))] + ["swarm.nodes=3",
                                                                                      "swarm.group_size=3"]


def _run(tmp_path, tiny_model_dir, scenario, rounds):
    return launch(3, ["run", RELATIVE, f"model.name={tiny_model_dir}", *THREE, f"rounds={rounds}", "eval.every=10",
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


@pytest.mark.slow
def test_a_rank_posing_as_a_fellow_in_a_swarm_of_three_gets_no_honest_node_expelled(tmp_path, tiny_model_dir):
    """The other side of the rule (witnesses.fellow_hold): one node cannot tell the victim held with it from a rank
    posing as one. Rank 2 never serves ``end/eq1`` or ``end/eq3`` and serves its r1 and r3 to node 1 3 s late behind
    its notes (node 1 relays late: node 0 waits for that relay past its relay post + E, rank 2 "still in" eq1 with it:
    node 0's fellow); its r2 and r4 it serves to node 1 on time and never to node 0, and it accuses node 0 of eq2 and
    eq4. Past its safe point in r2, node 0 now waits for its "fellow" though node 1 left r2 (its r2 post + W at most),
    so its relay eq2 comes later: node 1 (which read node 0's r2, and its note) must still take it, or node 1 and rank
    2 expel node 0. Rank 2's r2 reaches node 0 in node 1's relay; every round within timeout_s + a poll."""
    rounds = 5
    scenario = ("sticky:2:0,delay:2:1:^r(1|3)/data/:3.0,noend:2:eq(1|3),withhold:2:0:^r(2|4)/data/,"
                "accat:2:eq2:0,accat:2:eq4:0")
    results = _run(tmp_path, tiny_model_dir, scenario, rounds)
    assert [r.returncode for r in results[:2]] == [0, 0], [r.output[-2000:] for r in results]
    out = "".join(r.output for r in results[:2])
    assert not re.search(r"node [01] is out of the swarm|declared failed", out), out[-3000:]
    assert not re.search(r"node 1 accused node 0", out), re.findall(r"node 1 accused node 0.*", out)
    sets = views(tmp_path, range(2))
    assert [len(s) for s in sets] == [rounds] * 2
    for r in range(rounds):
        assert sets[0][r] == sets[1][r], (r, [sorted({m[0] for m in s[r]}) for s in sets])
    got = read_metrics(tmp_path / "d")
    assert max(r["time/exchange"] for r in got[:rounds]) <= T + POLL, [r["time/exchange"] for r in got]
