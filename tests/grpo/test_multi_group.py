"""The update packs several groups into one forward and one backward (dgrpo.policy.packing): the same
log-probs, loss and gradients as one forward per group, to float32 rounding.

Tolerance: ``torch.testing.assert_close``'s float32 defaults (rtol 1.3e-6, atol 1e-5): both paths add
the same products, in another order (other GEMM shapes; the groups' gradients summed before the
backward instead of after), so they differ by a few float32 ulps, not by any behaviour. Each comparison runs
with the update's linears forced on each kernel (``grpo.update_kernel``: oneDNN, MKL), both paths on the same one.
"""

import copy

import pytest
import torch

from dgrpo.grpo import learner as learner_module
from dgrpo.grpo.learner import GRPOParams, Learner
from dgrpo.policy import onednn
from dgrpo.policy.packing import groups_token_logprobs
from dgrpo.policy.prefix import SharedPrefix
from dgrpo.policy.scoring import group_token_logprobs
from dgrpo.types import Rollout, Verdict

EOS = 2
SHARED = list(range(30, 50))  # 20 tokens every prompt starts with
# "d": the prefix and one token (no prompt rest behind the prefix)
PROMPTS = {"a": SHARED + [60, 61, 62], "b": SHARED + [70], "c": SHARED + [80, 81, 82, 83, 84], "d": SHARED + [90]}
# ragged completions: ended by eos, cut at the limit (no eos), one token long; "d" has equal rewards
SPECS = [("a", [20, 21, EOS], 1.0), ("a", [22, EOS], 0.0), ("a", [23, 24, 25, 26, 27, 28], 0.0),
         ("b", [30, EOS], 1.0), ("b", [31, 32, 33, 34, EOS], 0.0), ("b", [33], 0.0),
         ("c", [40, 41, 42, EOS], 0.0), ("c", [43], 1.0), ("c", [44, 45, 46, 47, 48, 49], 1.0),
         ("d", [50, 51, EOS], 1.0), ("d", [52], 1.0)]


def _rollouts(order: str, reject: bool = False) -> list[Rollout]:
    """``grouped``: each prompt's completions together (vertical); ``interleaved``: node by node
    (horizontal). ``reject``: one completion of "a" dropped and one of "c" zeroed by verdicts (both groups keep
    a signal)."""
    rollouts = [Rollout(pid, PROMPTS[pid], ids, "", sender=i % 3, reward=r) for i, (pid, ids, r) in enumerate(SPECS)]
    if reject:
        rollouts[1].verdicts.append(Verdict(False, "test", action="drop"))
        rollouts[7].verdicts.append(Verdict(False, "test", action="zero"))
    return rollouts if order == "grouped" else sorted(rollouts, key=lambda r: r.sender)


def _run(model, params, rollouts, pack_rows: int, shared: bool, monkeypatch):
    """Gradients at every optimizer step, the step's stats, and how many forwards the policy ran."""
    ref = copy.deepcopy(model) if params.beta > 0 else None
    learner = Learner(model, params, EOS, EOS, ref_model=ref)
    assert learner.kernel == params.update_kernel
    learner.pack_rows = pack_rows
    if not shared:
        monkeypatch.setattr(learner_module, "common_prefix", lambda prompts: 0)
    grads, original, calls = [], learner.optimizer.step, []
    hook = model.model.embed_tokens.register_forward_hook(lambda m, inp, out: calls.append(inp[0].numel()))

    def capture():
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
        original()

    learner.optimizer.step = capture
    stats = learner.step(learner.score(rollouts))
    hook.remove()
    monkeypatch.undo()
    return grads, stats, calls


@pytest.mark.parametrize("kernel", ["onednn", "mkl"])
@pytest.mark.parametrize("order", ["grouped", "interleaved"])
@pytest.mark.parametrize("shared", [True, False])
@pytest.mark.parametrize("pack_rows", [2048, 12])  # all groups in one forward; a forward every ~two groups
@pytest.mark.parametrize("loss_type,scale,beta,iterations,reject", [
    ("grpo", "group", 0.0, 1, False), ("bnpo", "batch", 0.1, 2, False), ("dr_grpo", "none", 0.0, 2, True),
    ("grpo", "group", 0.1, 1, True)])
