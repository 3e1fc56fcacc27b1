"""Review r31i F3 over torch.distributed: a copy is named under the node that forwarded it, never under its signer
delivering its own message, even when the forwarder is a low rank whose payload every peer reads first."""

import json

from test_flood import COMMON


def test_four_ranks_a_low_rank_forwarding_its_peers_messages_first_is_named_not_the_signers(tmp_path, tiny_model_dir):
    """Rank 1 serves, before its own frame, a verbatim copy of each of its peers' 6 signed messages of the round
    (``forward:1``). Its peers read rank 1's payload before ranks 2's and 3's, so its copies of their messages came
    first. Before, those were read and the honest signers' own deliveries named ``copy`` in peers.jsonl every round
    (nodes 2 and 3: 2 each; node 1: 2); now node 1 is named for all 6, nodes 0, 2, 3 never, nobody is struck, and
    every key of metrics.jsonl but time/* equals the in-process run without the forwarding."""
    from distributed_helpers import comparable, launch

    from dgrpo.cli import main
    from dgrpo.metrics.logger import read_metrics

    args = [f"model.name={tiny_model_dir}", *COMMON]
    assert main(["run", *args, f"out_dir={tmp_path}", "name=in"]) == 0
    results = launch(4, ["run", *args, f"out_dir={tmp_path}", "name=d", "swarm.transport=distributed"],
                     scenario="forward:1", timeout=150, log_dir=str(tmp_path))
    assert [r.returncode for r in results] == [0, 0, 0, 0], results[0].output[-3000:]
    assert comparable(read_metrics(tmp_path / "d")) == comparable(read_metrics(tmp_path / "in"))
    peers = [json.loads(line) for line in (tmp_path / "d" / "peers.jsonl").read_text().splitlines()]
    assert len(peers) == 2
    for p in peers:
        assert {n: p["peers"][n]["transport"] for n in "0123"} == {"0": {}, "1": {"copy": 6}, "2": {}, "3": {}}, p
        assert p["banned"] == {} and all(p["peers"][n]["rejected"] == {} for n in "012"), p
