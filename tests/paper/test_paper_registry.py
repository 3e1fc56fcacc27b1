"""dgrpo paper: the registry of reproductions, the analytic entries and one run-based entry end to end."""

import csv
import json

import pytest

from dgrpo.cli import main
from dgrpo.config import load_config
from dgrpo.metrics.logger import read_metrics, series
from dgrpo.paper import REGISTRY, SCALES, Reproduction
from dgrpo.paper.registry import register

PAPER_FIGURES = {"fig1a", "fig1b", "fig4a", "fig4b", "fig5", "table1", "fig6", "fig7", "fig8", "fig9", "fig10", "fig11",
                 "fig12", "fig13", "fig14"}
TINY = ["rounds=1", "swarm.nodes=2", "swarm.group_size=2", "swarm.prompts_per_round=2", "sampling.max_new_tokens=6",
        "eval.every=1", "eval.n_prompts=2", "task.n_train=20", "task.n_val=5", "task.few_shot=0"]


def test_registry_covers_the_paper():
    assert PAPER_FIGURES <= set(REGISTRY)
    # ASR with each homogeneous defense on; the attack x defense matrix (adaptive attacks, not in the paper)
    # and its cells trained
    assert set(REGISTRY) - PAPER_FIGURES == {"defended_topk", "defended_replay", "matrix", "matrix_training"}
    assert {n for n, e in REGISTRY.items() if e.func} == {"fig8", "fig10", "matrix"}
    for entry in REGISTRY.values():
        assert entry.figure and entry.description


@pytest.mark.parametrize("scale", sorted(SCALES))
def test_every_curve_is_a_valid_config(scale):
    for entry in REGISTRY.values():
        for curve in entry.curves:
            cfg = load_config(None, entry.overrides(curve, scale))
            if curve == "baseline":  # Appendix C's all-honest baseline (Fig. 12-14)
                assert cfg.attack.kind == "none" and not cfg.swarm.malicious and not cfg.defenses, entry.name
            else:
                assert cfg.attack.kind != "none" and cfg.swarm.malicious, (entry.name, curve)
            code = cfg.attack.kind == "code_injection"  # Fig. 4b: the python-solving task
            if scale == "paper":  # §3.1: 32 prompts × 12 completions, lr 2e-5, GSM8K, Qwen2.5-1.5B
                assert (cfg.swarm.prompts_per_round, cfg.swarm.group_size, cfg.grpo.lr) == (32, 12, 2e-5)
                assert cfg.task.kind == "python_math" if code else (cfg.task.kind == "gsm8k" and cfg.task.hub == "openai/gsm8k")
                assert cfg.model.name.startswith("Qwen/Qwen2.5-")
            else:
                assert cfg.model.name == "smollm2-135m-instruct"
                assert cfg.task.kind == ("python_math" if code else "arithmetic")


def test_fig9_poison_ratios_are_the_papers():
    """8% = 1, 25% = 3, 50% = 6 poisoned of G = 12 (Fig. 9 caption)."""
    entry = REGISTRY["fig9"]
    for curve, expected in (("8pct", 1), ("25pct", 3), ("50pct", 6)):
        for scale in SCALES:
            cfg = load_config(None, entry.overrides(curve, scale))
            slots = cfg.swarm.group_size // cfg.swarm.nodes  # horizontal: G/m completions per node per prompt
            c = min(cfg.attack.poisoned_per_group, slots) * len(cfg.swarm.malicious)
            assert (cfg.swarm.group_size, c) == (12, expected), (curve, scale)


def test_table1_and_fig11_settings():
    assert REGISTRY["table1"].metric == "defense/any/detection_rate"
    betas = [load_config(None, REGISTRY["fig11"].overrides(c)).grpo.beta for c in REGISTRY["fig11"].curves]
    assert betas == [0.0, 0.01, 0.1]
    modes = {c: load_config(None, REGISTRY["fig1b"].overrides(c)).swarm.mode for c in REGISTRY["fig1b"].curves}
    assert modes == {"vertical": "vertical"}


