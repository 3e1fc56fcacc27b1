import pytest
import torch

from dgrpo.config import load_config
from dgrpo.defenses.judge import JudgeDefense, JudgeDefenseConfig
from dgrpo.defenses.reward_outlier import RewardOutlierDefense, RewardOutlierDefenseConfig, outlier_mask
from dgrpo.types import Rollout
from dgrpo.tasks.arithmetic import ArithmeticTask


def test_judge_runs_a_model_and_caches(model, tokenizer):
    task = ArithmeticTask(seed=0, n_train=10, n_val=2)
    cfg = load_config()
    judge = JudgeDefense(JudgeDefenseConfig(max_new_tokens=4), cfg, None, task, judge=(model, tokenizer))
    p = task.train[0]
    rollouts = [Rollout(p.prompt_id, [], [], task.oracle_completion(p), 0),
                Rollout(p.prompt_id, [], [], task.oracle_completion(p), 1)]
    verdicts = judge.inspect(rollouts)
    # identical completions are judged once; a random tiny model answers neither yes nor no, which is
    # counted and gets the documented default (reject)
    assert judge.counters == {"calls": 1, "yes": 0, "no": 0, "unparseable": 1, "failed": 0}
    assert [v.accepted for v in verdicts] == [False, False] and "unparseable (rejected by on_error)" in verdicts[0].reason
    judge.inspect(rollouts)
    assert judge.counters["calls"] == 2  # an unparseable judgment is not cached: it is asked again
    accept = JudgeDefense(JudgeDefenseConfig(on_error="accept"), cfg, None, task, judge=(model, tokenizer))
    assert accept.inspect(rollouts[:1])[0].accepted and accept.counters["unparseable"] == 1


def test_local_generate_reads_the_models_greedy_reply(model, tokenizer):
    """The verdict text is the model's own greedy continuation of the judge prompt, decoded here."""
    from dgrpo.policy.chat import encode_prompt
    from dgrpo.verify.judge import build_messages

    task = ArithmeticTask(seed=0, n_train=10, n_val=2)
    p = task.train[1]
    judge = JudgeDefense(JudgeDefenseConfig(max_new_tokens=3), load_config(), None, task, judge=(model, tokenizer))
    [v] = judge.inspect([Rollout(p.prompt_id, [], [], task.oracle_completion(p), 0)])
    ids = encode_prompt(tokenizer, build_messages(p.question, (task.completion_prefix + task.oracle_completion(p)).strip()))
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=3, pad_token_id=tokenizer.pad_token_id)
    expected = tokenizer.decode(out[0, len(ids):], skip_special_tokens=True).strip()
    assert f"{expected[:60]!r}" in v.reason


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
