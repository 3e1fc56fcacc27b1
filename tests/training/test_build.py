"""Building a run from its config: the task's seed, the run directory, the update's and sampler's settings."""

import re

import pytest
import yaml

from dgrpo.config import load_config
from dgrpo.tasks.arithmetic import ArithmeticTask
from dgrpo.training.build import build_run_dir, build_task, grpo_params, run_name, sampling_params


def test_a_generator_seed_left_open_is_the_run_seed():
    task = build_task(load_config(overrides=["seed=7", "task.n_train=5", "task.n_val=2"]))
    same = ArithmeticTask(seed=7, n_train=5, n_val=2)
    assert [p.question for p in task.train] == [p.question for p in same.train]
    pinned = build_task(load_config(overrides=["seed=7", "task.seed=1", "task.n_train=5", "task.n_val=2"]))
    assert [p.question for p in pinned.train] == [p.question for p in ArithmeticTask(seed=1, n_train=5, n_val=2).train]


def test_the_run_directory_holds_the_resolved_config_and_refuses_a_second_run(tmp_path):
    cfg = load_config(overrides=[f"out_dir={tmp_path}", "attack.kind=injection", "swarm.malicious=[1]",
                                 "defenses=[{kind: topk}, {kind: judge}]", "seed=3"])
    assert re.fullmatch(r"arithmetic__injection__topk\+judge__seed3__\d{8}-\d{6}", run_name(cfg))
    run_dir = build_run_dir(cfg, "first")
    assert yaml.safe_load((run_dir / "config.yaml").read_text()) == cfg.model_dump(mode="json")
    (run_dir / "metrics.jsonl").write_text("")
    with pytest.raises(FileExistsError, match="already holds a run"):
        build_run_dir(cfg, "first")


def test_update_and_sampling_settings_come_from_their_sections():
    cfg = load_config(overrides=["grpo.loss_type=bnpo", "grpo.lr=1e-4", "sampling.max_new_tokens=32",
                                 "sampling.top_k=5", "swarm.reject_mode=zero"])
    params = grpo_params(cfg, lr=3e-3)
    assert (params.loss_type, params.lr, params.max_len, params.reject_mode) == ("bnpo", 3e-3, 32, "zero")
    assert grpo_params(cfg).lr == 1e-4
    s = sampling_params(cfg, max_new_tokens=8)
    assert (s.top_k, s.temperature, s.max_new_tokens) == (5, 1.0, 8)
