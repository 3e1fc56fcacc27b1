"""A heterogeneous swarm whose nodes train at their own learning rates (``swarm.models.N.lr``, issue 37)
gives the same metrics across torch.distributed ranks (each rank builds only its node) as in process,
where tests/training/test_node_optimizer.py reads each node's AdamW lr back."""

import pytest

from distributed_helpers import RELATIVE, comparable, launch

from dgrpo.cli import main
from dgrpo.metrics.logger import read_metrics

# Node 2 sends a full-reward poison beside a sampled completion, so the honest nodes 0 and 1 update every round.
COMMON = ["threads=1", "swarm.nodes=3", "swarm.group_size=6", "swarm.prompts_per_round=2", "sampling.max_new_tokens=16",
          "eval.every=1", "eval.n_prompts=2", "task.n_train=20", "task.n_val=5", "task.few_shot=0", "grpo.lr=0.01",
          "rounds=2", "swarm.malicious=[2]", "attack.kind=injection", "attack.poisoned_per_group=1",
          "swarm.protocol.enforce_length=false", "swarm.unsafe_key_exchange=true"]


@pytest.mark.slow
def test_three_ranks_train_each_node_at_its_own_lr_as_in_process(tmp_path, tiny_model_dir, tiny_model_dir_b):
    def models(lr0: str) -> str:
        return f"swarm.models=[{{name: {tiny_model_dir}{lr0}}}, {{name: {tiny_model_dir_b}, lr: 0.002}}, {{name: {tiny_model_dir}}}]"

    def in_process(name: str, lr0: str) -> list[dict]:
        assert main(["run", models(lr0), *COMMON, f"out_dir={tmp_path}", f"name={name}"]) == 0
        return comparable(read_metrics(tmp_path / name))

    want = in_process("in", ", lr: 0.004")
    assert want != in_process("in_grpo_lr", "")  # node 0 at grpo.lr instead: the metrics show it
    results = launch(3, ["run", RELATIVE, models(", lr: 0.004"), *COMMON, f"out_dir={tmp_path}", "name=d",
                         "swarm.transport=distributed"], log_dir=str(tmp_path))
    assert [r.returncode for r in results] == [0, 0, 0], results[0].output[-3000:]
    assert comparable(read_metrics(tmp_path / "d")) == want
