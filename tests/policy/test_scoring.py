import pytest
import torch

from dgrpo.policy.scoring import completion_mask, group_logits, pad_right, score, token_logprobs


def test_first_completion_token_scored_by_last_prompt_position(model):
    prompt, completion = [5, 6, 7], [8, 9, 10]  # "A B C" then "D E F"
    full = model(input_ids=torch.tensor([prompt + completion])).logits[0].float()  # (6, V)
    logits = group_logits(model, prompt, [completion], pad_id=0)[0]  # (3, V)
    # D (completion[0]) comes from the logits at C (prompt position 2), E from D, F from E
    assert torch.allclose(logits, full[2:5], atol=1e-5)
    logp = score(model, prompt, [completion], pad_id=0)[0]
    expected = torch.log_softmax(full[2:5], -1)[torch.arange(3), torch.tensor(completion)]
    assert torch.allclose(logp, expected, atol=1e-5)


def test_group_shares_prompt_and_matches_separate_forwards(model):
    prompt = [11, 12, 13, 14]
    completions = [[20, 21, 22, 23], [30], [40, 41]]
    logits = group_logits(model, prompt, completions, pad_id=2)
    for g, comp in enumerate(completions):
        alone = model(input_ids=torch.tensor([prompt + comp])).logits[0].float()
        assert torch.allclose(logits[g, : len(comp)], alone[len(prompt) - 1 : len(prompt) - 1 + len(comp)], atol=1e-5)


def test_group_logits_is_differentiable(model):
    logits = group_logits(model, [3, 4], [[5, 6], [7, 8]], pad_id=0)
    token_logprobs(logits, torch.tensor([[5, 6], [7, 8]])).sum().backward()
    assert model.model.embed_tokens.weight.grad.abs().sum() > 0


def test_mask_with_pad_equal_to_eos():
    eos = 2
    ids = torch.tensor([[40, 41, eos, eos, eos], [40, 41, 42, 43, 44], [eos, eos, eos, eos, eos]])
    assert completion_mask(ids, eos).tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]]


def test_pad_right_and_errors(model):
    assert pad_right([[1, 2, 3], [4]], 0).tolist() == [[1, 2, 3], [4, 0, 0]]
    with pytest.raises(ValueError):
        group_logits(model, [], [[1]], 0)
    with pytest.raises(ValueError):
        group_logits(model, [1], [[]], 0)


def test_truncated_completion_padded_with_eos_keeps_its_length():
    eos = 2
    ids = torch.tensor([[40, 41, 42], [40, eos, eos]])  # row 1: "40 <eos>" then one pad
    assert completion_mask(ids, eos, lengths=[2, 2]).tolist() == [[1, 1, 0], [1, 1, 0]]


@pytest.mark.parametrize("prompt", [[7], [11, 12, 13, 14]])
def test_packed_group_matches_padded_group_and_separate_forwards(model, prompt, monkeypatch):
    from dgrpo.policy import scoring

    completions = [[20, 21, 22, 23, 24], [30], [40, 41], [50, 51, 52]]
    assert scoring._packable(model, len(prompt), [len(c) for c in completions])
    packed = group_logits(model, prompt, completions, pad_id=2)
    monkeypatch.setattr(scoring, "_packable", lambda *a: False)
    padded = group_logits(model, prompt, completions, pad_id=2)
    assert packed.shape == padded.shape == (4, 5, model.config.vocab_size)
    for g, comp in enumerate(completions):
        alone = model(input_ids=torch.tensor([prompt + comp])).logits[0].float()
        expected = alone[len(prompt) - 1 : len(prompt) - 1 + len(comp)]
        assert torch.allclose(packed[g, : len(comp)], expected, atol=1e-5)
        assert torch.allclose(padded[g, : len(comp)], expected, atol=1e-5)
        assert not packed[g, len(comp):].any()  # padding rows of the packed path are zeros


def test_packed_group_gradients_match_padded_group(model, monkeypatch):
    from dgrpo.policy import scoring

    prompt, completions = [3, 4, 5], [[6, 7, 8], [9], [10, 11]]
    ids = pad_right(completions, 0)
    mask = completion_mask(ids, eos_id=-1, lengths=[3, 1, 2])

    def grads():
        model.zero_grad()
        (token_logprobs(group_logits(model, prompt, completions, pad_id=0), ids) * mask).sum().backward()
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    packed = grads()
    monkeypatch.setattr(scoring, "_packable", lambda *a: False)
    padded = grads()
    assert packed.keys() == padded.keys()
    for name in packed:
        assert torch.allclose(packed[name], padded[name], atol=1e-5, rtol=1e-4), name


def test_long_completions_take_the_padded_path(model):
    from dgrpo.policy import scoring

    # equal lengths: nothing to save, and the dense packed attention costs more
    assert not scoring._packable(model, 10, [40] * 8)
    # one long completion among short ones: padding wastes most positions
    assert scoring._packable(model, 10, [64, 5, 5, 5, 5, 5, 5, 5])
    # 8 completions of 2,000 and 1,000 tokens: packed attention (N² = 12k²) outweighs the saved positions
    assert not scoring._packable(model, 10, [2000] + [1000] * 7)


@pytest.mark.parametrize("packed", [True, False])
def test_group_token_logprobs_equal_the_logits_path_bit_for_bit(model, monkeypatch, packed):
    """The log-probs without (G, T, V) logits: every real position's value, and every parameter's gradient
    of a masked sum, equal to token_logprobs(group_logits(...)) exactly; padding positions hold 0."""
    from dgrpo.policy import scoring

    prompt, completions = [3, 4, 5, 6], [[6, 7, 8, 9], [9], [10, 11]]
    assert scoring._packable(model, len(prompt), [len(c) for c in completions])
    if not packed:
        monkeypatch.setattr(scoring, "_packable", lambda *a: False)
    ids = pad_right(completions, 0)
    mask = completion_mask(ids, eos_id=-1, lengths=[4, 1, 2])
    weights = torch.tensor([[0.5, -1.0, 2.0, 0.25], [1.5, 0.0, 0.0, 0.0], [-0.75, 3.0, 0.0, 0.0]])

    def run(fn):
        model.zero_grad()
        logp = fn()
        (logp * mask * weights).sum().backward()
        return logp.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    old, old_grads = run(lambda: token_logprobs(group_logits(model, prompt, completions, pad_id=0), ids))
    new, new_grads = run(lambda: scoring.group_token_logprobs(model, prompt, completions, pad_id=0))
    real = mask.bool()
    assert new.shape == old.shape == (3, 4)
    assert torch.equal(new[real], old[real])
    if packed:
        assert not new[~real].any()
    assert old_grads.keys() == new_grads.keys() and old_grads
    for name in old_grads:
        assert torch.equal(old_grads[name], new_grads[name]), name
