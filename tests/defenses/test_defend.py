"""defend(): the one place defenses run, before the update, on rollouts or on the update's own logits."""

import torch

from dgrpo.defenses import Defense, defend
from dgrpo.grpo.learner import GRPOParams, Learner
from dgrpo.types import ACCEPT, Rollout, Verdict

EOS = 2


class Recorder(Defense):
    """A defense that rejects the rollouts whose reward is in ``reject`` and records what it saw."""

    def __init__(self, name, stage, reject=(), action=None):
        self.name, self.stage, self.reject, self.action = name, stage, set(reject), action
        self.seen = []

    def inspect(self, rollouts, logits=None):
        self.seen.append(([r.reward for r in rollouts], None if logits is None else tuple(logits.shape)))
        return [Verdict(False, self.name, action=self.action) if r.reward in self.reject else ACCEPT for r in rollouts]


def _rollouts():
    return [Rollout("a", [5, 6, 7], [20, 21, EOS], "", 0, reward=1.0), Rollout("a", [5, 6, 7], [22, EOS], "", 1, reward=0.0),
            Rollout("a", [5, 6, 7], [23, 24, 25], "", 1, reward=0.5), Rollout("b", [8, 9], [30, EOS], "", 0, reward=0.25),
            Rollout("b", [8, 9], [31, 32, EOS], "", 1, reward=0.75)]


class CountingLearner(Learner):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.forwards = []

    def forward(self, group, grad, prefix=None):
        self.forwards.append((group[0].prompt_id, grad))
        return super().forward(group, grad, prefix)


def test_rollout_defenses_see_the_whole_batch_before_logit_defenses_see_each_group(model):
    learner = CountingLearner(model, GRPOParams(), EOS, EOS)
    judge, topk = Recorder("judge", "rollouts", reject={0.5}), Recorder("topk", "logits", reject={0.75})
    times = {}
    batch = defend([topk, judge], learner.score(_rollouts()), times)
    assert judge.seen == [([1.0, 0.0, 0.5, 0.25, 0.75], None)] and topk.seen == []  # logit checks wait for the update
    stats = learner.step(batch)
    # top-k saw each group's accepted rollouts with the rows of their logits (T = the group's longest completion)
    assert topk.seen == [([1.0, 0.0], (2, 3, len(learner.model.get_input_embeddings().weight))),
                         ([0.25, 0.75], (2, 3, len(learner.model.get_input_embeddings().weight)))]
    assert learner.forwards == [("a", True), ("b", True)]  # one forward per group: the update's own
    assert sorted(times) == ["judge", "topk"] and all(t >= 0 for t in times.values())
    assert stats.used == 2 and stats.skipped_groups == 1  # group b keeps one rollout: no signal left


def test_a_group_without_signal_is_scored_without_grad_for_its_defense_only(model):
    learner = CountingLearner(model, GRPOParams(), EOS, EOS)
    flat = [Rollout("a", [5, 6], [7, EOS], "", 0, reward=1.0), Rollout("a", [5, 6], [8, EOS], "", 0, reward=1.0)]
    topk = Recorder("topk", "logits")
    stats = learner.step(defend([topk], learner.score(flat), {}))
    assert learner.forwards == [("a", False)] and len(topk.seen) == 1 and stats.used == 0
    # without a defense on logits, the flat group costs no forward pass at all
    learner.forwards.clear()
    learner.step(defend([Recorder("judge", "rollouts")], learner.score(flat), {}))
    assert learner.forwards == []


def test_a_zeroed_reward_gives_a_flat_group_signal_and_the_update_scores_it_with_grad(model, monkeypatch):
    from dgrpo.grpo import learner as learner_module

    scored = []  # the update's own scoring: log-probs from the packed rows (scoring.group_token_logprobs)
    real = learner_module.group_token_logprobs
    monkeypatch.setattr(learner_module, "group_token_logprobs",
                        lambda *a, **kw: scored.append(torch.is_grad_enabled()) or real(*a, **kw))
    learner = CountingLearner(model, GRPOParams(), EOS, EOS)
    flat = [Rollout("a", [5, 6], [7, EOS], "", 0, reward=1.0), Rollout("a", [5, 6], [8, EOS], "", 1, reward=1.0)]

    class ZeroSecond(Recorder):  # keeps the second completion in its group with reward 0
        def inspect(self, rollouts, logits=None):
            return [ACCEPT if r.sender == 0 else Verdict(False, self.name, action="zero") for r in rollouts]

    before = [p.detach().clone() for p in model.parameters()]
    stats = learner.step(defend([ZeroSecond("topk", "logits")], learner.score(flat), {}))
    assert learner.forwards == [("a", False)] and scored == [True]  # checked without grad, then trained with it
    assert stats.used == 2 and stats.grad_norm > 0
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
