"""sample(rescore=...): given completions scored behind the sampler's own prefill of their prompts,
against one forward pass of prompt + completion per pair (an independent computation)."""

import functools

import pytest
import torch

from dgrpo.policy import rescore as rescore_mod
from dgrpo.policy.rescore import Rescore
from dgrpo.policy.sampling import SamplingParams, sample

HEAD = list(range(30, 50))  # 20 tokens: a common prefix the sampler prefills once
PROMPTS = [HEAD + [60, 61], HEAD + [70], HEAD + [80, 81, 82, 83]]
PAIRS = [(PROMPTS[2], [5, 6, 7, 8, 9, 10]), (PROMPTS[0], [11]), (PROMPTS[2], [12, 13]), (PROMPTS[1], [14, 15, 16])]


def _expected(model, prompt, completion):
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + completion])).logits[0, len(prompt) - 1 : -1]
    logp = torch.log_softmax(logits.float(), -1)
    return logp.gather(-1, torch.tensor(completion)[:, None]).squeeze(-1), -(logp.exp() * logp).sum(-1)


@pytest.mark.parametrize("how", ["one_batch", "refill", "small_batches", "not_plain"])
def test_rescored_completions_equal_a_forward_of_the_whole_sequence(model, how, monkeypatch):
    params = SamplingParams(top_k=10, temperature=1.0, max_new_tokens=6)
    seeds = [1, 2, 3]
    plain = sample(model, PROMPTS, seeds, params, -1, 0)
    if how == "small_batches":  # batches of one or two rows, a few positions each
        monkeypatch.setattr("dgrpo.policy.sampling.stats_behind_prefill",
                            functools.partial(rescore_mod.stats_behind_prefill, max_tokens=3, max_rows=2))
    if how == "not_plain":  # e.g. sliding windows: the completions are scored by a pass of their own
        monkeypatch.setattr("dgrpo.policy.sampling.plain_layers", lambda config: False)
    job = Rescore([p for p, _ in PAIRS], [c for _, c in PAIRS])
    got = sample(model, PROMPTS, seeds, params, -1, 0, max_rows=1 if how == "refill" else None, rescore=job)
    assert got == plain  # the sampling is not changed by it
    model.eval()
    assert len(job.stats) == len(PAIRS)
    for (prompt, completion), (logp, entropy) in zip(PAIRS, job.stats):
        want_logp, want_entropy = _expected(model, prompt, completion)
        assert logp.shape == entropy.shape == (len(completion),) and logp.dtype == torch.float32
        torch.testing.assert_close(logp, want_logp, rtol=0, atol=1e-5)
        torch.testing.assert_close(entropy, want_entropy, rtol=0, atol=1e-5)


def test_a_prompt_that_is_not_sampled_is_refused(model):
    params = SamplingParams(top_k=10, temperature=1.0, max_new_tokens=3)
    with pytest.raises(ValueError, match="rescore: every prompt to score must be one of the prompts sampled"):
        sample(model, PROMPTS[:1], [1], params, -1, 0, rescore=Rescore([PROMPTS[1]], [[5]]))
    with pytest.raises(ValueError, match="one prefill row per non-empty completion"):
        rescore_mod.stats_behind_prefill(model, None, None, None, torch.zeros(1, 4), [0], [[]])
