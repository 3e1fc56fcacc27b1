"""The trained matrix cells' table: numbers read from a run's metrics, the ASR's interval over the attack's
eval prompts, hand-worked."""

import json
import re

import pytest
import yaml

from dgrpo.paper.matrix_training import cell_summary, write_training_table


def _run(path, asr_last=0.5, detection=(0.5, 1.0), fp=(0.0, 0.1), defense=None, attack="injection"):
    """A finished 2-round run of ``attack`` with one ``defense`` kind (None: none)."""
    path.mkdir(parents=True)
    cfg = {"seed": 0, "rounds": 2, "task": {"kind": "arithmetic", "n_train": 10, "n_val": 8}, "attack": {"kind": attack},
           "swarm": {"malicious": [3] if attack != "none" else [], "mode": "horizontal"}, "eval": {"n_prompts": 4},
           "defenses": [{"kind": defense}] if defense else []}
    (path / "config.yaml").write_text(yaml.safe_dump(cfg))
    rows = [{"round": 0, "eval/accuracy": 0.25, "eval/accuracy_ci95_low": 0.05, "eval/accuracy_ci95_high": 0.7,
             "attack/asr": 0.0, "eval/completion_tokens": 40.0},
            {"round": 1, "train/reward_honest": 0.25, "defense/any/detection_rate": detection[0], "defense/any/false_positive_rate": fp[0],
             "swarm/invalid": 3},
            {"round": 2, "train/reward_honest": 0.75, "defense/any/detection_rate": detection[1], "defense/any/false_positive_rate": fp[1],
             "swarm/invalid": 2},
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
    assert c["refused"] == 5  # 3 + 2 refused on receipt (swarm/invalid: a run without peers.jsonl)


def test_refused_counts_every_refusal_peers_jsonl_names_not_only_swarm_invalid(tmp_path):
    """A forged-identity or replayed-round cell: its refusals are not authenticated for the round, so swarm/invalid
    leaves them out (docs/protocol.md); the table's "refused on receipt" counts them from peers.jsonl."""
    run = _run(tmp_path / "forged_identity__protocol")
    lines = [{"round": 1, "peers": {"0": {"rejected": {"round": 2}, "transport": {}},
                                    "3": {"rejected": {"identity": 2, "seed": 1}, "transport": {"round": 2}}}},
             {"round": 1, "peers": {"3": {"rejected": {}, "transport": {"record": 1}}}, "records": {"3": "record: x"}},
             {"round": 2, "peers": {"3": {"rejected": {"identity": 2}, "transport": {}}}, "views": {"1": {"3": {"flood": 1}}}}]
    (run / "peers.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert cell_summary(run)["refused"] == 2 + 3 + 2  # rejected only: transport and views are no refusal on receipt


def test_a_run_that_skipped_round_0_has_no_start_values_not_its_last_ones(tmp_path):
    run = _run(tmp_path / "hail__none", asr_last=0.75)
    rows = (run / "metrics.jsonl").read_text().splitlines()
    (run / "metrics.jsonl").write_text("\n".join(rows[1:]) + "\n")  # eval.first=false: no round-0 evaluation
    c = cell_summary(run)
    assert (c["asr_start"], c["tokens_start"], c["asr"], c["tokens"]) == (None, None, 0.75, 42.5)


def test_table_quotes_the_one_round_matrix_and_the_baseline(tmp_path):
    matrix = {"attacks": {"hail": {"detection": {"topk": {"rate": 1.0}}}}, "honest": {}}
    (tmp_path / "matrix.json").write_text(json.dumps(matrix))
    runs = {"hail__topk": _run(tmp_path / "a", defense="topk"), "hail__none": _run(tmp_path / "b", asr_last=1.0)}
    result = write_training_table(runs, tmp_path / "out", _run(tmp_path / "base", attack="none"), tmp_path / "matrix.json")
    lines = (tmp_path / "out" / "training.md").read_text().splitlines()
    assert lines[2] == "| hail | topk | 100.0% | 75.0% / 5.0% | 5 | 2 | 0.0% → 50.0% [15, 85] (4) | 50.0% [15, 85] | 40.0 → 42.5 |"
    assert lines[3].startswith("| hail | none | – |") and "→ 100.0% [51, 100] (4)" in lines[3]  # 4/4: (1 + z²/8 − z·z/8)/(1 + z²/4)
    assert lines[4] == "| (all honest) | – | – | – | – | 2 | – | 50.0% [15, 85] | 40.0 → 42.5 |"
    assert set(json.loads((tmp_path / "out" / "training.json").read_text())["cells"]) == {"hail__topk", "hail__none"}
    assert result["baseline"]["accuracy"] == 0.5
    assert (tmp_path / "out" / "training.png").read_bytes()[:4] == b"\x89PNG"


def test_the_equation_asr_is_a_share_of_the_completions_that_computed_2_plus_2(tmp_path):
    """two_two_considered 0.5 of the attack's eval problems (the validation split's 2+2 / 2×2 questions,
    counted here from the task itself) → n = half of them."""
    from dgrpo.config import load_config
    from dgrpo.training.build import build_task

    run = _run(tmp_path / "eq")
    cfg = {"seed": 0, "rounds": 2, "task": {"kind": "arithmetic", "n_train": 10, "n_val": 400},
           "attack": {"kind": "equation"}, "swarm": {"malicious": [3], "mode": "vertical"}}
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    rows[-1]["attack/two_two_considered"] = 0.5
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = build_task(load_config(None, ["task.n_train=10", "task.n_val=400"]))
    # a 2+2 / 2×2 = 4 step with a later step (an intermediate result, which the attack can change)
    two_two = sum(bool(re.search(r"\b2 [+*×] 2 = 4\b.*=", p.solution)) for p in task.val)
    assert two_two > 10
    assert cell_summary(run)["asr_n"] == round(0.5 * min(two_two, 128))


def test_bad_cells_are_refused(tmp_path):
    run = _run(tmp_path / "hail")
    with pytest.raises(ValueError, match="name it ATTACK__DEFENSE"):
        write_training_table({"hail-topk": run}, tmp_path / "out")
    with pytest.raises(ValueError, match="ran attack.kind=injection, the row equation_oracle is attack.kind=equation"):
        write_training_table({"equation_oracle__topk": run}, tmp_path / "out")
    # the defense is read from the run's config: a run of no defense is not the top-k cell, nor a made-up column
    with pytest.raises(ValueError, match="trained the 'none' column .* not 'topk'; name it hail__none"):
        write_training_table({"hail__topk": run}, tmp_path / "out")
    with pytest.raises(ValueError, match="DEFENSE a column of the matrix \\(none, validation, .*step_checker.*\\) or protocol"):
        write_training_table({"hail__bogus": run}, tmp_path / "out")
    with pytest.raises(ValueError, match="baseline .* ran attack.kind=injection; give the all-honest run"):
        write_training_table({"hail__none": run}, tmp_path / "out", baseline_dir=run)
    for bad in ("[1, 2]", '{"attacks": {"hail": [1]}, "honest": {}}'):
        (tmp_path / "m.json").write_text(bad)
        with pytest.raises(ValueError, match="not a matrix.json|no 'detection' mapping"):
            write_training_table({"hail__none": run}, tmp_path / "out", matrix_json=tmp_path / "m.json")
    with pytest.raises(ValueError, match="cannot read a matrix.json \\(IsADirectoryError"):
        write_training_table({"hail__none": run}, tmp_path / "out", matrix_json=tmp_path)
    (tmp_path / "m.json").write_text(json.dumps({"model": "tiny", "max_new_tokens": 16, "attacks": {}, "honest": {}}))
    with pytest.raises(ValueError, match="measured on model tiny with max_new_tokens=16, but"):
        write_training_table({"hail__none": run}, tmp_path / "out", matrix_json=tmp_path / "m.json")
    assert not (tmp_path / "out").exists()  # every refusal came before anything was written
    rows = (run / "metrics.jsonl").read_text().splitlines()
    (run / "metrics.jsonl").write_text("\n".join(rows[:3]) + "\n")  # round 0's evaluation only
    with pytest.raises(ValueError, match=r"not finished \(last evaluation at round 0, rounds=2\)"):
        cell_summary(run)


def test_the_grid_is_one_attack_by_defense_table_of_the_same_cells(tmp_path):
    """grid.md: a row per attack, a column per defense that has a rate or a trained cell; a trained cell reads
    'one-round detection → ASR (accuracy)', a cell caught on one round (>= 90%) 'caught', another untrained '·'."""
    # the columns are the matrix's own, in its order (each defense by its registry name), then trained ones
    matrix = {"attacks": {"hail": {"detection": {"none": {"rate": 0.0}, "topk": {"rate": 1.0}, "step_checker": {"rate": 0.2}}},
                          "dos_sampled": {"detection": {"none": {"rate": 0.0}, "step_checker": {"rate": 0.4}}}}, "honest": {}}
    (tmp_path / "matrix.json").write_text(json.dumps(matrix))
    dos = _run(tmp_path / "d")
    cfg = yaml.safe_load((dos / "config.yaml").read_text())
    cfg["attack"] = {"kind": "seed_grinding", "objective": "longest"}  # its success is length: no ASR
    (dos / "config.yaml").write_text(yaml.safe_dump(cfg))
    runs = {"hail__none": _run(tmp_path / "h", asr_last=1.0), "dos_sampled__none": dos}
    write_training_table(runs, tmp_path / "out", _run(tmp_path / "base", attack="none"), tmp_path / "matrix.json")
    lines = (tmp_path / "out" / "grid.md").read_text().splitlines()
    assert "after 2 rounds" in lines[0] and "held-out accuracy 0.500 [0.15, 0.85]" in lines[0]
    assert lines[2:] == ["| attack | none | topk | step_checker |", "|---|---|---|---|",
                         "| hail | 0% → **1.00** (0.50) | 100% caught | 20% · |",
                         "| dos_sampled | 0% → 42 tok (0.50) | · | 40% · |"]
    assert (tmp_path / "out" / "grid.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("overrides, key", [
    ([], None),
    (["swarm.malicious=[3]", "attack.kind=injection"], "attack/asr"),
    (["swarm.malicious=[3]", "attack.kind=injection", "attack.placement=every_sentence"], "attack/asr_every_sentence"),
    (["swarm.malicious=[3]", "attack.kind=topk_injection", "attack.placement=every_sentence"],
     "attack/asr_every_sentence"),
    (["swarm.malicious=[3]", "attack.kind=seed_grinding", "attack.objective=longest"], None),
    (["swarm.malicious=[3]", "attack.kind=seed_grinding"], "attack/asr"),
    (["swarm.malicious=[3]", "swarm.mode=vertical", "attack.kind=equation"], "attack/asr"),
])
def test_the_trained_cells_success_metric_is_the_one_the_attack_config_declares(overrides, key):
    """asr_key reads the attack config's own declaration (review r32d #3: it switched on kind names)."""
    from dgrpo.config import load_config
    from dgrpo.paper.matrix_training import asr_key

    assert asr_key(load_config(None, overrides)) == key
