"""Checkpoint and resume: 4 rounds straight = 2 rounds + resume + 2 rounds (metrics bar time/*)."""

import json

import pytest

from dgrpo.cli import main
from dgrpo.recipes import horizontal
from dgrpo.metrics.logger import read_metrics

# Node 1 sends a full-reward poisoned completion beside a sampled one, so every round moves the
# weights and the optimizer state.
COMMON = ["threads=1", "swarm.nodes=2", "swarm.group_size=4", "swarm.prompts_per_round=2", "sampling.max_new_tokens=24",
          "eval.every=2", "eval.n_prompts=2", "task.n_train=20", "task.n_val=5", "task.few_shot=0", "grpo.lr=0.01",
          "swarm.malicious=[1]", "attack.kind=injection", "attack.poisoned_per_group=1",
          "swarm.protocol.enforce_length=false"]  # (the tiny limit leaves no room for a poison: let the paper's through)


def metrics(run_dir):
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in read_metrics(run_dir)]


@pytest.fixture()
def straight(tmp_path, tiny_model_dir):
    args = [f"model.name={tiny_model_dir}", *COMMON]
    assert main(["run", *args, "rounds=4", f"out_dir={tmp_path}", "name=straight"]) == 0
    records = metrics(tmp_path / "straight")
    assert [r["round"] for r in records] == [0, 1, 2, 3, 4]
    assert all(r["train/grad_norm"] > 0 for r in records[:4])
    return args, records


@pytest.mark.slow
def test_extending_a_finished_run_matches_a_straight_run(tmp_path, straight):
    args, want = straight
    assert main(["run", *args, "rounds=2", f"out_dir={tmp_path}", "name=part"]) == 0
    node0 = tmp_path / "part" / "checkpoint" / "node0"
    state = json.loads((node0 / "state.json").read_text())
    assert state["next_round"] == 2 and {"python", "numpy", "torch"} <= state["rng"].keys()
    assert (node0 / "optimizer.pt").exists() and (node0 / "model.safetensors").exists()
    assert main(["resume", str(tmp_path / "part"), "rounds=4"]) == 0
    assert metrics(tmp_path / "part") == want
    assert "rounds: 4" in (tmp_path / "part" / "config.yaml").read_text()


@pytest.mark.slow
def test_resume_after_a_crash_reruns_the_rounds_after_the_checkpoint(tmp_path, straight, monkeypatch):
    args, want = straight
    one_round = horizontal.one_round

    def crash_at_3(run, r):
        if r == 3:
            raise RuntimeError("power cut")
        return one_round(run, r)

    monkeypatch.setattr(horizontal, "one_round", crash_at_3)
    with pytest.raises(RuntimeError, match="power cut"):
        main(["run", *args, "rounds=4", "checkpoint_every=2", f"out_dir={tmp_path}", "name=crash"])
    assert [r["round"] for r in metrics(tmp_path / "crash")] == [0, 1, 2]  # round 2 logged after the checkpoint
    monkeypatch.setattr(horizontal, "one_round", one_round)
    log = tmp_path / "crash" / "metrics.jsonl"
    good = log.read_text()
    log.write_text(good + '{"round": 3, "train/rew')  # killed while writing a line: that line is dropped
    assert main(["resume", str(tmp_path / "crash")]) == 0
    assert metrics(tmp_path / "crash") == want


def test_resume_refuses_a_damaged_log_line_before_loading_a_model(tmp_path, capsys, monkeypatch):
    run = tmp_path / "r"
    (run / "checkpoint" / "node0").mkdir(parents=True)
    (run / "checkpoint" / "node0" / "state.json").write_text('{"next_round": 1}')
    (run / "config.yaml").write_text("rounds: 2\n")
    (run / "metrics.jsonl").write_text('{"round": 0}\n[1, 2]\n{"round": 1}\n')
    monkeypatch.setattr(horizontal, "build_run", lambda *a: pytest.fail("loaded the run before checking its logs"))
    assert main(["resume", str(run)]) == 2
    assert "metrics.jsonl:2: not a round record" in capsys.readouterr().err


def test_resume_without_a_checkpoint_is_a_clear_error(tmp_path, capsys):
    (tmp_path / "config.yaml").write_text("rounds: 2\n")
    assert main(["resume", str(tmp_path)]) == 2
    assert "holds no checkpoint" in capsys.readouterr().err


@pytest.mark.slow
def test_a_damaged_checkpoint_state_is_a_one_line_error(tmp_path, straight, capsys):
    args, _ = straight
    assert main(["run", *args, "rounds=2", f"out_dir={tmp_path}", "name=part"]) == 0
    state = tmp_path / "part" / "checkpoint" / "node0" / "state.json"
    state.write_text('{"next_round": "two"}')
    assert main(["resume", str(tmp_path / "part"), "rounds=4"]) == 2
    assert "state.json: not a checkpoint state" in capsys.readouterr().err


@pytest.mark.slow
def test_a_lora_run_with_warmup_resumes_like_a_straight_run(tmp_path, tiny_model_dir):
    args = [f"model.name={tiny_model_dir}", *COMMON, "grpo.lora_rank=4", "grpo.warmup_rounds=3"]
    assert main(["run", *args, "rounds=4", f"out_dir={tmp_path}", "name=straight"]) == 0
    want = metrics(tmp_path / "straight")
    assert all(r["train/grad_norm"] > 0 for r in want[1:4])  # round 0: B = 0, A's gradient is 0, B's not
    assert main(["run", *args, "rounds=2", f"out_dir={tmp_path}", "name=part"]) == 0
    assert main(["resume", str(tmp_path / "part"), "rounds=4"]) == 0
    assert metrics(tmp_path / "part") == want
