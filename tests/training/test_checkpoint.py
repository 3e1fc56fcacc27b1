"""Checkpoints hold weights, optimizer state, RNG states and the round, and load back exactly."""

import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from dgrpo.config import load_config
from dgrpo.errors import CheckpointError
from dgrpo.training.build import build_run
from dgrpo.training.checkpoint import load_checkpoint, load_weights, save_checkpoint
from dgrpo.types import Rollout


@pytest.fixture()
def run(tmp_path, tiny_model_dir):
    cfg = load_config(overrides=[f"model.name={tiny_model_dir}", f"out_dir={tmp_path}", "name=c", "swarm.nodes=2",
                                 "task.n_train=10", "task.n_val=2", "grpo.lr=0.01"])
    run = build_run(cfg)
    policy = run.swarm.policies[0]
    learner = run.swarm.learners[policy]
    eos = policy.tokenizer.eos_token_id
    learner.step([Rollout("a", [5, 6], [7, 8, eos], "", 0, reward=1.0), Rollout("a", [5, 6], [9, eos], "", 1, reward=0.0)])
    return run


def _snapshot(run):
    policy = run.swarm.policies[0]
    opt = run.swarm.learners[policy].optimizer.state_dict()
    return ({k: v.clone() for k, v in policy.model.state_dict().items()},
            {i: {k: v.clone() for k, v in s.items()} for i, s in opt["state"].items()},
            (random.random(), float(np.random.rand()), float(torch.rand(1))))


def test_a_checkpoint_loads_back_weights_optimizer_and_random_states(run):
    root = save_checkpoint(run, next_round=3)
    state = json.loads((root / "state.json").read_text())
    assert state["next_round"] == 3 and state["run"]["round"] == 3 and state["run"]["seed"] == run.cfg.seed
    assert sorted(p.name for p in root.iterdir()) == ["node0", "state.json"]  # one copy of the shared weights
    weights, opt, draws = _snapshot(run)  # (the draws advance the RNGs past what was saved)
    policy = run.swarm.policies[0]
    with torch.no_grad():
        for p in policy.model.parameters():
            p.add_(1.0)
    run.swarm.learners[policy].optimizer.state.clear()
    assert load_checkpoint(run) == 3
    assert all(torch.equal(v, weights[k]) for k, v in policy.model.state_dict().items())
    state = run.swarm.learners[policy].optimizer.state_dict()["state"]
    assert state.keys() == opt.keys() and all(torch.equal(state[i]["exp_avg"], opt[i]["exp_avg"]) for i in opt)
    assert (random.random(), float(np.random.rand()), float(torch.rand(1))) == draws  # same draws as after the save


def test_a_damaged_state_names_its_file(run):
    root = save_checkpoint(run, next_round=1)
    (root / "node0" / "state.json").write_text("[1]")
    with pytest.raises(CheckpointError, match="node0/state.json: not a checkpoint state"):
        load_checkpoint(run)


def test_weights_of_another_model_are_refused(run, tmp_path, tiny_model_dir_b):
    with pytest.raises(RuntimeError, match="size mismatch"):  # torch refuses the shapes before our own check
        load_weights(run.swarm.policies[0].model, Path(tiny_model_dir_b))
    (tmp_path / "extra").mkdir()
    from safetensors.torch import save_file

    save_file({"not.a.weight": torch.zeros(1)}, str(tmp_path / "extra" / "model.safetensors"))
    with pytest.raises(ValueError, match=r"unexpected \['not.a.weight'\]"):
        load_weights(run.swarm.policies[0].model, tmp_path / "extra")
