"""Review r31o H5 over torch.distributed: 4 ranks on loopback, tiny model, swarm.timeout_s=5 under
on_peer_failure=continue; from round 1 rank 3 serves its round payloads and relays so that they never come whole
(unserved_scenarios.py). Before: named `transport` every round, never accused, never expelled (`swarm/nodes_alive`
never dropped): a rank contributing nothing kept its vote in every quorum. Now the honest readers accuse it (a quorum)
and it is expelled at r1; no honest node is accused; the metrics are those of a run where node 3 serves nothing from
round 1 on. (Unit tests without a launch: test_unserved_blame.py.)"""

import re

import pytest
from distributed_helpers import comparable
from test_round_deadlines import COMMON, POLL, T, _named, _run

from dgrpo.swarm.accounting import peer_strikes

ARGS = [*COMMON, "rounds=3", "eval.every=10"]


def _outcome(tmp_path, tiny_model_dir, scenario):
    args = [f"model.name={tiny_model_dir}", *ARGS]
    (tmp_path / "mute").mkdir()
    _, mute, _ = _run(tmp_path / "mute", args, "trickleall:3:eq0:mute")  # (node 3 serves nothing once it posted eq0)
    results, got, peers = _run(tmp_path, args, scenario)
    assert [r.returncode for r in results[:3]] == [0, 0, 0], [r.output[-2000:] for r in results]
    out = "".join(r.output for r in results[:3])
    assert "node 3 is out of the swarm from exchange 'r1': nodes [0, 1, 2] found it missing" in out, out[-3000:]
    assert "declared failed" not in out and all(f"node {n} is out of the swarm" not in out for n in (0, 1, 2))
    # (expelled in r1: round 1's count is 3 or 4 as the last accusation is read at r1's end or in eq1, in the mute
    # run as well; round 2 is without node 3)
    alive = [r.get("swarm/nodes_alive", 4) for r in got[:3]]
    assert alive[0] == 4 and alive[2] == 3, alive
    assert "transport" in str(peers[1]["peers"]["3"]), peers[1]
    # (no honest node struck or banned; none named, on the main rank's lines or in honest nodes' relayed views, but
    # `late` (the compute spread of a loaded machine), `accused` by node 3 alone (its lone word: it reads as an honest
    # node does and may find a node that waited W for its payload late into eq{n}) or `accusation` of node 3 alone
    # (one that had not counted the quorum of r1 yet accused it of eq1 too); no honest node accuses another)
    ok = {"late", "accused", "accusation"}
    assert all(set(_named(p, n)) <= ok and set(p["views"].get(v, {}).get(str(n), {})) <= ok
               for p in peers for v in ("1", "2") for n in (0, 1, 2)), peers
    assert all(p["banned"] == {} and peer_strikes(p["peers"][str(n)]) == 0 for p in peers for n in (0, 1, 2))
    assert re.search(r"accusation: node [012] accused node [012]", out) is None, out[-3000:]
    assert [{k: v for k, v in r.items() if k != "swarm/nodes_alive"} for r in comparable(got)] == [
        {k: v for k, v in r.items() if k != "swarm/nodes_alive"} for r in comparable(mute)]
    assert max(r["time/exchange"] for r in got[:3]) <= T + POLL, [r["time/exchange"] for r in got]
    return out


@pytest.mark.slow
def test_a_rank_serving_oversized_round_payloads_is_accused_and_expelled(tmp_path, tiny_model_dir):
    """From r1 rank 3 serves r{n}/data/3 and eq{n}/data/3 as 8 MiB of zeros, its own Content-Length over the cap."""
    out = _outcome(tmp_path, tiny_model_dir, "oversize:3:1")
    assert "exchange 'r1': node 3's server oversize: served 8388608 bytes under r1/data/3" in out


@pytest.mark.slow
def test_a_rank_trickling_its_round_payloads_is_accused_and_expelled(tmp_path, tiny_model_dir):
    """From r1 rank 3 streams r{n}/data/3 and eq{n}/data/3 a byte every 0.9 s (under the 1 s recv silence, past the
    old 2 s read budget): read until its deadline, never whole."""
    out = _outcome(tmp_path, tiny_model_dir, "trickle:3:1")
    assert "exchange 'r1': node 3's server slow: r1/data/3 not served within" in out
