"""Validation of the honest policies, and the round record built from what each policy did."""

import json
from types import SimpleNamespace

import pytest

from dgrpo.config import load_config
from dgrpo.policy.sampling import completion_seed
from dgrpo.rewards.format import format_reward
from dgrpo.training.build import build_run
from dgrpo.training.evaluate import EVAL_ROUND, evaluate
from dgrpo.training.records import PolicyReport, defense_record, round_record
from dgrpo.types import Rollout, Verdict


@pytest.fixture()
def run(tmp_path, tiny_model_dir):
    cfg = load_config(overrides=[f"model.name={tiny_model_dir}", f"out_dir={tmp_path}", "name=e", "swarm.nodes=2",
                                 "swarm.malicious=[1]", "attack.kind=injection", "task.n_train=10", "task.n_val=5",
                                 "task.few_shot=0", "eval.n_prompts=3", "sampling.max_new_tokens=8", "seed=4"])
    return build_run(cfg)


def test_evaluation_scores_seeded_completions_of_the_first_validation_prompts(run, tmp_path):
    policy, task = run.swarm.honest_policies[0], run.task
    problems = task.val[:3]
    outs = policy.generate(task, problems, [completion_seed(4, EVAL_ROUND, 0, p.prompt_id, 0) for p in problems])
    texts = [t for _, t in outs]
    rec = evaluate(run, 2, tmp_path / "samples.jsonl")
    assert rec["eval/accuracy"] == sum(task.reward(t, p) >= 1.0 for t, p in zip(texts, problems)) / 3
    assert rec["eval/format_rate"] == sum(format_reward("<think>" + t) for t in texts) / 3
    assert rec["eval/completion_tokens"] == sum(len(ids) for ids, _ in outs) / 3
    asr = run.swarm.attacks[1].evaluate(texts, problems, task)["asr"]  # injection: every validation prompt is a target
    assert rec["attack/asr"] == asr and "time/eval" in rec
    lines = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert [(x["round"], x["node"], x["completion"]) for x in lines] == [(2, 0, t) for t in texts]


def test_evaluation_at_another_temperature_leaves_the_swarms_sampling_alone(run):
    policy = run.swarm.honest_policies[0]
    before = policy.sampling
    greedy = run.cfg.model_copy(update={"eval": run.cfg.eval.model_copy(update={"temperature": 0.0})})
    rec = evaluate(SimpleNamespace(cfg=greedy, task=run.task, swarm=run.swarm, run_dir=run.run_dir), 0)
    assert policy.sampling is before
    policy.sampling = before.__class__(before.top_k, 0.0, before.max_new_tokens)  # greedy: the seed plays no part
    texts = [t for _, t in policy.generate(run.task, run.task.val[:3], [0, 1, 2])]
    policy.sampling = before
    assert rec["eval/format_rate"] == sum(format_reward("<think>" + t) for t in texts) / 3


def test_greedy_intervals_and_drift(run):
    """Greedy accuracy from temperature-0 completions, Wilson intervals over eval/n, and the drift
    metrics: 0 KL on the start weights themselves, then the log-likelihood drop after a change."""
    import torch

    from dgrpo.metrics.intervals import wilson
    from dgrpo.policy.scoring import group_logits

    policy, task = run.swarm.honest_policies[0], run.task
    problems = task.val[:3]
    before = policy.sampling
    policy.sampling = before.__class__(before.top_k, 0.0, before.max_new_tokens)
    greedy = [t for _, t in policy.generate(task, problems, [0, 1, 2])]
    policy.sampling = before
    rec = evaluate(run, 0)
    assert rec["eval/n"] == 3
    assert rec["eval/greedy/accuracy"] == sum(task.reward(t, p) >= 1.0 for t, p in zip(greedy, problems)) / 3
    for key in ("eval/accuracy", "eval/format_rate", "eval/greedy/accuracy"):
        assert (rec[f"{key}_ci95_low"], rec[f"{key}_ci95_high"]) == wilson(rec[key] * 3, 3)
    assert rec["eval/kl_to_start"] == pytest.approx(0.0, abs=1e-6)  # the reference was written by these weights
    ref = json.loads((run.run_dir / "eval_reference" / "node0.json").read_text())
    assert [r["prompt_id"] for r in ref] == [p.prompt_id for p in problems if True][: len(ref)]

    with torch.no_grad():  # move the weights; the drift is the mean log-prob drop on the reference
        for param in policy.model.parameters():
            param.add_(0.05 * torch.randn_like(param))
    expected_kl, expected_ent, n = 0.0, 0.0, 0
    with torch.no_grad():
        for item, p in zip(ref, problems):
            ids = item["completion_ids"]
            logp = torch.log_softmax(group_logits(policy.model, policy.prompt_ids(task, p), [ids],
                                                  policy.tokenizer.pad_token_id)[0, : len(ids)], -1)
            for t, tok in enumerate(ids):
                expected_kl += item["logp"][t] - float(logp[t, tok])
                expected_ent += float(-(logp[t].exp() * logp[t]).sum())
            n += len(ids)
    later = evaluate(run, 1)
    assert later["eval/kl_to_start"] == pytest.approx(expected_kl / n, rel=1e-4)
    assert later["eval/entropy"] == pytest.approx(expected_ent / n, rel=1e-4)
    assert later["eval/kl_to_start"] > 0.01


