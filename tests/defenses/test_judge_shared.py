"""The in-process honest nodes of one swarm share a frozen judge's verdicts (defenses.base.share_verdicts).

Each node's judge must still give the verdict it would give alone: checked against a judge built apart
(the same weights passed in, so nothing is shared) on the same rollouts.
"""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from dgrpo.config import load_config
from dgrpo.defenses import defense_counters, share_verdicts
from dgrpo.defenses.judge import JudgeDefense, JudgeDefenseConfig
from dgrpo.recipes.swarm_round import round_metrics
from dgrpo.policy.loading import load_policy
from dgrpo.tasks.arithmetic import ArithmeticTask
from dgrpo.training.build import build_swarm, build_task
from dgrpo.training.records import PolicyReport
from dgrpo.types import Rollout

SMALL = ["threads=1", "swarm.nodes=3", "swarm.group_size=3", "swarm.prompts_per_round=3", "sampling.max_new_tokens=8",
         "eval.n_prompts=2", "task.n_train=20", "task.n_val=5", "task.few_shot=0"]


def rollouts(task) -> list[Rollout]:
    """Six rollouts: three problems' worked solutions and the same texts with a wrong answer."""
    out = []
    for i, p in enumerate(task.train[:3]):
        right = task.oracle_completion(p)
        out += [Rollout(p.prompt_id, [], [], right, 2 * i), Rollout(p.prompt_id, [], [], right + " 2+2=5", 2 * i + 1)]
    return out


def test_three_honest_nodes_judge_each_completion_once_with_the_verdicts_each_would_give_alone(tiny_model_dir,
                                                                                            tiny_model_dir_b):
    cfg = load_config(None, [*SMALL, f"model.name={tiny_model_dir}",
                             f"swarm.models=[{{name: {tiny_model_dir}}}, {{name: {tiny_model_dir_b}}}, {{name: {tiny_model_dir}}}]",
                             "defenses=[{kind: judge, mode: logits, threshold: 0.5, action: zero}]"])
    task = build_task(cfg)
    swarm = build_swarm(cfg, task, [0, 1, 2])
    judges = [swarm.defenses[n][0] for n in sorted(swarm.defenses)]
    assert len(judges) == 3 and judges[0].cache is judges[1].cache is judges[2].cache
    batch = rollouts(task)
    verdicts = [judges[0].inspect(batch), judges[1].inspect(batch), judges[2].inspect(batch)]
    # the first node asks about the six texts; the others find every verdict made (three judges apart: 18 calls)
    assert judges[0].counters is judges[1].counters is judges[2].counters and judges[0].counters["calls"] == 6
    # the same weights passed in: a judge of its own, nothing shared, each text asked again
    apart = JudgeDefense(JudgeDefenseConfig(mode="logits", threshold=0.5, action="zero"), cfg, None, task,
                         judge=load_policy(tiny_model_dir, trainable=False))
    alone = apart.inspect(batch)
    assert apart.verdict_store_key() is None and apart.counters["calls"] == 6 and apart.cache is not judges[0].cache
    for v in verdicts:
        assert [(x.accepted, x.reason) for x in v] == [(x.accepted, x.reason) for x in alone]


def test_the_record_counts_a_verdict_another_node_made_first(tiny_model_dir, tiny_model_dir_b):
    """The round record reads the lowest honest node's counters (records.round_record). An attacker that routes a
    completion to node 1 a round before node 0 (per-peer content) must not hide its judgment from them: node 0's
    own judge would have counted it, so the shared judge counts it in every node's counters."""
    cfg = load_config(None, [*SMALL, f"model.name={tiny_model_dir}",
                             f"swarm.models=[{{name: {tiny_model_dir}}}, {{name: {tiny_model_dir_b}}}, {{name: {tiny_model_dir}}}]",
                             "defenses=[{kind: judge, mode: logits, threshold: 0.5, action: zero}]"])
    swarm = build_swarm(cfg, build_task(cfg), [0, 1, 2])
    x = rollouts(swarm.task)[1:2]  # a worked solution with 2+2=5 appended
    swarm.defenses[1][0].inspect(x)  # round 0: routed to node 1 only
    swarm.defenses[0][0].inspect(x)  # round 1: node 0 receives it, its verdict is in the store
    counts = defense_counters(swarm.defenses[0])["judge"]
    assert counts["calls"] == 1 and counts["yes"] + counts["no"] == 1  # one judgment made, and the record has it
    assert defense_counters(swarm.defenses[2]) == defense_counters(swarm.defenses[1]) == {"judge": counts}


