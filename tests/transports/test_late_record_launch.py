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
from distributed_helpers import RELATIVE, comparable, launch

from dgrpo.cli import main
from dgrpo.metrics.logger import read_metrics


@pytest.mark.slow
@pytest.mark.parametrize("victims", [[2], [1, 2]], ids=["one victim", "two victims"])
def test_four_ranks_a_relay_withheld_from_a_reporter_every_round_leaves_the_metrics_whole(
        tmp_path, tiny_model_dir, tiny_model_dir_b, victims):
    models = (f"swarm.models=[{{name: {tiny_model_dir}}}, {{name: {tiny_model_dir_b}}}, {{name: {tiny_model_dir}}}, "
              f"{{name: {tiny_model_dir_b}}}]")
    common = ["run", RELATIVE, models, "swarm.nodes=4", "swarm.prompts_per_round=2", "rounds=3",
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


@pytest.mark.slow
def test_a_reporter_that_withholds_its_last_records_and_holds_the_main_in_the_last_relay_gets_no_honest_node_failed(
        tmp_path, tiny_model_dir):
    """Review r31q Q1: rank 3 (a reporter) never serves the main its records of the last round and the final
    evaluation, serves a signed wait note of the last round naming the main and its last relay to the main 2.4 s late
    (within the note's extension: nobody fails, even under abort). Before, the main spent record_s + E on the held record, then read the
    final records, and posted ``done`` 1.3-3 s after its peers stopped waiting: nodes 1 and 2 named it ``sent
    nothing for exchange 'done'``, a quorum declared it failed, and under abort they left with their final records
    unread (6 of 7 review runs; this test failed 1 of 2 on the code before). Now the main posts ``done`` before it
    reads the last records. timeout_s=10, the relay 3.8 s late (task h31k: timeout_s=5 and 2.4 s before). The main,
    its peers gone from ``eq3``, waits for a noted relay until its relay post + E (E = 2.5 s at timeout_s=5: the
    Witnesses cut, transports/waits.py), and the delay counts from its first read of ``eq3``, about that post: a 0.1 s
    margin, which polls under load overran (the main stopped, exit code 3, "node 3 sent nothing for exchange 'eq3'";
    reproduced beside 4 busy loops with timeout_s=10 and 4.8 s, E = 5 s). Now 1.2 s, and the old code's lateness
    (record_s + E + the hold, against the peers' timeout_s wait for ``done``: 0.75 + 2.5 + 2.4 = 5.65 s against 5 s
    before) is as far past it: 1.75 + 5 + 3.8 = 10.55 s against 10 s."""
    models = f"swarm.models=[{', '.join([f'{{name: {tiny_model_dir}}}'] * 4)}]"  # (heterogeneous: every node reports)
    args = ["run", RELATIVE, models, "swarm.nodes=4", "swarm.prompts_per_round=2", "rounds=4", "threads=1",
            "swarm.group_size=4", "sampling.max_new_tokens=24", "eval.every=10", "eval.n_prompts=2", "task.n_train=20",
            "task.n_val=5", "task.few_shot=0", "grpo.lr=0.01", "swarm.unsafe_key_exchange=true", "swarm.timeout_s=10",
            "swarm.on_peer_failure=abort", f"out_dir={tmp_path}", "name=d", "swarm.transport=distributed"]
    results = launch(4, args, scenario="withhold:3:0:^rec[34]/,fnote:3:r3:0,delay:3:0:^eq3/data/:3.8",
                     timeout=300, log_dir=str(tmp_path))
    assert [r.returncode for r in results] == [0, 0, 0, 0], [r.output[-2000:] for r in results]
    out = "".join(r.output for r in results[:3])
    assert "declared failed" not in out and "sent nothing for exchange 'done'" not in out
    got = read_metrics(tmp_path / "d")
    assert [r["round"] for r in got] == [0, 1, 2, 3, 4]
    assert all(f"eval/accuracy/node{v}" in got[-1] for v in (0, 1, 2))  # (the honest reporters' final evaluations)
    assert all(f"train/loss/node{v}" in got[3] for v in (1, 2)) and "train/loss/node3" not in got[3]
