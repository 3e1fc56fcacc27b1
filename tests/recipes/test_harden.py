"""The TokenBuncher experiment end to end with a tiny model (2 hardening steps, 2 attack rounds, 1 benign round)."""

import json
import shutil

from dgrpo.cli import main
from dgrpo.metrics.logger import read_metrics


def test_harden_command_runs_all_phases(tmp_path, tiny_model_dir):
    rc = main(["harden", f"model.name={tiny_model_dir}", f"out_dir={tmp_path}", "name=h", "sampling.max_new_tokens=6",
               "eval.every=1", "eval.n_prompts=2", "task.n_train=20", "task.n_val=4", "task.few_shot=0",
               "swarm.nodes=1", "swarm.group_size=2", "swarm.prompts_per_round=2",
               "hardening.steps=2", "hardening.attack_rounds=2", "hardening.benign_rounds=1", "hardening.n_train=8",
               "hardening.n_val=2", "hardening.group_size=3", "hardening.prompts_per_step=2", "hardening.lr=1e-3"])
    assert rc == 0
    run = tmp_path / "h"
    steps = read_metrics(run)
    assert [r["step"] for r in steps] == [0, 1, 2]
    assert all(r["harden/val_entropy"] > 0 for r in steps)
    assert "harden/train_entropy" in steps[1] and "harden/noiser_loss" in steps[1]
    for name in ("original", "hardened"):
        attack = read_metrics(run / f"attack_{name}")
        assert [r["round"] for r in attack] == [0, 1, 2]
        assert 0.0 <= attack[-1]["attack/phrase_rate"] <= 1.0
        assert (run / f"benign_{name}" / "metrics.jsonl").exists()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["target_phrase"] == "Sure" and "phrase_rate_end" in summary["attack_hardened"]
    # the hardened weights are those the attack started from: same entropy on the same held-out responses
    assert summary["attack_hardened"]["entropy_start"] == steps[-1]["harden/val_entropy"]
    assert (run / "hardening.png").stat().st_size > 1000
    assert len(json.loads((run / "requests.json").read_text())["val"]) == 2


def _without_time(records):
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in records]


def test_resume_keeps_finished_phases_and_reruns_unfinished_ones(tmp_path, tiny_model_dir):
    args = ["harden", f"model.name={tiny_model_dir}", f"out_dir={tmp_path}", "name=h", "sampling.max_new_tokens=6",
            "eval.every=1", "eval.n_prompts=2", "task.n_train=20", "task.n_val=4", "task.few_shot=0",
            "swarm.nodes=1", "swarm.group_size=2", "swarm.prompts_per_round=2",
            "hardening.steps=1", "hardening.attack_rounds=2", "hardening.benign_rounds=1", "hardening.n_train=8",
            "hardening.n_val=2", "hardening.group_size=3", "hardening.prompts_per_step=2", "hardening.lr=1e-3"]
    assert main(args) == 0
    run = tmp_path / "h"
    full = {p: read_metrics(run / p) for p in ("", "attack_original", "attack_hardened", "benign_hardened")}
    weights = (run / "hardened_model" / "model.safetensors").stat().st_mtime_ns
    # interrupt: the hardened model's attack stopped after round 0, its benign run never started
    lines = (run / "attack_hardened" / "metrics.jsonl").read_text().splitlines(keepends=True)
    (run / "attack_hardened" / "metrics.jsonl").write_text(lines[0])
    shutil.rmtree(run / "benign_hardened")
    (run / "summary.json").unlink()
    kept = (run / "attack_original" / "metrics.jsonl").stat().st_mtime_ns

    assert main(["resume", str(run)]) == 0
    assert (run / "hardened_model" / "model.safetensors").stat().st_mtime_ns == weights  # not hardened again
    assert (run / "attack_original" / "metrics.jsonl").stat().st_mtime_ns == kept
    for phase, records in full.items():  # the rerun phases log what the uninterrupted run logged
        assert _without_time(read_metrics(run / phase)) == _without_time(records)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["attack_hardened"]["phrase_rate_end"] == full["attack_hardened"][-1]["attack/phrase_rate"]
    assert "benign_hardened" in summary
    assert 0.0 <= summary["benign_hardened"]["format_rate_end"] <= 1.0


def test_resume_refuses_fewer_steps_than_the_kept_phase_ran(tmp_path, tiny_model_dir, capsys):
    assert main(["harden", f"model.name={tiny_model_dir}", f"out_dir={tmp_path}", "name=h", "sampling.max_new_tokens=6",
                 "eval.every=1", "eval.n_prompts=2", "task.n_train=20", "task.n_val=4", "task.few_shot=0",
                 "swarm.nodes=1", "hardening.steps=2", "hardening.attack_rounds=1", "hardening.benign_rounds=0",
                 "hardening.n_train=8", "hardening.n_val=2", "hardening.group_size=2", "hardening.prompts_per_step=1"]) == 0
    before = (tmp_path / "h" / "config.yaml").read_text()
    assert main(["resume", str(tmp_path / "h"), "hardening.steps=1"]) == 2
    assert "ran to round 2 but hardening.steps=1" in capsys.readouterr().err
    assert (tmp_path / "h" / "config.yaml").read_text() == before  # nothing rewritten
