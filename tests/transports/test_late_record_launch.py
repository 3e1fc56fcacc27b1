"""Review r31o H7: in a heterogeneous swarm over torch.distributed, rank 3 withholds its relay ``eq{n}`` from honest
node 2 every round (a tolerated attack: docs/distributed.md). Node 2 waits for it to its relay post + E, so it posts
its round record ``rec{n}`` seconds after the main entered ``rec{n}``; the main read records for record_s = W / 2 only
and dropped it: every round's metrics lacked node 2 (``train/*/node2``, ``eval/accuracy/node2``, the pooled eval over
3 nodes, ``swarm/invalid`` short) and peers.jsonl named honest node 2 ``missing record``; with nodes 1 and 2 both
victims the pooled evaluation was the main's alone. Training was untouched.
Now the main holds the round and reads the record again at its next record (or at the end): the metrics equal a
clean in-process run's (every key but time/*) and nobody is named for a record. Two victims are held together to their
round's end, so their records of the last round and the final one came after the main's old fixed budget (record_s + E
from its entry: both missing in rounds 2-3, a strict xfail); the main now posts its ``done`` first and reads them until
they come or their sender's ``done`` is served (transports/recordreads.py, last_records)."""

import json

import pytest
from distributed_helpers import comparable, launch

from dgrpo.cli import main
from dgrpo.metrics.logger import read_metrics


@pytest.mark.slow
@pytest.mark.parametrize("victims", [[2], [1, 2]], ids=["one victim", "two victims"])
def test_four_ranks_a_relay_withheld_from_a_reporter_every_round_leaves_the_metrics_whole(
        tmp_path, tiny_model_dir, tiny_model_dir_b, victims):
    models = (f"swarm.models=[{{name: {tiny_model_dir}}}, {{name: {tiny_model_dir_b}}}, {{name: {tiny_model_dir}}}, "
              f"{{name: {tiny_model_dir_b}}}]")
    common = ["run", models, "swarm.nodes=4", "swarm.prompts_per_round=2", "rounds=3",
              "threads=1", "swarm.group_size=4", "sampling.max_new_tokens=24", "eval.every=1", "eval.n_prompts=2",
              "task.n_train=20", "task.n_val=5", "task.few_shot=0", "grpo.lr=0.01", "swarm.unsafe_key_exchange=true",
              "swarm.timeout_s=10", "swarm.on_peer_failure=continue"]
    assert main([*common, f"out_dir={tmp_path / 'clean'}", "name=c"]) == 0  # (the attacker sends nothing)
    want = comparable(read_metrics(tmp_path / "clean" / "c"))
    results = launch(4, [*common, f"out_dir={tmp_path}", "name=d", "swarm.transport=distributed"],
                     scenario=",".join(f"withhold:3:{v}" for v in victims), timeout=300, log_dir=str(tmp_path))
    assert [r.returncode for r in results] == [0, 0, 0, 0], results[0].output[-3000:]
    for v in victims:  # (each victim held in every round's relay exchange)
        assert f"rank withholding ^eq\\d+/data/ from reader {v}" in results[3].output
        assert all(f"node 3 sent nothing for exchange 'eq{r}'" in results[v].output for r in range(3))
    got = comparable(read_metrics(tmp_path / "d"))
    assert [r["round"] for r in got] == [0, 1, 2, 3]
    for v in victims:
        assert all(f"train/loss/node{v}" in r for r in got[:3]) and all(f"eval/accuracy/node{v}" in r for r in got)
    assert got == want
    lines = [json.loads(line) for line in (tmp_path / "d" / "peers.jsonl").read_text().splitlines()]
    assert [line["records"] for line in lines if "records" in line] == []  # (before: each victim `missing record`)
    assert "left out of the metrics" not in results[0].output
