"""Kinds from the user's own package, outside src/dgrpo (examples/mykinds): a task, an attack and a defense
named by import path, a rubric of TRL-style reward functions with every dataset column, and a system
prompt, all reached from a config and run by a swarm."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dgrpo import registry
from dgrpo.cli import main
from dgrpo.config import RunConfig, load_config
from dgrpo.errors import ConfigError, DataError
from dgrpo.metrics.logger import read_metrics
from dgrpo.tasks.dataset import DatasetTask

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
DATA = str(EXAMPLES / "mykinds" / "data" / "problems.jsonl")
RUBRIC = ("task.rewards=[{function: 'mykinds.rewards:correct'}, {function: 'mykinds.rewards:names_unit', weight: 0.5},"
          " {function: 'mykinds.rewards:brevity', weight: 0}]")




def _run(tmp_path, tiny_model_dir, *overrides) -> tuple[dict, dict]:
    assert main(["run", f"model.name={tiny_model_dir}", f"out_dir={tmp_path}", "name=x", "rounds=1", "swarm.nodes=2",
                 "swarm.group_size=4", "swarm.prompts_per_round=2", "sampling.max_new_tokens=64", "eval.n_prompts=2",
                 *overrides]) == 0
    return read_metrics(tmp_path / "x")


def test_attack_defense_and_rubric_from_the_users_package(mykinds, tmp_path, tiny_model_dir):
    first, final = _run(tmp_path, tiny_model_dir, "task.kind=dataset", f"task.path={DATA}", "task.n_val=4", "task.few_shot=0",
                        "task.columns.solution=solution", RUBRIC, "task.system_prompt=Count carefully.", "swarm.malicious=[1]",
                        "attack.kind=mykinds.attacks:Shout", "attack.poisoned_per_group=1",
                        "defenses=[{kind: 'mykinds.defenses:LengthCap', max_tokens: 12}]")
    assert first["defense/poisoned_received"] == 2 and first["defense/length_cap/detection_rate"] == 1.0  # > 12 tokens
    rubric = {k: v for k, v in first.items() if k.startswith("train/rubric/")}
    assert sorted(rubric) == ["train/rubric/brevity", "train/rubric/correct", "train/rubric/names_unit"]
    assert all(0 <= v <= 1 for v in rubric.values()) and "attack/asr" in final
    saved = yaml.safe_load((tmp_path / "x" / "config.yaml").read_text())  # the paths stay: a resume imports them again
    assert saved["attack"]["kind"] == "mykinds.attacks:Shout"
    assert saved["defenses"][0]["kind"] == "mykinds.defenses:LengthCap"
    assert RunConfig.model_validate(saved).attack.slogan == "ALL HAIL THE THIEF"


def test_a_task_from_the_users_package(mykinds, tmp_path, tiny_model_dir):
    cfg = load_config(overrides=["task.kind=mykinds.tasks:letters", "task.system_prompt=Spell it out."])
    task = registry.lookup("task", cfg.task.kind).builder(**cfg.task.model_dump(exclude={"kind"}))
    assert task.chat(task.train[0])[0] == {"role": "system", "content": "Spell it out."}
    assert task.reward(task.oracle_completion(task.val[0]), task.val[0]) == 1.0
    _, final = _run(tmp_path, tiny_model_dir, "task.kind=mykinds.tasks:letters")
    assert 0 <= final["eval/accuracy"] <= 1


def test_a_rubric_weighs_its_functions_and_logs_each(mykinds):
    task = DatasetTask(path=DATA, n_val=4, prefill_think=False, rewards=[
        {"function": "mykinds.rewards:correct"}, {"function": "mykinds.rewards:names_unit", "weight": 0.5},
        {"function": "mykinds.rewards:brevity", "weight": 0, "name": "short"}])
    p = task.train[:3]  # answers 16 (apples), 8 (pens), then p[2]
    texts = [f"<answer>{p[0].answer}</answer> apples", "<answer>99</answer> pens", "x" * 200]
    assert task.rewards(texts, p) == [1.0 + 0.5, 0.0 + 0.5, 0.0]  # brevity has weight 0: logged, not paid
    brevity = [1 - len(t) / 400 for t in texts]
    assert task.reward_metrics() == {"train/rubric/correct": 1 / 3, "train/rubric/names_unit": 2 / 3,
                                     "train/rubric/short": pytest.approx(sum(brevity) / 3)}
    assert task.reward_metrics() == {}  # cleared: each round logs its own batch
    assert task.reward(texts[0], p[0]) == 1.5 and task.reward_metrics() == {}  # one completion (evaluation): not logged


def test_what_the_users_code_gets_wrong_is_one_line(mykinds, tmp_path):
    with pytest.raises(ConfigError, match="cannot import 'mykinds.nothere'.*on PYTHONPATH"):
        load_config(overrides=["attack.kind=mykinds.nothere:Shout", "swarm.malicious=[1]"])
    with pytest.raises(ConfigError, match=r"mykinds.rewards registers no attack 'Shout'; decorate it with @dgrpo.registry.register"):
        load_config(overrides=["attack.kind=mykinds.rewards:Shout", "swarm.malicious=[1]"])
    with pytest.raises(ConfigError, match="must take TRL's keywords"):
        load_config(overrides=["task.kind=dataset", f"task.path={DATA}", "task.rewards=[{function: 'os.path:join'}]"])
    no_unit = tmp_path / "no_unit.jsonl"
    no_unit.write_text("\n".join(line for line in Path(DATA).read_text().splitlines()).replace('"unit"', '"kind"'))
    with pytest.raises(DataError, match=r"reward mykinds.rewards:names_unit cannot take the dataset's columns .*'unit'"):
        DatasetTask(path=str(no_unit), n_val=4, rewards=[{"function": "mykinds.rewards:names_unit"}])
    with pytest.raises(ConfigError, match="give `reward`.*or `rewards`.*not both"):
        load_config(overrides=["task.kind=dataset", f"task.path={DATA}", "task.reward=os.path:join", RUBRIC])


def _doc_command() -> list[str]:
    """The overrides of docs/architecture.md's "In your own package" command, as written there."""
    import re
    import shlex

    text = (EXAMPLES.parent / "docs" / "architecture.md").read_text()
    return shlex.split(re.search(r"`PYTHONPATH=examples dgrpo run (.*?)` \(an attack needs", text, re.S).group(1))


# The command's attack implements vertical mode's ``choose_prompts``: it claims both swarm modes. Node 1 of 2
# writes c=1 poisoned completion per group: horizontally in each of the 2 global groups (2), vertically in
# its one group of its own prompt (1); every poison (a letters solution ending with the slogan) is over the
# cap of 12 tokens.
@pytest.mark.parametrize("mode, poisoned", [("horizontal", 2), ("vertical", 1)])
def test_the_docs_own_package_command_runs_in_both_modes(mykinds, tmp_path, tiny_model_dir, mode, poisoned):
    args = _doc_command()
    assert args == ["attack.kind=mykinds.attacks:Shout", "swarm.malicious=[1]",
                    "defenses=[{kind: mykinds.defenses:LengthCap}]", "task.kind=mykinds.tasks:letters"]
    first, final = _run(tmp_path, tiny_model_dir, *args, f"swarm.mode={mode}", "attack.poisoned_per_group=1",
                        "defenses=[{kind: mykinds.defenses:LengthCap, max_tokens: 12}]")
    assert first["defense/poisoned_received"] == poisoned and first["defense/length_cap/detection_rate"] == 1.0
    assert "attack/asr" in final
