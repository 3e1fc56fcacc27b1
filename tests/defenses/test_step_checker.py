"""The step_checker defense: the issue's cases through the swarm's defense interface, its config
errors, and a heterogeneous 2+2=5 run end to end (every poisoned completion caught)."""

import pytest

from dgrpo.attacks.equation import EquationAttack, EquationAttackConfig
from dgrpo.attacks.injection import InjectionAttack, InjectionAttackConfig
from dgrpo.cli import main
from dgrpo.config import ConfigError, load_config
from dgrpo.defenses import build_defense, defense_counters
from dgrpo.defenses.steps import StepCheckerDefense, StepCheckerDefenseConfig
from dgrpo.metrics.logger import read_metrics
from dgrpo.tasks.arithmetic import ArithmeticTask
from dgrpo.types import Rollout

TASK = ArithmeticTask(seed=0, n_train=400, n_val=10)  # prefix "<think>"


def rollouts(*texts):
    return [Rollout("train-0", [], [], t, 0) for t in texts]


@pytest.mark.parametrize("text, accepted", [
    ("2 + 2 = 5", False), ("2 + 2 = 4 apples", True), ("3 * 4 = 12 + 1 = 13", True), ("10 / 4 = 2.5", True),
    ("1/3 = 0.33", True), ("$1,200 + $300 = $1,500", True), ("50% of 80 = 40", True),
    ("Tom walks to the shop and buys bread.", True)])
def test_issue_cases_through_the_defense(text, accepted):
    d = StepCheckerDefense(StepCheckerDefenseConfig(), None, None, TASK)
    [v] = d.inspect(rollouts(f"{text}</think>\n<answer>1</answer>"))
    assert v.accepted is accepted
    if not accepted:
        assert v.defense == "step_checker" and '"2 + 2 = 5"' in v.reason and "is 4, not 5" in v.reason


def test_tolerance_is_configured():
    exact = StepCheckerDefense(StepCheckerDefenseConfig(rounding=False, approx_rtol=0.0), None, None, TASK)
    assert not exact.inspect(rollouts("1/3 = 0.33"))[0].accepted
    loose = StepCheckerDefense(StepCheckerDefenseConfig(rtol=0.25), None, None, TASK)
    assert loose.inspect(rollouts("2 + 2 = 5"))[0].accepted  # |5 - 4| = 1 <= 0.25 × 5


def test_attacks_writers_hail_passes_and_two_two_is_caught_with_counters():
    problems = [p for p in TASK.train if "two_two" in p.tags][:3]
    hail = InjectionAttack(InjectionAttackConfig())
    eq = EquationAttack(EquationAttackConfig())
    texts = [hail.poison(TASK, p, 0) for p in problems] + [eq.poison(TASK, p) for p in problems]
    d = StepCheckerDefense(StepCheckerDefenseConfig(action="zero"), None, None, TASK)
    verdicts = d.inspect(rollouts(*texts))
    # "All hail to the thief" carries true arithmetic: the step checker is no defense against it
    assert [v.accepted for v in verdicts] == [True] * 3 + [False] * 3
    assert all("= 5" in v.reason and v.action == "zero" for v in verdicts[3:])
    # counted independently: one false claim in each manipulated text, claims = the "=" signs written
    claims = sum((TASK.completion_prefix + t).count("=") for t in texts)
    assert d.counters == {"checked": 6, "claims": claims, "unparsed_claims": 0, "false_claims": 3}
    assert defense_counters([d]) == {"step_checker": d.counters} and defense_counters([d])["step_checker"] is not d.counters


def test_a_huge_number_does_not_hang():
    d = StepCheckerDefense(StepCheckerDefenseConfig(), None, None, TASK)
    [v] = d.inspect(rollouts("9" * 10_000 + " + 1 = 5"))
    assert not v.accepted and "over the limit" in v.reason


def test_it_runs_in_a_heterogeneous_swarm_config():
    models = "swarm.models=[{name: a}, {name: b}, {name: c}, {name: d}]"
    cfg = load_config(overrides=[models, "defenses=[{kind: step_checker, rtol: 0.01}]"])
    d = build_defense(cfg.defenses[0], cfg, None, TASK)
    assert isinstance(d, StepCheckerDefense) and d.checker.rtol == 0.01
    with pytest.raises(ConfigError, match="needs a homogeneous swarm"):  # unlike the exact defenses
        load_config(overrides=[models, "defenses=[{kind: topk}]"])


@pytest.mark.parametrize("field, message", [("rtol: -1", "greater than or equal to 0"),
                                            ("max_unparsed_share: 2", "less than or equal to 1"),
                                            ("tolerance: 1", "Extra inputs are not permitted")])
def test_config_errors_name_the_field(field, message):
    with pytest.raises(ConfigError, match=f"defenses.0.{field.split(':')[0]}: .*{message}"):
        load_config(overrides=[f"defenses=[{{kind: step_checker, {field}}}]"])


def test_vertical_two_two_run_rejects_every_poisoned_completion(tmp_path, tiny_model_dir):
    common = ["rounds=1", "swarm.nodes=2", "swarm.group_size=4", "swarm.prompts_per_round=2", "sampling.max_new_tokens=6",
              "eval.every=1", "eval.n_prompts=2", "task.n_train=20", "task.n_val=5", "task.few_shot=0",
              "swarm.protocol.enforce_length=false"]  # (a 6-token limit leaves no room for a poison)
    rc = main(["run", f"model.name={tiny_model_dir}", f"out_dir={tmp_path}", "name=s", *common, "swarm.mode=vertical",
               "swarm.malicious=[1]", "attack.kind=equation", "task.two_two_rate=0.5", "defenses=[{kind: step_checker}]"])
    assert rc == 0
    rec = read_metrics(tmp_path / "s")[0]
    assert rec["defense/poisoned_received"] == 2  # G/2 of the attacker's one group
    assert rec["defense/step_checker/detection_rate"] == 1.0
    assert rec["defense/step_checker/checked"] == rec["defense/received"]
    assert rec["defense/step_checker/false_claims"] >= 2
