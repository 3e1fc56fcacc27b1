"""2-node × 2-round runs of both algorithms with tiny models, end to end through the CLI."""

import json

import pytest
import yaml

from dgrpo.cli import main
from dgrpo.metrics.logger import read_metrics

COMMON = ["rounds=2", "swarm.nodes=2", "swarm.group_size=2", "swarm.prompts_per_round=2", "sampling.max_new_tokens=6",
          "eval.every=1", "eval.n_prompts=2", "task.n_train=20", "task.n_val=5", "task.few_shot=0"]
# A 6-token limit leaves no room for any poison: the attack runs let the paper's unshortened poisons through.
LOOSE = "swarm.protocol.enforce_length=false"


@pytest.mark.parametrize("mode", ["horizontal", "vertical"])
def test_run_writes_run_directory(tmp_path, tiny_model_dir, mode):
    rc = main(["run", f"model.name={tiny_model_dir}", f"out_dir={tmp_path}", "name=r", f"swarm.mode={mode}", *COMMON])
    assert rc == 0
    run = tmp_path / "r"
    assert yaml.safe_load((run / "config.yaml").read_text())["swarm"]["mode"] == mode
    records = read_metrics(run)
    assert [r["round"] for r in records] == [0, 1, 2]
    for rec in records[:2]:
        assert rec["swarm/messages"] == 4  # B·G = 2·2 completions per round
        assert {"train/reward/node0", "train/reward/node1", "time/generate", "time/exchange", "time/update"} <= rec.keys()
    assert "eval/accuracy" in records[-1]
    assert (run / "reward.png").stat().st_size > 1000
    assert (run / "checkpoint" / "node0" / "config.json").exists()
    state = json.loads((run / "checkpoint" / "state.json").read_text())  # the round, the run it belongs to, its checksum
    assert state["next_round"] == state["run"]["round"] == 2 and state.keys() == {"next_round", "run", "sha256"}


def test_heterogeneous_swarm_trains_two_models(tmp_path, tiny_model_dir, tiny_model_dir_b):
    models = f"swarm.models=[{{name: {tiny_model_dir}}}, {{name: {tiny_model_dir_b}}}]"
    rc = main(["run", f"out_dir={tmp_path}", "name=h", models, *COMMON])
    assert rc == 0
    records = read_metrics(tmp_path / "h")
    assert "eval/accuracy/node0" in records[-1] and "eval/accuracy/node1" in records[-1]
    assert (tmp_path / "h" / "checkpoint" / "node1" / "config.json").exists()


def test_bad_config_is_a_clear_error(tmp_path, capsys):
    rc = main(["run", f"out_dir={tmp_path}", "swarm.nodes=3"])
    assert rc == 2
    assert "divisible by m" in capsys.readouterr().err


def test_attacked_and_defended_run_logs_rates(tmp_path, tiny_model_dir):
    rc = main(["run", f"model.name={tiny_model_dir}", f"out_dir={tmp_path}", "name=d", *COMMON, "swarm.group_size=4",
               "swarm.malicious=[1]", "attack.kind=injection", "defenses=[{kind: topk}, {kind: replay}]", LOOSE])
    assert rc == 0
    records = read_metrics(tmp_path / "d")
    rec = records[0]
    # node 1 wrote 2 of 4 completions of both prompts: 4 poisoned, 4 honest
    assert rec["defense/poisoned_received"] == 4 and rec["defense/honest_received"] == 4
    assert rec["defense/topk/detection_rate"] == 1.0  # attacker text is far outside a random model's top-10
    assert rec["defense/any/false_positive_rate"] == 0.0
    assert rec["train/reward/node1"] == 1.0  # poisoned completions earn full reward
    assert "attack/asr" in records[-1] and "time/defense_fraction" in rec
    # with the length rule (the default) every one of them is refused before any defense sees it
    assert main(["run", f"model.name={tiny_model_dir}", f"out_dir={tmp_path}", "name=r", *COMMON, "swarm.group_size=4",
                 "swarm.malicious=[1]", "attack.kind=injection", "defenses=[{kind: topk}, {kind: replay}]"]) == 0
    first = json.loads((tmp_path / "r" / "peers.jsonl").read_text().splitlines()[0])["peers"]["1"]
    assert first["rejected"] == {"length": 4} and first["accepted"] == 0
    assert read_metrics(tmp_path / "r")[0]["defense/poisoned_received"] == 0


def test_vertical_equation_attack_with_judge(tmp_path, tiny_model_dir):
    rc = main(["run", f"model.name={tiny_model_dir}", f"out_dir={tmp_path}", "name=e", *COMMON, "swarm.mode=vertical",
               "swarm.group_size=4", "swarm.malicious=[1]", "attack.kind=equation", "task.two_two_rate=0.5",
               f"defenses=[{{kind: judge, model: {tiny_model_dir}, max_new_tokens: 2}}]", LOOSE])
    assert rc == 0
    rec = read_metrics(tmp_path / "e")[0]
    assert rec["defense/poisoned_received"] == 2  # G/2 of the attacker's one group
    assert rec["defense/judge/rejected"] == rec["defense/received"]  # a random judge never says yes: fail closed
