"""Ensemble of swarms with a tiny model: group configs, the tolerance record and one full run."""

import json

import pytest

from dgrpo.cli import main
from dgrpo.config import ConfigError, load_config
from dgrpo.recipes.ensemble import group_config, tolerance_record
from dgrpo.metrics.logger import read_metrics
from dgrpo.robust.ensemble import split_groups

COMMON = ["rounds=2", "swarm.group_size=4", "swarm.prompts_per_round=2", "sampling.max_new_tokens=6",
          "eval.every=1", "eval.n_prompts=3", "task.n_train=20", "task.n_val=5", "task.few_shot=0"]


def test_group_configs_hold_their_own_nodes_and_attack(tmp_path):
    cfg = load_config(overrides=["swarm.nodes=4", "swarm.malicious=[1]", "attack.kind=injection", "ensemble.groups=3",
                                 "seed=3"])
    groups = split_groups(range(4), 3)
    assert groups == [[0, 1], [2], [3]]
    g0, g1 = group_config(cfg, groups[0], 0, tmp_path), group_config(cfg, groups[1], 1, tmp_path)
    assert (g0.swarm.nodes, g0.swarm.malicious, g0.attack.kind) == (2, [1], "injection")
    assert (g1.swarm.nodes, g1.swarm.malicious, g1.attack.kind) == (1, [], "none")
    assert g0.seed != g1.seed and g0.task.seed == g1.task.seed == 3  # same validation split everywhere
    assert g0.ensemble is None and g0.name == "group0"


def test_group_configs_of_a_heterogeneous_swarm_keep_each_members_model(tmp_path):
    models = "swarm.models=[{name: a, lr: 0.1}, {name: b}, {name: c, lora_rank: 4}, {name: d}]"
    cfg = load_config(overrides=["swarm.nodes=4", models, "ensemble.groups=3"])
    groups = split_groups(range(4), 3)  # [[0, 1], [2], [3]], as above
    configs = [group_config(cfg, members, g, tmp_path) for g, members in enumerate(groups)]
    assert [[(m.name, m.lr, m.lora_rank) for m in c.swarm.models] for c in configs] == [
        [("a", 0.1, None), ("b", None, None)], [("c", None, 4)], [("d", None, None)]]


def test_tolerance_record():
    groups = split_groups(range(6), 3)
    assert tolerance_record(groups, [1]) == {"ensemble/K": 3, "ensemble/tolerance": 1, "ensemble/corrupted_groups": 1,
                                             "ensemble/tolerated": True}
    rec = tolerance_record(groups, [1, 5])
    assert rec["ensemble/corrupted_groups"] == 2 and rec["ensemble/tolerated"] is False
    assert tolerance_record(split_groups(range(5), 5), [0, 4])["ensemble/tolerated"] is True  # 2 of 5 groups


def test_ensemble_config_errors():
    with pytest.raises(ConfigError, match="no honest node"):
        load_config(overrides=["swarm.nodes=4", "swarm.malicious=[3]", "attack.kind=injection", "ensemble.groups=4"])
    with pytest.raises(ConfigError, match="divisible by every group size"):
        # groups of 3 and 2 nodes: G = 10 suits the whole swarm (5 nodes) but not the group of 3
        load_config(overrides=["swarm.nodes=5", "swarm.group_size=10", "ensemble.groups=2"])
    with pytest.raises(ConfigError, match="at most one"):
        load_config(overrides=["ensemble.groups=2", "hardening.steps=1"])


@pytest.mark.slow
def test_ensemble_command_trains_groups_votes_and_compares(tmp_path, tiny_model_dir):
    rc = main(["ensemble", f"model.name={tiny_model_dir}", f"out_dir={tmp_path}", "name=e", "swarm.nodes=4",
               "swarm.malicious=[1]", "attack.kind=injection", "ensemble.groups=3", *COMMON,
               "swarm.protocol.enforce_length=false"])  # (the tiny limit leaves no room for a poison)
    assert rc == 0
    run = tmp_path / "e"
    records = read_metrics(run)
    assert [r["round"] for r in records] == [0, 1, 2]
    for rec in records:
        assert rec["ensemble/tolerance"] == 1 and rec["ensemble/tolerated"] is True
        assert {"ensemble/accuracy", "ensemble/asr_vote", "group0/asr", "group2/accuracy"} <= rec.keys()
    assert [r["round"] for r in read_metrics(run / "group0")] == [0, 1]
    assert read_metrics(run / "group0")[0]["train/reward/node1"] == 1.0  # the attacker's full-reward poison
    assert read_metrics(run / "group1")[0]["swarm/messages"] == 8  # B·G = 2·4, one node
    summary = json.loads((run / "summary.json").read_text())
    assert summary["tolerance"] == 1 and "asr" in summary["single"] and "asr_vote" in summary["ensemble"]
    assert json.loads((run / "groups.json").read_text())["groups"] == [[0, 1], [2], [3]]
    assert (run / "ensemble.png").stat().st_size > 1000


@pytest.mark.slow
def test_an_ensemble_run_resumes_to_the_straight_runs_metrics(tmp_path, tiny_model_dir, monkeypatch):
    from dgrpo.recipes import horizontal

    args = ["ensemble", f"model.name={tiny_model_dir}", f"out_dir={tmp_path}", "swarm.nodes=4", "swarm.malicious=[1]",
            "attack.kind=injection", "ensemble.groups=2", "grpo.lr=0.01", "checkpoint_every=1", *COMMON, "rounds=3",
            "ensemble.baseline=true"]
    assert main([*args, "name=straight"]) == 0
    one_round, calls = horizontal.one_round, []

    def crash_in_round_2(run, r):  # group 0 finishes round 2, group 1 crashes in it
        calls.append(r)
        if calls.count(2) == 2:
            raise RuntimeError("power cut")
        return one_round(run, r)

    monkeypatch.setattr(horizontal, "one_round", crash_in_round_2)
    with pytest.raises(RuntimeError, match="power cut"):
        main([*args, "name=crash"])
    monkeypatch.setattr(horizontal, "one_round", one_round)
    assert (tmp_path / "crash" / "checkpoint" / "state.json").exists() and not (tmp_path / "crash" / "single").exists()
    assert main(["resume", str(tmp_path / "crash")]) == 0

    def same(a, b):
        strip = lambda recs: [{k: v for k, v in r.items() if not k.startswith("time/")} for r in recs]
        return strip(read_metrics(a)) == strip(read_metrics(b))

    for part in ("", "group0", "group1", "single"):
        assert same(tmp_path / "crash" / part, tmp_path / "straight" / part), part
    assert [r["round"] for r in read_metrics(tmp_path / "crash")] == [0, 1, 2, 3]
    rounds = lambda path: [json.loads(line)["round"] for line in path.read_text().splitlines()]
    for g in ("group0", "group1"):  # group 0 logged its peers of round 2 before the crash: dropped, logged once
        assert rounds(tmp_path / "crash" / g / "peers.jsonl") == rounds(tmp_path / "straight" / g / "peers.jsonl") == [0, 1, 2], g
        assert rounds(tmp_path / "crash" / g / "rosters.jsonl") == [0, 2] and rounds(tmp_path / "straight" / g / "rosters.jsonl") == [0]
    assert json.loads((tmp_path / "crash" / "summary.json").read_text()) == json.loads((tmp_path / "straight" / "summary.json").read_text())
