"""The trained matrix cells' table: numbers read from a run's metrics, the ASR's interval over the attack's
eval prompts, hand-worked."""

import json

import pytest
import yaml

from dgrpo.paper.matrix_training import cell_summary, write_training_table


def _run(path, asr_last=0.5, detection=(0.5, 1.0), fp=(0.0, 0.1)):
    path.mkdir(parents=True)
    cfg = {"seed": 0, "task": {"kind": "arithmetic", "n_train": 10, "n_val": 8}, "attack": {"kind": "injection"},
           "swarm": {"malicious": [3], "mode": "horizontal"}, "eval": {"n_prompts": 4}}
    (path / "config.yaml").write_text(yaml.safe_dump(cfg))
    rows = [{"round": 0, "eval/accuracy": 0.25, "eval/accuracy_ci95_low": 0.05, "eval/accuracy_ci95_high": 0.7,
             "attack/asr": 0.0, "eval/completion_tokens": 40.0},
            {"round": 1, "train/reward_honest": 0.25, "defense/any/detection_rate": detection[0], "defense/any/false_positive_rate": fp[0]},
            {"round": 2, "train/reward_honest": 0.75, "defense/any/detection_rate": detection[1], "defense/any/false_positive_rate": fp[1]},
            {"round": 2, "eval/accuracy": 0.5, "eval/accuracy_ci95_low": 0.15, "eval/accuracy_ci95_high": 0.85,
             "attack/asr": asr_last, "eval/completion_tokens": 42.5}]
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_cell_summary_reads_the_last_evaluation_and_the_training_means(tmp_path):
    c = cell_summary(_run(tmp_path / "hail__topk"))
    assert (c["round"], c["accuracy"], c["accuracy_ci95"], c["tokens"]) == (2, 0.5, [0.15, 0.85], 42.5)
    assert (c["asr_start"], c["asr"], c["asr_n"]) == (0.0, 0.5, 4)  # injection: ASR over the 4 eval prompts
    # Wilson 95% of 2/4 by hand: centre 0.5, half-width 1.96·sqrt(0.0625 + 1.96²/64) / (1 + 1.96²/4) = 0.34996
    assert c["asr_ci95"] == pytest.approx([0.15004, 0.84996], abs=1e-4)
    assert c["detection"] == pytest.approx(0.75) and c["fp"] == pytest.approx(0.05)
    assert c["train_reward_honest"] == 0.75


def test_table_quotes_the_one_round_matrix_and_the_baseline(tmp_path):
    matrix = {"attacks": {"hail": {"detection": {"topk": {"rate": 1.0}}}}}
    (tmp_path / "matrix.json").write_text(json.dumps(matrix))
    runs = {"hail__topk": _run(tmp_path / "a"), "hail__none": _run(tmp_path / "b", asr_last=1.0)}
    result = write_training_table(runs, tmp_path / "out", _run(tmp_path / "base"), tmp_path / "matrix.json")
    lines = (tmp_path / "out" / "training.md").read_text().splitlines()
    assert lines[2] == "| hail | topk | 100.0% | 75.0% / 5.0% | 0.0% → 50.0% [15, 85] (4) | 50.0% [15, 85] | 42.5 |"
    assert lines[3].startswith("| hail | none | – |") and "→ 100.0% [51, 100] (4)" in lines[3]
    assert lines[4] == "| (all honest) | – | – | – | – | 50.0% [15, 85] | 42.5 |"
    assert set(json.loads((tmp_path / "out" / "training.json").read_text())["cells"]) == {"hail__topk", "hail__none"}
    assert result["baseline"]["accuracy"] == 0.5
    assert (tmp_path / "out" / "training.png").read_bytes()[:4] == b"\x89PNG"


def test_bad_cells_are_refused(tmp_path):
    with pytest.raises(ValueError, match="ATTACK__DEFENSE"):
        write_training_table({"hail-topk": tmp_path}, tmp_path / "out")
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "metrics.jsonl").write_text(json.dumps({"round": 0, "train/reward_honest": 0.1}) + "\n")
    with pytest.raises(FileNotFoundError, match="no evaluation"):
        cell_summary(tmp_path / "r")
