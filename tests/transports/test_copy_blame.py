"""Review r31i F3 over torch.distributed: a copy is named under the node that forwarded it, never under its signer
delivering its own message, even when the forwarder is a low rank whose payload every peer reads first."""

import json

import pytest
from test_flood import COMMON


@pytest.mark.slow
def test_four_ranks_a_low_rank_forwarding_its_peers_messages_first_is_named_not_the_signers(tmp_path, tiny_model_dir):
    """Rank 1 serves, before its own frame, a verbatim copy of each of its peers' 6 signed messages of the round
    (``forward:1``). Its peers read rank 1's payload before ranks 2's and 3's, so its copies of their messages came
    first. Before, those were read and the honest signers' own deliveries named ``copy`` in peers.jsonl every round
    (nodes 2 and 3: 2 each; node 1: 2); now node 1 is named for all 6, nodes 0, 2, 3 never, nobody is struck, and
    every key of metrics.jsonl but time/* equals the in-process run without the forwarding."""
    from distributed_helpers import RELATIVE, comparable, launch

    from dgrpo.cli import main
    from dgrpo.metrics.logger import read_metrics

    args = [f"model.name={tiny_model_dir}", *COMMON]
    assert main(["run", *args, f"out_dir={tmp_path}", "name=in"]) == 0
    results = launch(4, ["run", RELATIVE, *args, f"out_dir={tmp_path}", "name=d", "swarm.transport=distributed"],
                     scenario="forward:1", timeout=150, log_dir=str(tmp_path))
    assert [r.returncode for r in results] == [0, 0, 0, 0], results[0].output[-3000:]
    assert comparable(read_metrics(tmp_path / "d")) == comparable(read_metrics(tmp_path / "in"))
    peers = [json.loads(line) for line in (tmp_path / "d" / "peers.jsonl").read_text().splitlines()]
    assert len(peers) == 2
    for p in peers:
        assert {n: p["peers"][n]["transport"] for n in "0123"} == {"0": {}, "1": {"copy": 6}, "2": {}, "3": {}}, p
        assert p["banned"] == {} and all(p["peers"][n]["rejected"] == {} for n in "012"), p


@pytest.mark.slow
def test_four_ranks_a_forwarder_at_rank_0_is_named_in_every_honest_ranks_own_peers_file(tmp_path, tiny_model_dir):
    """Review r31j F5: rank 0, declared honest, is the main rank, which alone wrote peers.jsonl (and metrics.jsonl):
    forwarding its peers' messages first (``forward:0``), it named nobody there, and ranks 1-3, each in its own
    out_dir as on its own machine, wrote no per-peer record at all. Now every rank reporting an honest node writes
    its own ``peers.node{k}.jsonl`` in its own run directory: honest ranks 1 and 2 name node 0 ``copy: 6`` in both
    rounds and nobody else; rank 3 (declared malicious) reports no honest node and writes none."""
    from distributed_helpers import RELATIVE, launch

    args = [f"model.name={tiny_model_dir}", *COMMON]
    dirs = {k: tmp_path / f"n{k}" for k in (1, 2, 3)}
    results = launch(4, ["run", RELATIVE, *args, f"out_dir={tmp_path / 'n0'}", "name=d", "swarm.transport=distributed"],
                     scenario=",".join(["forward:0", *(f"outdir:{k}:{d}" for k, d in dirs.items())]), timeout=150,
                     log_dir=str(tmp_path))
    assert [r.returncode for r in results] == [0, 0, 0, 0], results[1].output[-3000:]
    main = [json.loads(line) for line in (tmp_path / "n0" / "d" / "peers.jsonl").read_text().splitlines()]
    assert [{n: p["peers"][n]["transport"] for n in "0123"} for p in main] == [{n: {} for n in "0123"}] * 2  # (F5)
    for k in (1, 2):
        assert sorted(p.name for p in (dirs[k] / "d").glob("peers*")) == [f"peers.node{k}.jsonl"]
        own = [json.loads(line) for line in (dirs[k] / "d" / f"peers.node{k}.jsonl").read_text().splitlines()]
        assert [p["round"] for p in own] == [0, 1]
        for p in own:
            assert {n: p["peers"][n]["transport"] for n in "0123"} == {"0": {"copy": 6}, "1": {}, "2": {}, "3": {}}, p
            assert p["banned"] == {} and all(p["peers"][n]["rejected"] == {} for n in "012"), p
    assert not list((dirs[3] / "d").glob("peers*"))
