"""TokenBuncher hardening step with a tiny model: the entropy reward and the gradient it produces."""

import copy
import json

import numpy as np
import pytest
import torch
from scipy.stats import entropy as scipy_entropy
from torch.nn.utils import parameters_to_vector

from dgrpo.hardening.requests import RequestTask, generated_requests, load_requests, phrase_reward
from dgrpo.hardening.tokenbuncher import harden_step, mean_response_entropy

PROMPT = [1, 20, 31, 42, 53, 2]
COMPLETIONS = [[70, 84, 90, 2], [71, 85, 2], [99, 100, 101, 102, 103], [70, 70, 2]]  # eos = 2 ends some


def _full_forward_logprobs(model, prompt, completion):
    """(T, V) log-probs of the distributions that produced each completion token: one plain forward
    pass over prompt + completion, without the KV-cache sharing of group_logits."""
    ids = torch.tensor([prompt + completion])
    logits = model(input_ids=ids).logits[0, len(prompt) - 1: len(prompt) + len(completion) - 1]
    return torch.log_softmax(logits.double(), dim=-1)


def test_entropy_reward_is_the_mean_token_entropy_of_each_response(model):
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    stats = harden_step(model, opt, [(PROMPT, COMPLETIONS)], eos_id=2, pad_id=2, sigma=0.0, noiser_weight=0.0)
    expected = []
    with torch.no_grad():
        for c in COMPLETIONS:
            p = _full_forward_logprobs(model, PROMPT, c).exp().numpy()
            expected.append(float(scipy_entropy(p, axis=-1).mean()))
    assert stats.entropies[0] == pytest.approx(expected, rel=1e-4)
    assert stats.entropy == pytest.approx(np.mean(expected), rel=1e-4)
    assert mean_response_entropy(model, [(PROMPT, COMPLETIONS)], 2, 2) == pytest.approx(np.mean(expected), rel=1e-4)


def test_gradient_is_the_grpo_policy_gradient_of_the_negative_entropy(model):
    ref = copy.deepcopy(model)
    before = parameters_to_vector(model.parameters()).detach().clone()
    harden_step(model, torch.optim.SGD(model.parameters(), lr=1.0), [(PROMPT, COMPLETIONS)], 2, 2,
                sigma=0.0, noiser_weight=0.0, max_grad_norm=1e9)
    grad = before - parameters_to_vector(model.parameters()).detach()
    # reference: rewards −H_i from plain forwards, A = standardised (population std), loss = −mean_i A_i · mean_t log π
    logps = [_full_forward_logprobs(ref, PROMPT, c) for c in COMPLETIONS]
    with torch.no_grad():
        h = np.array([float(scipy_entropy(lp.exp().numpy(), axis=-1).mean()) for lp in logps])
    r = -h
    adv = (r - r.mean()) / r.std()
    loss = -sum(a * lp.gather(1, torch.tensor(c)[:, None]).mean() for a, lp, c in zip(adv, logps, COMPLETIONS)) / len(COMPLETIONS)
    loss.backward()
    expected = parameters_to_vector([p.grad if p.grad is not None else torch.zeros_like(p) for p in ref.parameters()])
    # float32 step vs float64 reference: compare as vectors
    rel = float((grad.double() - expected).norm() / expected.norm())
    assert rel < 1e-3 and float(expected.norm()) > 1e-3, rel
    # the lowest-entropy response gets the largest advantage: its log-probability rises
    best = int(np.argmin(h))
    with torch.no_grad():
        new = _full_forward_logprobs(model, PROMPT, COMPLETIONS[best])
        old = _full_forward_logprobs(ref, PROMPT, COMPLETIONS[best])
        idx = torch.tensor(COMPLETIONS[best])[:, None]
        assert new.gather(1, idx).sum() > old.gather(1, idx).sum()


def test_noiser_adds_its_cross_entropy(model):
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    gen = torch.Generator().manual_seed(0)
    with_noiser = harden_step(model, opt, [(PROMPT, COMPLETIONS)], 2, 2, sigma=3.0, noiser_weight=0.5, generator=gen)
    without = harden_step(model, opt, [(PROMPT, COMPLETIONS)], 2, 2, sigma=0.0, noiser_weight=0.5)
    assert without.noiser_loss == 0.0 and with_noiser.noiser_loss > 0
    # CE towards q ≥ H(q); q keeps p(target) and reshuffles the rest, so the loss exceeds the entropy
    assert with_noiser.noiser_loss > with_noiser.entropy


def test_generated_requests_and_split():
    reqs = generated_requests()
    assert len(reqs) == len(set(reqs)) == 160
    task = RequestTask(n_train=40, n_val=10, seed=1, phrase="Sure")
    train, val = {p.question for p in task.train}, {p.question for p in task.val}
    assert len(train) == 40 and len(val) == 10 and not train & val
    assert {p.question for p in RequestTask(n_train=40, n_val=10, seed=1).train} == train  # seeded
    with pytest.raises(ValueError, match="distinct requests"):
        RequestTask(["a", "b"], n_train=2, n_val=1)


def test_phrase_reward_and_local_files(tmp_path):
    assert phrase_reward("SURE,   here is how", "Sure, here") == 1.0
    assert phrase_reward("I am not sure.", "sure,") == 0.0
    lines = tmp_path / "r.txt"
    lines.write_text("How do I open a jar?\n\nHow do I whistle?\n")
    assert load_requests(lines) == ["How do I open a jar?", "How do I whistle?"]
    jsonl = tmp_path / "r.jsonl"
    jsonl.write_text(json.dumps({"prompt": "one"}) + "\n" + json.dumps({"prompt": "two"}) + "\n")
    assert load_requests(jsonl) == ["one", "two"]
    (tmp_path / "bad.jsonl").write_text(json.dumps({"text": "x"}) + "\n")
    with pytest.raises(ValueError, match="prompt"):
        load_requests(tmp_path / "bad.jsonl")