def test_matrix_training_cells_are_the_matrix_rows_and_columns():
    """Each trained cell runs its matrix row's attack (node 3 of 4) against its column's defense alone, with
    seed binding off except in replay_bound and protocol (the matrix's columns judge content alone), the
    protocol rows without signatures and shares except in protocol, 12 rounds evaluated at the end."""
    from dgrpo.paper.matrix import ATTACKS

    kinds = {"none": [], "topk": ["topk"], "replay": ["replay"], "replay_bound": ["replay"],
             "reward_outlier": ["reward_outlier"], "step_checker": ["step_checker"], "protocol": [], "kl": [], "judge": ["judge"]}
    protocol_rows = {"forged_identity", "flooding", "replayed_round", "equivocation"}
    entry = REGISTRY["matrix_training"]
    assert len(entry.curves) >= 10
    for curve in entry.curves:
        attack, defense = curve.split("__")
        cfg = load_config(None, entry.overrides(curve))
        row = load_config(None, [*ATTACKS[attack], "swarm.malicious=[3]"])
        assert (cfg.attack.kind, cfg.swarm.mode, cfg.swarm.malicious) == (row.attack.kind, row.swarm.mode, [3]), curve
        assert [d.kind for d in cfg.defenses] == kinds[defense], curve
        p = cfg.swarm.protocol
        assert p.bind_seeds is (defense in ("replay_bound", "protocol")), curve
        assert p.sign is p.enforce_shares is (attack not in protocol_rows or defense == "protocol"), curve
        assert (cfg.rounds, cfg.eval.every, cfg.eval.n_prompts, cfg.eval.first) == (12, 12, 128, False), curve
        assert cfg.grpo.beta == (0.1 if defense == "kl" else 0.0), curve  # the paper's larger KL weight (§B.4)
        # prompt-choice grinding's protocol cell is the one with the protocol assigning vertical prompts
        assert p.assign_prompts is (curve == "dos_prompt_grind__protocol"), curve
    # every row has a KL cell (β-KL lets every poison through); every protocol row has the protocol's
    # column, and so does prompt-choice grinding (assigned prompts); no other content row does
    assert {c.split("__")[0] for c in entry.curves if c.endswith("__kl")} == set(ATTACKS)
    assert {c.split("__")[0] for c in entry.curves if c.endswith("__protocol")} == protocol_rows | {"dos_prompt_grind"}


def test_curves_trains_only_the_named_curves(tmp_path, tiny_model_dir, monkeypatch, capsys):
    monkeypatch.setitem(REGISTRY, "tinyfig", Reproduction(
        "tinyfig", "test figure", "two seeds", curves={"s0": ["seed=0"], "s1": ["seed=1"]}, metric="train/reward_honest"))
    args = ["paper", "tinyfig", "--out", str(tmp_path), "--set", f"model.name={tiny_model_dir}", *sum((["--set", o] for o in TINY), [])]
    assert main([*args, "--curves", "s9"]) == 2
    assert "--curves: tinyfig has no curve(s) ['s9']; its curves: s0, s1" in capsys.readouterr().err
    for bad in ("", "s1,", "s1,s1"):  # an empty list must not mean "every curve"
        assert main([*args, "--curves", bad]) == 2
        assert f"--curves: give distinct curve names separated by commas, got {bad!r}" in capsys.readouterr().err
    assert main(["paper", "fig8", "--out", str(tmp_path), "--curves", "a"]) == 2
    assert "--curves: fig8 is analytic (no curves)" in capsys.readouterr().err
    assert main([*args, "--curves", "s1"]) == 0
    folder = tmp_path / "tinyfig"
    assert not (folder / "s0").exists() and (folder / "s1" / "metrics.jsonl").exists()
    assert set(json.loads((folder / "numbers.json").read_text())["curves"]) == {"s1"}
    assert (folder / "command.txt").read_text().splitlines()[0].endswith("--curves s1")
    before = (folder / "s1" / "metrics.jsonl").stat().st_mtime_ns
    assert main(args) == 0  # all curves: s1 reused, s0 trained
    assert (folder / "s1" / "metrics.jsonl").stat().st_mtime_ns == before
    assert set(json.loads((folder / "numbers.json").read_text())["curves"]) == {"s0", "s1"}


def test_entry_needs_exactly_one_of_func_or_curves():
    with pytest.raises(ValueError, match="exactly one"):
        Reproduction("x", "X", "d")
    with pytest.raises(ValueError, match="exactly one"):
        Reproduction("x", "X", "d", func=lambda out: {}, curves={"a": []})


def test_list(capsys):
    assert main(["paper", "--list"]) == 0
    out = capsys.readouterr().out
    for name in PAPER_FIGURES:
        assert f"\n{name} " in "\n" + out
    assert "TODO" not in out and "not yet as in the paper: paper scale: OpenMathInstruct is not bundled" in " ".join(out.split())