def _rollout(sender, reward, label="honest", rejected_by=(), text="x"):
    return Rollout("p", [1], [5, 2], text, sender, reward=reward, label=label,
                   verdicts=[Verdict(False, d) for d in rejected_by])


def test_round_record_by_hand():
    cfg = load_config(overrides=["swarm.nodes=3", "swarm.group_size=3", "swarm.malicious=[2]", "attack.kind=injection",
                                 "defenses=[{kind: topk}, {kind: replay}]"])
    policy = object()
    fake = SimpleNamespace(cfg=cfg, task=SimpleNamespace(completion_prefix="<think>"),
                           swarm=SimpleNamespace(protocol=None, trained={0: policy}, policies={0: policy}, last_received={}),
                           transport=SimpleNamespace(rejected=[], peer_views={}, is_main=False))
    rollouts = [_rollout(0, 1.0, text="a</think><answer>1</answer>"), _rollout(1, 0.0),
                _rollout(2, 1.0, "poisoned", ("topk", "replay")), _rollout(2, 1.0, "poisoned", ("replay",)),
                _rollout(1, 0.5, rejected_by=("topk",))]
    report = PolicyReport(rollouts, invalid=[("m", "size")], reward_seconds=0.25, defense_times={"topk": 0.5, "replay": 1.5})
    rec = round_record(fake, 7, {0: report}, {"round": 4.0})
    assert rec["round"] == 7 and rec["swarm/messages"] == 6 and rec["swarm/invalid"] == 1
    assert (rec["train/reward/node0"], rec["train/reward/node1"], rec["train/reward/node2"]) == (1.0, 0.25, 1.0)
    assert rec["train/reward_honest"] == 1.5 / 3 and rec["train/format_rate"] == 1 / 3
    assert rec["time/defense"] == 2.0 and rec["time/defense_fraction"] == 0.5 and rec["time/reward"] == 0.25
    assert rec["defense/topk/detection_rate"] == 0.5 and rec["defense/replay/detection_rate"] == 1.0
    assert rec["defense/topk/false_positive_rate"] == 1 / 3 and rec["defense/any/rejected"] == 3


def test_a_poison_claiming_an_honest_sender_is_not_the_honest_nodes_reward():
    """A forged message (the attacker's poison under node 0's id) or an honest message re-sent by the attacker
    counts for the claimed sender's per-node reward (what a receiver sees) but not for the honest nodes' own."""
    cfg = load_config(overrides=["swarm.nodes=3", "swarm.group_size=3", "swarm.malicious=[2]", "attack.kind=forged_identity"])
    policy = object()
    fake = SimpleNamespace(cfg=cfg, task=SimpleNamespace(completion_prefix="<think>"),
                           swarm=SimpleNamespace(protocol=None, trained={0: policy}, policies={0: policy}, last_received={}),
                           transport=SimpleNamespace(rejected=[], peer_views={}, is_main=False))
    rollouts = [_rollout(0, 0.0), _rollout(1, 0.5), _rollout(0, 1.0, "poisoned", text="a</think><answer>1</answer>"),
                _rollout(1, 1.0, "poisoned")]
    rec = round_record(fake, 0, {0: PolicyReport(rollouts)}, {"round": 1.0})
    assert (rec["train/reward/node0"], rec["train/reward/node1"]) == (0.5, 0.75)  # as claimed
    assert rec["train/reward_honest"] == 0.25 and rec["train/format_rate"] == 0.0  # the two honest rollouts only


def test_defense_record_without_poison_has_no_detection_rate():
    rec = defense_record([_rollout(0, 1.0), _rollout(1, 0.0, rejected_by=("judge",))])
    assert rec == {"defense/received": 2, "defense/judge/rejected": 1, "defense/judge/false_positive_rate": 0.5,
                   "defense/any/rejected": 1, "defense/any/false_positive_rate": 0.5,
                   "defense/poisoned_received": 0, "defense/honest_received": 2}


