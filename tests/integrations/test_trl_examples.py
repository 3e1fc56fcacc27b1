"""The TRL example scripts run end to end on the tiny test model: a poisoned or tampering worker is caught
exactly, no honest rollout is rejected."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_defended_example_rejects_its_poisoned_worker(tiny_model_dir):
    example = _load("trl_defended")
    common = ["--model", tiny_model_dir, "--steps", "2", "--max-new-tokens", "96", "--threads", "1"]
    defended = example.main(common)
    assert defended["completions"] == 16 and defended["poisoned"] == 4
    assert defended["rejected"] == 4 and defended["poison_reward"] == [0.0] * 4
    undefended = example.main([*common, "--undefended"])
    assert undefended["poison_reward"] == [1.0] * 4  # the poison is a correct, well-formatted answer


@pytest.mark.parametrize("tamper", ["seed", "token", "text"])
def test_replay_rejects_exactly_the_tampering_workers_rollouts(tiny_model_dir, tamper):
    """Workers sample with generate + dgrpo's processor; worker 1 of 4 tampers; replay alone checks."""
    out = _load("trl_replay_workers").main(["--model", tiny_model_dir, "--steps", "2", "--max-new-tokens", "12",
                                            "--bad", "1", "--tamper", tamper, "--threads", "1"])
    assert out["steps"] == 2 and out["seen"] == 16
    assert out["tampered"] == [[1, 5], [1, 5]]  # worker 1's slot of each of the 2 prompts, every step
    assert out["rejected"] == out["tampered"]  # exactly those: no honest rollout rejected