@pytest.mark.parametrize("width", [60, 80, 120])
def test_list_wraps_to_the_width_and_indents_past_the_longest_name(width):
    from dgrpo.paper.runner import list_text

    lines = list_text(width).splitlines()
    assert max(len(line) for line in lines) <= width
    indent = max(len(name) for name in REGISTRY) + 2  # (matrix_training: 15 characters)
    assert all(line.startswith(" " * indent) or line.split()[0] in REGISTRY for line in lines)


def test_analytic_entries_through_the_cli(tmp_path):
    assert main(["paper", "fig8", "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "fig8" / "fig8.json").read_text())
    assert data["peak_ratio"] == {"12": 0.5, "16": 0.5, "24": 0.5, "32": 0.5}
    assert (tmp_path / "fig8" / "command.txt").read_text() == f"dgrpo paper fig8 --scale cpu --out {tmp_path}\n"
    assert main(["paper", "fig10", "--out", str(tmp_path), "--set", "clip=true", "--set", "n_draws=300"]) == 0
    settings = json.loads((tmp_path / "fig10" / "fig10.json").read_text())["settings"]
    assert settings["clip"] is True and settings["n_draws"] == 300
    assert (tmp_path / "fig10" / "fig10.png").stat().st_size > 5000


def test_errors_are_clear(tmp_path, capsys):
    assert main(["paper", "fig99", "--out", str(tmp_path)]) == 2
    assert "unknown reproduction 'fig99'" in capsys.readouterr().err
    assert main(["paper", "fig8", "--out", str(tmp_path), "--set", "bogus=1"]) == 2
    assert "fig8: unknown --set key(s) bogus; fig8 takes ddof" in capsys.readouterr().err
    # the matrix takes its model as `model`, not a run's `model.name`: the error says which keys it takes
    assert main(["paper", "matrix", "--out", str(tmp_path), "--set", "model.name=x"]) == 2
    err = capsys.readouterr().err
    assert "unknown --set key(s) model.name; matrix takes model, n_honest" in err and "--set model=NAME_OR_DIR" in err
    for bad, why in (("attacks=[nope]", "unknown matrix rows/columns ['nope']"),
                     ("n_poisoned=100", "needs 25 honest groups of 8: raise n_honest to 200")):
        assert main(["paper", "matrix", "--out", str(tmp_path), "--set", bad, "--set", "n_honest=16"]) == 2
        err = capsys.readouterr().err
        assert why in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, bad


@pytest.mark.slow
def test_run_based_entry_end_to_end(tmp_path, tiny_model_dir, monkeypatch):
    """Two curves of a throwaway entry (no attack: the attacks are not part of this test) with the tiny model."""
    monkeypatch.setitem(REGISTRY, "tinyfig", Reproduction(
        "tinyfig", "test figure", "two seeds", curves={"s0": ["seed=0"], "s1": ["seed=1"]}, metric="train/reward_honest"))
    args = ["paper", "tinyfig", "--out", str(tmp_path), "--set", f"model.name={tiny_model_dir}", *sum((["--set", o] for o in TINY), [])]
    assert main(args) == 0
    folder = tmp_path / "tinyfig"
    numbers = json.loads((folder / "numbers.json").read_text())
    assert numbers["metric"] == "train/reward_honest" and set(numbers["curves"]) == {"s0", "s1"}
    for curve in ("s0", "s1"):
        rounds, values = series(read_metrics(folder / curve), "train/reward_honest")
        assert rounds == [0] and numbers["curves"][curve]["rounds"] == rounds
        assert numbers["curves"][curve]["values"] == values and numbers["curves"][curve]["final"] == values[-1]
    rows = list(csv.reader((folder / "numbers.csv").open()))
    assert rows[0] == ["curve", "round", "train/reward_honest"] and len(rows) == 3
    assert float(rows[1][2]) == numbers["curves"]["s0"]["values"][0]
    assert (folder / "tinyfig.png").read_bytes()[:4] == b"\x89PNG"
    page = (folder / "report.html").read_text()
    assert "dgrpo comparison: 2 runs" in page and ">s0</td>" in page and ">s1</td>" in page
    lines = (folder / "command.txt").read_text().splitlines()
    assert lines[0].startswith(f"dgrpo paper tinyfig --scale cpu --out {tmp_path} --set model.name=")
    assert lines[1] == "# s0" and lines[2].startswith("dgrpo run rounds=30 eval.every=6 eval.n_prompts=128 threads=1 checkpoint_every=5 seed=0 model.name=") and lines[2].endswith(f"out_dir={folder} name=s0")
    # a second call reuses the finished curves instead of failing on the existing run directories
    before = (folder / "s0" / "metrics.jsonl").stat().st_mtime_ns
    assert main(args) == 0
    assert (folder / "s0" / "metrics.jsonl").stat().st_mtime_ns == before


def test_seeds_train_each_curve_per_seed_and_plot_their_mean(tmp_path, tiny_model_dir, monkeypatch):
    monkeypatch.setitem(REGISTRY, "tinyfig", Reproduction(
        "tinyfig", "test figure", "one curve", curves={"c": []}, metric="train/reward_honest"))
    args = ["paper", "tinyfig", "--out", str(tmp_path), "--set", f"model.name={tiny_model_dir}",
            *sum((["--set", o] for o in [*TINY, "rounds=2"]), []), "--seeds", "3", "5", "--jobs", "1"]
    assert main(args) == 0
    folder = tmp_path / "tinyfig"
    numbers = json.loads((folder / "numbers.json").read_text())
    assert set(numbers["curves"]) == {"c_seed3", "c_seed5"}
    assert load_config(folder / "c_seed5" / "config.yaml").seed == 5
    runs = [dict(zip(*series(read_metrics(folder / f"c_seed{n}"), "train/reward_honest"))) for n in (3, 5)]
    g = numbers["seeds"]["c"]
    assert g["rounds"] == [0, 1] and g["seeds"] == [3, 5]
    assert g["mean"] == pytest.approx([(runs[0][r] + runs[1][r]) / 2 for r in (0, 1)])
    assert g["min"] == [min(runs[0][r], runs[1][r]) for r in (0, 1)] and g["max"] == [max(runs[0][r], runs[1][r]) for r in (0, 1)]
    assert g["final_mean"] == g["mean"][-1]
    assert (folder / "command.txt").read_text().splitlines()[0].endswith("--seeds 3 5")
    assert main(["paper", "tinyfig", "--out", str(tmp_path), "--seeds", "1", "1"]) == 2
    assert main(["paper", "fig8", "--out", str(tmp_path), "--seeds", "1"]) == 2
    assert main(["paper", "tinyfig", "--out", str(tmp_path), "--seeds", "1", "--set", "seed=5"]) == 2


def test_a_rate_with_an_interval_carries_it_into_the_figure(tmp_path, tiny_model_dir, monkeypatch):
    monkeypatch.setitem(REGISTRY, "tinyfig", Reproduction("tinyfig", "test figure", "accuracy", curves={"c": ["seed=0"]},
                                                          metric="eval/accuracy"))
    args = ["paper", "tinyfig", "--out", str(tmp_path), "--set", f"model.name={tiny_model_dir}", *sum((["--set", o] for o in TINY), [])]
    assert main(args) == 0
    cur = json.loads((tmp_path / "tinyfig" / "numbers.json").read_text())["curves"]["c"]
    records = read_metrics(tmp_path / "tinyfig" / "c")
    want = [[r["eval/accuracy_ci95_low"], r["eval/accuracy_ci95_high"]] for r in records if "eval/accuracy" in r]
    assert cur["ci95"] == want and len(want) == len(cur["values"]) == 2


def test_register_refuses_duplicates():
    with pytest.raises(ValueError, match="twice"):
        register(REGISTRY["fig8"])


def test_interrupted_curve_resumes_from_its_checkpoint(tmp_path, tiny_model_dir, monkeypatch):
    """A curve with a checkpoint but no final record continues instead of starting over."""
    monkeypatch.setitem(REGISTRY, "tinyresume", Reproduction(
        "tinyresume", "test figure", "one curve", curves={"c": ["seed=0"]}, metric="train/reward_honest"))
    base = ["paper", "tinyresume", "--out", str(tmp_path), "--jobs", "1", "--set", f"model.name={tiny_model_dir}",
            *sum((["--set", o] for o in TINY), [])]
    assert main([*base, "--set", "rounds=1"]) == 0  # "interrupted" after round 0: checkpoint at round 1
    run = tmp_path / "tinyresume" / "c"
    first = (run / "metrics.jsonl").read_text().splitlines()[0]
    assert main([*base, "--set", "rounds=2"]) == 0
    records = read_metrics(run)
    assert [r["round"] for r in records] == [0, 1, 2]
    assert (run / "metrics.jsonl").read_text().splitlines()[0] == first  # round 0 kept, not re-run
