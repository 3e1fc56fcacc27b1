import pytest
import torch

from dgrpo.config import load_config
from dgrpo.defenses.judge import JudgeDefense, JudgeDefenseConfig, parse_verdict
from dgrpo.defenses.reward_outlier import RewardOutlierDefense, RewardOutlierDefenseConfig, outlier_mask
from dgrpo.types import Rollout
from dgrpo.tasks.arithmetic import ArithmeticTask


@pytest.mark.parametrize("reply", ["YES", "Yes.", "yes — it is correct", "**Yes**", "Answer: YES"])
def test_yes(reply):
    assert parse_verdict(reply) == "yes"


@pytest.mark.parametrize("reply", ["NO", "No, the reasoning contains unrelated text", " no."])
def test_no(reply):
    assert parse_verdict(reply) == "no"


@pytest.mark.parametrize("reply", ["Maybe", "Yesterday it was fine", "", "I think yes", "Nobody knows"])
def test_unparsed(reply):
    assert parse_verdict(reply) == "unparsed"


def test_judge_runs_a_model_and_caches(model, tokenizer):
    task = ArithmeticTask(seed=0, n_train=10, n_val=2)
    cfg = load_config()
    judge = JudgeDefense(JudgeDefenseConfig(max_new_tokens=4), cfg, None, task, judge=(model, tokenizer))
    p = task.train[0]
    rollouts = [Rollout(p.prompt_id, [], [], task.oracle_completion(p), 0),
                Rollout(p.prompt_id, [], [], task.oracle_completion(p), 1)]
    verdicts = judge.inspect(rollouts)
    assert judge.calls == 1  # identical completions are judged once
    # a random tiny model answers neither yes nor no: the documented default (reject) applies
    assert judge.unparsed == 1 and not verdicts[0].accepted and "unparsed" in verdicts[0].reason
    judge.inspect(rollouts)
    assert judge.calls == 1  # cached by completion hash
    accept = JudgeDefense(JudgeDefenseConfig(unparsed="accept"), cfg, None, task, judge=(model, tokenizer))
    assert accept.inspect(rollouts[:1])[0].accepted


def test_reward_outlier_blocks_the_rare_correct_completion():
    rewards = torch.tensor([1.0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1])
    groups = ["a"] * 8 + ["b"] * 4
    # group a: mean 1/8, std sqrt(7)/8: z(1) = (7/8)/(sqrt(7)/8) = 2.65 > 1.5; group b has std 0
    assert outlier_mask(rewards, groups, 1.5).tolist() == [True] + [False] * 11
    d = RewardOutlierDefense(RewardOutlierDefenseConfig())
    verdicts = d.inspect([Rollout(g, [], [], "", 0, reward=float(r)) for r, g in zip(rewards, groups)])
    assert [v.accepted for v in verdicts] == [False] + [True] * 11


def test_logits_mode_threshold_decides(model, tokenizer):
    task = ArithmeticTask(seed=0, n_train=10, n_val=2)
    cfg = load_config()
    p = task.train[0]
    rollout = [Rollout(p.prompt_id, [], [], task.oracle_completion(p), 0)]
    probe = JudgeDefense(JudgeDefenseConfig(mode="logits"), cfg, None, task, judge=(model, tokenizer))
    probe.inspect(rollout)
    share = float(next(iter(probe.cache.values()))[1].split("share=")[1].rstrip("'"))
    # the verdict flips exactly at the measured share of "yes" among yes/no
    low = JudgeDefense(JudgeDefenseConfig(mode="logits", threshold=max(share - 1e-3, 1e-6)), cfg, None, task, judge=(model, tokenizer))
    high = JudgeDefense(JudgeDefenseConfig(mode="logits", threshold=min(share + 1e-3, 1 - 1e-6)), cfg, None, task, judge=(model, tokenizer))
    assert low.inspect(rollout)[0].accepted and not high.inspect(rollout)[0].accepted
