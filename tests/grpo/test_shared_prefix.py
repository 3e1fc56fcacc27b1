"""The update runs the prompt prefix its groups share once (dgrpo.policy.prefix): the same log-probs,
loss and gradients as each group running its whole prompt, to float32 rounding.

Tolerance: ``torch.testing.assert_close``'s float32 defaults (rtol 1.3e-6, atol 1e-5): the two
paths add the same terms in another order (the prefix's gradient summed over groups before its
backward instead of after), so they differ by a few float32 ulps, not by any behaviour.
"""

import copy

import pytest
import torch

from dgrpo.grpo import learner as learner_module
from dgrpo.grpo.advantages import group_advantages
from dgrpo.grpo.learner import GRPOParams, Learner
from dgrpo.grpo.loss import aggregate_loss, per_token_loss
from dgrpo.policy import scoring
from dgrpo.policy.prefix import SharedPrefix, common_prefix
from dgrpo.policy.scoring import completion_mask, group_logits, pad_right, token_logprobs
from dgrpo.types import Rollout

EOS = 2
SHARED = list(range(30, 50))  # 20 tokens every prompt starts with (a system prompt, worked examples)
PROMPTS = {"a": SHARED + [60, 61, 62], "b": SHARED + [70], "c": SHARED + [80, 81, 82, 83, 84]}
# ragged completions: ended by eos, cut at the limit (no eos), one token long
SPECS = [("a", [20, 21, EOS], 1.0), ("a", [22, EOS], 0.0), ("a", [23, 24, 25, 26, 27, 28], 0.0),
         ("b", [30, EOS], 1.0), ("b", [31, 32, 33, 34, EOS], 0.0), ("b", [33], 0.0),
         ("c", [40, 41, 42, EOS], 0.0), ("c", [43], 1.0), ("c", [44, 45, 46, 47, 48, 49], 1.0)]


def _rollouts(order: str) -> list[Rollout]:
    """``grouped``: each prompt's completions together (vertical: one node writes a group);
    ``interleaved``: node by node, each node a share of every group (horizontal, G/m each)."""
    rollouts = [Rollout(pid, PROMPTS[pid], ids, "", sender=i % 3, reward=r) for i, (pid, ids, r) in enumerate(SPECS)]
    return rollouts if order == "grouped" else sorted(rollouts, key=lambda r: r.sender)


def _run(model, params, order, share: bool, monkeypatch):
    """Gradients at every optimizer step, the stats and the first iteration's per-group log-probs."""
    ref = copy.deepcopy(model) if params.beta > 0 else None
    learner = Learner(model, params, EOS, EOS, ref_model=ref)
    if not share:
        monkeypatch.setattr(learner_module, "common_prefix", lambda prompts: 0)
    batch = learner.score(_rollouts(order))
    assert bool(batch.prefix.ids) == share and (batch.prefix.ids == SHARED or not share)
    logps = {}
    for group in batch.groups:  # read the logits as a logit-stage defense does, before the step
        ids = pad_right([r.completion_ids for r in group.rollouts], EOS)
        logps[group.rollouts[0].prompt_id] = token_logprobs(group.logits.detach(), ids)
    grads, original = [], learner.optimizer.step

    def capture():
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
        original()

    learner.optimizer.step = capture
    stats = learner.step(batch)
    monkeypatch.undo()
    return grads, stats, logps