def test_the_round_record_counts_the_judgments_of_nodes_learning_after_the_lowest(tiny_model_dir, tiny_model_dir_b):
    """The record reads the lowest honest node's counters; with the counters shared, the judgments nodes 1 and 2
    make after node 0's learn in the same round belong to that round's record, not the next one's."""
    cfg = load_config(None, [*SMALL, f"model.name={tiny_model_dir}",
                             f"swarm.models=[{{name: {tiny_model_dir}}}, {{name: {tiny_model_dir_b}}}, {{name: {tiny_model_dir}}}]",
                             "defenses=[{kind: judge, mode: logits, threshold: 0.5, action: zero}]"])
    task = build_task(cfg)
    swarm = build_swarm(cfg, task, [0, 1, 2])
    batch = rollouts(task)
    reports = {}
    for owner, part in zip(sorted(swarm.policies), (batch[:2], batch[2:4], batch[4:])):  # three texts a node, in turn
        swarm.defenses[owner][0].inspect(part)
        reports[owner] = PolicyReport(part, defense_counts=defense_counters(swarm.defenses[owner]))  # as learn does
    assert reports[0].defense_counts["judge"]["calls"] == 2  # what node 0 had counted when its own learn ended
    now = time.perf_counter()
    rec = round_metrics(SimpleNamespace(cfg=cfg, task=task, swarm=swarm), 0, reports, (now, now, now))
    assert rec["defense/judge/calls"] == 6 and rec["defense/judge/yes"] + rec["defense/judge/no"] == 6


def served(**fields) -> JudgeDefense:
    cfg = JudgeDefenseConfig(backend="openai", base_url="http://127.0.0.1:9/v1", model="judge", **fields)
    return JudgeDefense(cfg, load_config(), None, ArithmeticTask(seed=0, n_train=5, n_val=2, few_shot=0))


def test_served_judges_share_only_a_greedy_verdict_of_the_same_config():
    greedy, again, zeroed = served(), served(), served(action="zero")
    sampled, sampled_too = served(temperature=0.7), served(temperature=0.7)
    top_k, other_threshold = served(extra_body={"top_k": 10}), served(threshold=0.4)
    share_verdicts({0: [greedy, sampled, top_k], 1: [again, sampled_too, other_threshold], 2: [zeroed]})
    assert greedy.cache is again.cache is zeroed.cache  # the action is what a rejection does, not the verdict
    assert sampled.cache is not sampled_too.cache  # each node's sampled judgment is its own draw
    assert top_k.verdict_store_key() is None and sampled.verdict_store_key() is None
    assert other_threshold.cache is not greedy.cache  # another threshold is another rule


def test_a_frozen_greedy_judge_keeps_an_unparseable_reply_and_a_failed_call_is_asked_again():
    """An unparseable reply of a greedy served judge is what it would say again: kept (rejected by on_error),
    so the other honest nodes do not pay for it; a failed call (timeout, dead server) is asked again."""
    first, second = served(), served()
    share_verdicts({0: [first], 1: [second]})
    asked = []

    def replies(pairs):
        asked.extend(c for _, c in pairs)
        return [("unparseable", "reply 'maybe'") if "maybe" in c else ("failed", "timed out") for _, c in pairs]
    first.judge_pairs = second.judge_pairs = replies
    task = first.task
    batch = [Rollout(task.train[0].prompt_id, [], [], "maybe", 0), Rollout(task.train[1].prompt_id, [], [], "down", 1)]
    for judge in (first, second):
        verdicts = judge.inspect(batch)
        assert [v.accepted for v in verdicts] == [False, False]  # on_error: reject, both
        assert "unparseable" in verdicts[0].reason and "failed" in verdicts[1].reason
    assert [c.endswith("maybe") for c in asked] == [True, False, False]  # 'maybe' asked once, 'down' twice
    assert first.counters == {"calls": 3, "yes": 0, "no": 0, "unparseable": 1, "failed": 2}
    sampled = served(temperature=0.7)
    sampled.judge_pairs = replies
    sampled.inspect(batch[:1]), sampled.inspect(batch[:1])
    assert sampled.counters["unparseable"] == 2  # a sampled judge's next draw may parse: asked again