@pytest.mark.parametrize("temperature", [None, 0.7])
def test_one_stream_gives_what_the_separate_calls_gave(run, temperature):
    """eval_stream asks once (sampled, targets, greedy; refilling rows) for what evaluation used to
    ask in three calls: every completion is the one its own call gives."""
    from dgrpo.training.evaluate import eval_sampling, eval_stream

    cfg = run.cfg.model_copy(update={"eval": run.cfg.eval.model_copy(update={"temperature": temperature})})
    policy, task = run.swarm.honest_policies[0], run.task
    problems, targets = list(task.val[:3]), list(task.val[1:5])  # targets other than the problems

    def alone(batch, temp=None):
        seeds = [completion_seed(cfg.seed, EVAL_ROUND, 0, p.prompt_id, 0) for p in batch]
        with eval_sampling(policy, cfg, temperature=temp):
            return policy.generate(task, batch, seeds)

    sampled, target_texts, greedy = eval_stream(policy, cfg, task, problems, targets, 0, greedy=True)
    assert sampled == alone(problems)
    assert target_texts == [t for _, t in alone(targets)]
    assert greedy == alone(problems, 0.0)
    assert [ids for ids, _ in sampled] != [ids for ids, _ in greedy]  # the stream really mixed two temperatures
    same, texts, none = eval_stream(policy, cfg, task, problems, problems, 0, greedy=False)
    assert (same, texts, none) == (sampled, [t for _, t in sampled], None)


def test_the_first_evaluation_takes_the_reference_scores_from_its_sampling(run, monkeypatch):
    """The evaluation that writes the drift reference scores nothing again: the log-probs it stores
    come from the logits that sampled the completions, and equal one forward pass of prompt +
    completion (computed here) to float32 rounding. A later evaluation scores the reference behind
    its stream's prefill, not in a pass of its own (its values: test_greedy_intervals_and_drift)."""
    import torch

    from dgrpo.training import evaluate as evaluate_mod

    calls = []
    real = evaluate_mod.completion_stats
    monkeypatch.setattr(evaluate_mod, "completion_stats", lambda *a, **k: calls.append(len(a[1])) or real(*a, **k))
    policy, task = run.swarm.honest_policies[0], run.task
    first = evaluate(run, 0)
    assert calls == [] and first["eval/kl_to_start"] == 0.0
    ref = json.loads((run.run_dir / "eval_reference" / "node0.json").read_text())
    by_id = {p.prompt_id: p for p in task.val}
    ent_sum, n = 0.0, 0
    policy.model.eval()
    for item in ref:
        prompt, ids = policy.prompt_ids(task, by_id[item["prompt_id"]]), item["completion_ids"]
        with torch.no_grad():
            logits = policy.model(input_ids=torch.tensor([prompt + ids])).logits[0, len(prompt) - 1 : -1]
        logp = torch.log_softmax(logits.float(), -1)
        expected = logp.gather(-1, torch.tensor(ids)[:, None]).squeeze(-1)
        torch.testing.assert_close(torch.tensor(item["logp"]), expected, rtol=0, atol=1e-5)
        ent_sum, n = ent_sum + float(-(logp.exp() * logp).sum()), n + len(ids)
    assert first["eval/entropy"] == pytest.approx(ent_sum / n, rel=1e-5)
    later = evaluate(run, 1)
    assert calls == [] and later["eval/kl_to_start"] == pytest.approx(0.0, abs=1e-5)
    assert later["eval/entropy"] == pytest.approx(first["eval/entropy"], rel=1e-5)


def test_a_reference_with_prompts_the_evaluation_does_not_sample_is_scored_apart(run, monkeypatch):
    """A reference written on 3 prompts, evaluated later on 2 (eval.n_prompts lowered on resume):
    its third prompt is not in the stream, so the reference is scored by a pass of its own."""
    from dgrpo.training import evaluate as evaluate_mod

    first = evaluate(run, 0)
    calls = []
    real = evaluate_mod.completion_stats
    monkeypatch.setattr(evaluate_mod, "completion_stats", lambda *a, **k: calls.append(len(a[1])) or real(*a, **k))
    fewer = run.cfg.model_copy(update={"eval": run.cfg.eval.model_copy(update={"n_prompts": 2})})
    later = evaluate(SimpleNamespace(cfg=fewer, task=run.task, swarm=run.swarm, run_dir=run.run_dir), 1)
    ref = json.loads((run.run_dir / "eval_reference" / "node0.json").read_text())
    assert len(ref) == 3 and calls == [3]
    assert later["eval/kl_to_start"] == pytest.approx(0.0, abs=1e-5)
    assert later["eval/entropy"] == pytest.approx(first["eval/entropy"], rel=1e-5)


def test_a_reference_of_another_task_is_one_clear_error(run):
    from dgrpo.errors import CheckpointError

    evaluate(run, 0)
    path = run.run_dir / "eval_reference" / "node0.json"
    ref = json.loads(path.read_text())
    ref[0]["prompt_id"] = "no-such-prompt"
    path.write_text(json.dumps(ref))
    with pytest.raises(CheckpointError, match="prompt no-such-prompt of the drift reference is not a validation prompt"):
        evaluate(run, 1)