@pytest.mark.parametrize("packed", [True, False])
@pytest.mark.parametrize("order", ["grouped", "interleaved"])
@pytest.mark.parametrize("beta,iterations", [(0.0, 1), (0.1, 2)])
def test_shared_prefix_gives_the_same_logprobs_loss_and_gradients(model, monkeypatch, packed, order, beta, iterations):
    params = GRPOParams(beta=beta, num_iterations=iterations, max_len=6, max_grad_norm=1e9, lr=1e-3)
    if not packed:
        monkeypatch.setattr(scoring, "_packable", lambda *a: False)
    plain = copy.deepcopy(model)
    shared_grads, shared_stats, shared_logp = _run(model, params, order, True, monkeypatch)
    if not packed:
        monkeypatch.setattr(scoring, "_packable", lambda *a: False)
    plain_grads, plain_stats, plain_logp = _run(plain, params, order, False, monkeypatch)
    assert len(shared_grads) == len(plain_grads) == iterations
    for pid in PROMPTS:
        torch.testing.assert_close(shared_logp[pid], plain_logp[pid])
    torch.testing.assert_close(shared_stats.loss, plain_stats.loss)
    torch.testing.assert_close(shared_stats.grad_norm, plain_stats.grad_norm)
    assert shared_stats.used == plain_stats.used == len(SPECS)
    for a, b in zip(shared_grads, plain_grads):
        assert a.keys() == b.keys()
        for name in a:
            torch.testing.assert_close(a[name], b[name], msg=name)
        assert any(g.abs().sum() > 0 for g in a.values())


def test_shared_prefix_gradient_equals_each_sequence_forwarded_alone(model):
    """Independent reference: every (prompt, completion) run whole, the full-batch grpo loss's gradient."""
    reference = copy.deepcopy(model)
    rollouts = _rollouts("grouped")
    adv = group_advantages(torch.tensor([r.reward for r in rollouts]), [r.prompt_id for r in rollouts])
    comps = pad_right([r.completion_ids for r in rollouts], EOS)
    logps = []
    for r, ids in zip(rollouts, comps):
        logits = reference(input_ids=torch.tensor([r.prompt_ids + ids.tolist()])).logits[0, len(r.prompt_ids) - 1: -1]
        logps.append(torch.log_softmax(logits.float(), -1).gather(-1, ids[:, None]).squeeze(-1))
    logp = torch.stack(logps)
    mask = completion_mask(comps, EOS, [len(r.completion_ids) for r in rollouts])
    aggregate_loss(per_token_loss(logp, logp.detach(), adv), mask, "grpo", 6).backward()
    expected = {n: p.grad for n, p in reference.named_parameters()}
    learner = Learner(model, GRPOParams(max_len=6, max_grad_norm=1e9), EOS, EOS)
    captured, original = {}, learner.optimizer.step
    learner.optimizer.step = lambda: (captured.update({n: p.grad.clone() for n, p in model.named_parameters()}),
                                      original())
    learner.step(rollouts)
    for name, grad in expected.items():
        torch.testing.assert_close(captured[name], grad, msg=name)


def test_prefix_positions_run_once_per_step(model):
    """The embedding sees the shared prefix once, then each group's prompt rest and completions."""
    seen = []
    model.model.embed_tokens.register_forward_hook(lambda m, inp, out: seen.append(inp[0].numel()))
    Learner(model, GRPOParams(max_len=6), EOS, EOS).step(_rollouts("interleaved"))
    rest = sum(len(p) - len(SHARED) - 1 for p in PROMPTS.values())  # each prompt but its last token, after the prefix
    completions = sum(len(ids) for _, ids, _ in SPECS)  # packed: the last prompt token + all but the last token
    assert sum(seen) == len(SHARED) + rest + completions
    assert seen[0] == len(SHARED)


def test_common_prefix_and_bad_prefix(model):
    assert common_prefix(list(PROMPTS.values())) == len(SHARED)
    assert common_prefix([PROMPTS["a"], PROMPTS["a"]]) == 0  # one distinct prompt: nothing to share
    assert common_prefix([SHARED[:10] + [1], SHARED[:10] + [3]]) == 0  # 10 tokens: below the 16-token minimum
    prefix = SharedPrefix(model, SHARED, grad=False)
    assert prefix.matches(PROMPTS["b"]) and not prefix.matches(SHARED) and not prefix.matches([1] + SHARED)
    with pytest.raises(ValueError, match="prefix must be the start of the prompt"):
        group_logits(model, SHARED, [[5]], EOS, prefix)
    with pytest.raises(ValueError, match="non-empty prefix"):
        SharedPrefix(model, [], grad=False)