def test_a_checkpoints_counters_are_set_again_in_every_node_sharing_them(tiny_model_dir, tiny_model_dir_b, tmp_path):
    """A resume sets the counters a node's checkpoint holds (defenses.base.restore_counters): the judges that share
    them hold the saved values once, not summed per node; a state that does not fit the config is one line."""
    from dgrpo.defenses.base import restore_counters, saved_counters
    from dgrpo.errors import CheckpointError

    cfg = load_config(None, [*SMALL, f"model.name={tiny_model_dir}",
                             f"swarm.models=[{{name: {tiny_model_dir}}}, {{name: {tiny_model_dir_b}}}, {{name: {tiny_model_dir}}}]",
                             "defenses=[{kind: judge, mode: logits, threshold: 0.5, action: zero}]"])
    task = build_task(cfg)
    swarm = build_swarm(cfg, task, [0, 1, 2])
    swarm.defenses[0][0].inspect(rollouts(task))
    saved = saved_counters(swarm.defenses[0])
    assert saved[0]["calls"] == 6 and saved[0]["yes"] + saved[0]["no"] == 6
    again = build_swarm(cfg, task, [0, 1, 2])
    for owner in (0, 1, 2):
        restore_counters(again.defenses[owner], saved, tmp_path / f"node{owner}" / "state.json")
    assert [saved_counters(again.defenses[o]) for o in (0, 1, 2)] == [saved] * 3
    for bad in ([{**saved[0], "calls": -1}], [{"calls": 6}], [], {"judge": saved[0]}):
        with pytest.raises(CheckpointError, match="node0/state.json: defense_counters is not one object of counts per "
                                                  "defense of the config \\(judge\\)"):
            restore_counters(again.defenses[0], bad, tmp_path / "node0" / "state.json")
    restore_counters(again.defenses[0], None, "an older checkpoint")  # holds none: the counters stay as they are
    assert saved_counters(again.defenses[2]) == saved


def test_a_kind_listed_twice_is_recorded_apart(tiny_model_dir, tiny_model_dir_b):
    """Two judges in one config (here: the same judge at two thresholds) each keep their verdicts and counters in
    the record (defense/judge/*, defense/judge_2/*); one name would write the second's over the first's."""
    cfg = load_config(None, [*SMALL, f"model.name={tiny_model_dir}", "swarm.nodes=2", "swarm.group_size=4",
                             f"swarm.models=[{{name: {tiny_model_dir}}}, {{name: {tiny_model_dir_b}}}]",
                             "defenses=[{kind: judge, mode: logits, threshold: 0.01, action: zero}, "
                             "{kind: judge, mode: logits, threshold: 0.99, action: zero}]"])
    swarm = build_swarm(cfg, build_task(cfg), [0, 1])
    lenient, strict = swarm.defenses[0]
    assert (lenient.name, strict.name) == ("judge", "judge_2") and [d.name for d in swarm.defenses[1]] == ["judge", "judge_2"]
    assert lenient.cache is not strict.cache and strict.cache is swarm.defenses[1][1].cache  # shared per rule
    batch = rollouts(swarm.task)
    shares = [float(v.reason.split("share=")[1]) for v in strict.inspect(batch)]  # a random judge: near 0.5
    assert all(0.01 <= x < 0.99 for x in shares)  # so the lenient one accepts all six and the strict one rejects all
    assert all(v.accepted for v in lenient.inspect(batch))
    assert {v.defense for v in strict.inspect(batch)} == {"judge_2"}
    counts = defense_counters(swarm.defenses[0])
    assert counts["judge"]["yes"] == 6 and counts["judge_2"]["no"] == 6 and counts["judge_2"]["yes"] == 0
