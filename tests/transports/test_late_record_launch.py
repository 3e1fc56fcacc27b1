"""Review r31o H7: in a heterogeneous swarm over torch.distributed, rank 3 withholds its relay ``eq{n}`` from honest
node 2 every round (a tolerated attack: docs/distributed.md). Node 2 waits for it to its relay post + E, so it posts
its round record ``rec{n}`` seconds after the main entered ``rec{n}``; the main read records for record_s = W / 2 only
and dropped it: every round's metrics lacked node 2 (``train/*/node2``, ``eval/accuracy/node2``, the pooled eval over
3 nodes, ``swarm/invalid`` short) and peers.jsonl named honest node 2 ``missing record``. Training was untouched.
Now the main holds the round and reads the record again at its next record (or at the end): the metrics equal a
clean in-process run's (every key but time/*) and nobody is named for a record."""

import json

import pytest
from distributed_helpers import comparable, launch

from dgrpo.cli import main
from dgrpo.metrics.logger import read_metrics


@pytest.mark.slow
def test_four_ranks_a_relay_withheld_from_a_reporter_every_round_leaves_the_metrics_whole(
        tmp_path, tiny_model_dir, tiny_model_dir_b):
    models = (f"swarm.models=[{{name: {tiny_model_dir}}}, {{name: {tiny_model_dir_b}}}, {{name: {tiny_model_dir}}}, "
              f"{{name: {tiny_model_dir_b}}}]")
    common = ["run", models, "swarm.nodes=4", "swarm.prompts_per_round=2", "rounds=3",
              "threads=1", "swarm.group_size=4", "sampling.max_new_tokens=24", "eval.every=1", "eval.n_prompts=2",
              "task.n_train=20", "task.n_val=5", "task.few_shot=0", "grpo.lr=0.01", "swarm.unsafe_key_exchange=true",
              "swarm.timeout_s=10", "swarm.on_peer_failure=continue"]
    assert main([*common, f"out_dir={tmp_path / 'clean'}", "name=c"]) == 0  # (the attacker sends nothing)
    want = comparable(read_metrics(tmp_path / "clean" / "c"))
    results = launch(4, [*common, f"out_dir={tmp_path}", "name=d", "swarm.transport=distributed"],
                     scenario="withhold:3:2", timeout=300, log_dir=str(tmp_path))
    assert [r.returncode for r in results] == [0, 0, 0, 0], results[0].output[-3000:]
    assert "rank withholding ^eq\\d+/data/ from reader 2" in results[3].output
    assert all(f"node 3 sent nothing for exchange 'eq{r}'" in results[2].output for r in range(3))  # (node 2 held)
    got = comparable(read_metrics(tmp_path / "d"))
    assert [r["round"] for r in got] == [0, 1, 2, 3]
    assert all("train/loss/node2" in r for r in got[:3]) and all("eval/accuracy/node2" in r for r in got)
    assert got == want
    lines = [json.loads(line) for line in (tmp_path / "d" / "peers.jsonl").read_text().splitlines()]
    assert [line["records"] for line in lines if "records" in line] == []  # (before: node 2 `missing record`)
    assert "left out of the metrics" not in results[0].output