def test_packed_groups_give_the_same_loss_and_gradients(model, monkeypatch, kernel, order, shared, pack_rows,
                                                        loss_type, scale, beta, iterations, reject):
    params = GRPOParams(loss_type=loss_type, scale_rewards=scale, beta=beta, num_iterations=iterations, max_len=6,
                        max_grad_norm=1e9, lr=1e-3, update_kernel=kernel)
    plain = copy.deepcopy(model)
    packed_grads, packed_stats, packed_calls = _run(model, params, _rollouts(order, reject), pack_rows, shared,
                                                    monkeypatch)
    plain_grads, plain_stats, plain_calls = _run(plain, params, _rollouts(order, reject), 0, shared, monkeypatch)
    assert len(packed_grads) == len(plain_grads) == iterations
    # (Python floats of float32 results: compared at float32's tolerances)
    torch.testing.assert_close(packed_stats.loss, plain_stats.loss, rtol=1.3e-6, atol=1e-5)
    torch.testing.assert_close(packed_stats.grad_norm, plain_stats.grad_norm, rtol=1.3e-6, atol=1e-5)
    assert (packed_stats.used, packed_stats.skipped_groups) == (plain_stats.used, plain_stats.skipped_groups)
    for a, b in zip(packed_grads, plain_grads):
        assert a.keys() == b.keys()
        for name in a:
            torch.testing.assert_close(a[name], b[name], msg=name)
        assert any(g.abs().sum() > 0 for g in a.values())
    # the same positions ran, in fewer forwards; with room for all groups, one per step (+ the prefix's)
    assert sum(packed_calls) == sum(plain_calls) and len(packed_calls) < len(plain_calls)
    if pack_rows == 2048:
        assert len(packed_calls) == (2 if shared else 1) * iterations


@pytest.mark.parametrize("kernel", ["onednn", "mkl"])
def test_groups_token_logprobs_match_one_group_at_a_time(model, kernel):
    """Log-probs of every group from one forward against group_token_logprobs per group, with and
    without a shared prefix (whole prompts then run behind nothing), all on one kernel."""
    groups = {}
    for pid, ids, _ in SPECS:
        groups.setdefault(pid, []).append(ids)
    inputs = [(PROMPTS[pid], comps) for pid, comps in groups.items()]
    for prefix in (None, SharedPrefix(model, SHARED, grad=False, kernel=kernel)):
        with torch.no_grad():
            together = groups_token_logprobs(model, inputs, prefix, kernel)
            for (prompt, comps), logp in zip(inputs, together):
                alone = group_token_logprobs(model, prompt, comps, EOS, prefix, kernel)
                assert logp.shape == alone.shape
                torch.testing.assert_close(logp, alone)


def test_groups_token_logprobs_bad_input(model):
    with pytest.raises(ValueError, match="non-empty completions"):
        groups_token_logprobs(model, [(PROMPTS["a"], [[]])])
    with pytest.raises(ValueError, match="prefix must be the start of every prompt"):
        groups_token_logprobs(model, [(PROMPTS["a"], [[5]]), ([1, 2, 3], [[5]])], SharedPrefix(model, SHARED, False))


@pytest.mark.skipif(not onednn.available(), reason="this PyTorch has no oneDNN")
@pytest.mark.parametrize("kernel", ["onednn", "mkl"])
@pytest.mark.parametrize("pack_rows", [2048, 0])
def test_the_update_runs_on_its_kernel_and_a_defense_read_on_onednn(model, monkeypatch, kernel, pack_rows):
    """Every linear of an update (policy with grad, shared prefix, reference at β > 0, packed or per
    group) on ``grpo.update_kernel``'s kernel; the forward a defense reads (``Group.logits``) on oneDNN."""
    calls = []
    real = onednn._gemm
    monkeypatch.setattr(onednn, "_gemm", lambda *a: calls.append(1) or real(*a))
    params = GRPOParams(beta=0.1, max_len=6, update_kernel=kernel)
    learner = Learner(model, params, EOS, EOS, ref_model=copy.deepcopy(model))
    learner.pack_rows = pack_rows
    assert learner.step(learner.score(_rollouts("grouped"))).used > 0
    assert bool(calls) == (kernel == "onednn")
    calls.clear()
    group = next(iter(learner.score(_rollouts("grouped")).groups))
    assert group.logits.shape[0] == 3 and calls  # a defense's read: oneDNN whatever the update's kernel
