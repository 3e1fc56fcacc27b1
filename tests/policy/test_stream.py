"""Continuous batching (dgrpo.policy.stream): a completion is the same token for token whether its
request decodes alone, in one batch with all others (issue 20's sampler: no refill), or through
fewer rows that refill as completions finish, in any arrival order."""

import itertools

import pytest
import torch

from dgrpo.policy import stream
from dgrpo.policy.kv_cache import PreallocatedCache, PreallocatedLayer
from dgrpo.policy.sampling import SamplingParams, completion_seed, sample

HEAD = list(range(30, 50))  # 20 tokens: a common prefix the sampler prefills once


def _frequent_token(model, prompts, seeds, params):
    """A token the random model really samples, used as eos so completions end at different steps."""
    free = sample(model, prompts, seeds, params, eos_id=-1, pad_id=0)
    return max({t for c in free for t in c[1:]}, key=lambda t: sum(c.count(t) for c in free))


def _count(monkeypatch, cls, name):
    calls = []
    real = getattr(cls, name)
    monkeypatch.setattr(cls, name, lambda self, *a: calls.append(a) or real(self, *a))
    return calls


@pytest.mark.parametrize("head", [[], HEAD], ids=["no_common_prefix", "common_prefix"])
def test_refilled_rows_give_the_same_tokens_at_every_batch_size_and_order(model, head, monkeypatch):
    params = SamplingParams(top_k=10, temperature=1.0, max_new_tokens=10)
    rests = [[60, 61, 62, 63, 64, 65, 66], [70], [80, 81, 82], [60, 61, 62, 63, 64, 65, 66], [90, 91], [70], [99]]
    prompts = [head + r for r in rests]
    seeds = [completion_seed(3, 1, 0, f"p{i}", i) for i in range(len(prompts))]
    eos = _frequent_token(model, prompts, seeds, params)
    alone = [sample(model, [p], [s], params, eos, 0)[0] for p, s in zip(prompts, seeds)]
    assert sorted(len(c) for c in alone)[0] < params.max_new_tokens  # some finish early: rows free up
    assert sample(model, prompts, seeds, params, eos, 0) == alone  # one batch, no refill
    refills = _count(monkeypatch, PreallocatedCache, "refill")
    orders = [list(range(7)), list(range(7))[::-1], [3, 0, 6, 1, 5, 2, 4]]
    for rows, order in itertools.product((1, 2, 3, 5), orders):
        got = sample(model, [prompts[i] for i in order], [seeds[i] for i in order], params, eos, 0, max_rows=rows)
        assert got == [alone[i] for i in order], (rows, order)
    assert len(refills) >= 12  # rows really were handed to waiting requests


def test_refill_with_shorter_and_longer_prompts_never_sees_the_former_keys(model, monkeypatch):
    """One row serves a long prompt, then a short one, then a long one, then a short one again. The
    positions a refilled row must not see (the previous occupant's prompt and tokens) are
    overwritten with large garbage after every refill: a row that attended to any of them would
    change its tokens."""
    params = SamplingParams(top_k=10, temperature=1.0, max_new_tokens=6)
    prompts = [HEAD + list(range(60, 75)), HEAD + [80], HEAD + list(range(100, 112)), HEAD + [81, 82]]
    seeds = [11, 12, 13, 14]
    alone = [sample(model, [p], [s], params, -1, 0)[0] for p, s in zip(prompts, seeds)]
    real = PreallocatedCache.refill
    gaps = []

    def refill_then_poison(self, rows, source, source_rows):
        real(self, rows, source, source_rows)
        q = source[0][0].shape[2]  # positions the new prompt brings (its rest after the common prefix)
        for layer in self.layers:
            end = layer.length - q
            gaps.append(end - len(HEAD))
            for buf in (layer._k, layer._v):
                buf[rows, :, len(HEAD) : end] = 1e3 * torch.randn_like(buf[rows, :, len(HEAD) : end])

    monkeypatch.setattr(PreallocatedCache, "refill", refill_then_poison)
    assert sample(model, prompts, seeds, params, -1, 0, max_rows=1) == alone
    assert gaps and min(gaps) > 0  # every refill had former keys in front of it


def test_columns_every_row_masks_are_cut_when_the_cache_is_full(model, monkeypatch):
    """With no eos every completion runs max_new_tokens steps, so a single row refilled five times
    passes the cache's capacity (prompt width + 2 × max_new_tokens) and positions are cut."""
    params = SamplingParams(top_k=10, temperature=1.0, max_new_tokens=5)
    prompts = [HEAD + [60, 61], HEAD + [62], HEAD + [63, 64, 65], HEAD + [66], HEAD + [67, 68], HEAD + [69]]
    seeds = list(range(6))
    alone = [sample(model, [p], [s], params, -1, 0)[0] for p, s in zip(prompts, seeds)]
    cuts = _count(monkeypatch, PreallocatedLayer, "drop_columns")
    assert sample(model, prompts, seeds, params, -1, 0, max_rows=1) == alone
    assert sample(model, prompts, seeds, params, -1, 0, max_rows=2) == alone
    assert cuts and all(count > 0 for _, count in cuts)


def test_sampled_and_greedy_requests_share_one_stream(model):
    params = SamplingParams(top_k=10, temperature=1.0, max_new_tokens=8)
    prompts = [HEAD + [60, 61], HEAD + [70], HEAD + [80, 81, 82]]
    seeds = [5, 6, 7]
    sampled = sample(model, prompts, seeds, params, -1, 0)
    greedy = sample(model, prompts, seeds, SamplingParams(10, 0.0, 8), -1, 0)
    warm = sample(model, prompts, seeds, SamplingParams(10, 0.7, 8), -1, 0)
    assert sampled != greedy
    temps = [1.0] * 3 + [0.0] * 3 + [0.7] * 3
    for rows in (None, 2, 4):
        both = sample(model, prompts * 3, seeds * 3, params, -1, 0, max_rows=rows, temperatures=temps)
        assert both == sampled + greedy + warm
    # greedy is the argmax at every step, checked against one forward pass of the whole sequence
    for p, c in zip(prompts, greedy):
        logits = model(input_ids=torch.tensor([p + c])).logits[0]
        assert logits[len(p) - 1 : -1].argmax(-1).tolist() == c


def test_refill_needs_plain_attention_otherwise_successive_batches(model, monkeypatch):
    params = SamplingParams(top_k=10, temperature=1.0, max_new_tokens=6)
    prompts, seeds = [HEAD + [60], HEAD + [61, 62], HEAD + [63]], [1, 2, 3]
    whole = sample(model, prompts, seeds, params, -1, 0)
    monkeypatch.setattr(stream, "supports", lambda cache: False)
    with pytest.raises(ValueError, match="plain full-attention"):
        stream.decode(model, torch.tensor([[5, 6]]), torch.ones(1, 2, dtype=torch.long), torch.tensor([[0, 1]]), 0,
                      torch.tensor([0, 0]), torch.zeros(2, 6, 10), torch.ones(2, dtype=torch.float64), params, -1, 1,
                      None)
    monkeypatch.setattr("dgrpo.policy.sampling.plain_layers", lambda config: False)  # e.g. sliding windows
    assert sample(model, prompts, seeds, params, -1, 0, max_rows=2) == whole


def test_bad_temperatures_name_the_field(model):
    params = SamplingParams(top_k=10, temperature=1.0, max_new_tokens=4)
    with pytest.raises(ValueError, match="temperatures"):
        sample(model, [[5, 6]], [1], params, -1, 0, temperatures=[1.0, 0.0])
    with pytest.raises(ValueError, match="temperatures must be >= 0"):
        sample(model, [[5, 6]], [1], params, -1, 0, temperatures=[-1.0])


@pytest.mark.parametrize("rows", [None, 2], ids=["one_batch", "refill"])
def test_scores_kept_while_sampling_equal_a_forward_of_the_whole_sequence(model, rows):
    """``scores``: each kept request's (log-prob, entropy) per token, from the logits that chose it,
    equal to one forward pass of prompt + completion (an independent computation) to float32
    rounding; the tokens are the same as without scores, and requests with None get nothing."""
    params = SamplingParams(top_k=10, temperature=1.0, max_new_tokens=7)
    prompts = [HEAD + [60, 61], HEAD + [70], HEAD + [80, 81, 82], HEAD + [90]]
    seeds, temps = [5, 6, 7, 8], [1.0, 0.0, 1.0, 0.7]
    plain = sample(model, prompts, seeds, params, -1, 0, max_rows=rows, temperatures=temps)
    scores = [[], None, [], []]
    got = sample(model, prompts, seeds, params, -1, 0, max_rows=rows, temperatures=temps, scores=scores)
    assert got == plain and scores[1] is None
    model.eval()
    for p, c, kept in zip(prompts, got, scores):
        if kept is None:
            continue
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=torch.tensor([p + c])).logits[0, len(p) - 1 : -1].float(), -1)
        assert len(kept) == len(c)
        lp, ent = torch.tensor([k[0] for k in kept]), torch.tensor([k[1] for k in kept])
        torch.testing.assert_close(lp, logp.gather(-1, torch.tensor(c)[:, None]).squeeze(-1), rtol=0, atol=1e-5)
        torch.testing.assert_close(ent, -(logp.exp() * logp).sum(-1), rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="score lists"):
        sample(model, prompts, seeds, params, -1, 0, scores=[[]])


def test_the_common_prefix_scored_once_gives_the_same_tokens_and_scores(model, monkeypatch):
    """The decoding steps score the keys of the prompts' common prefix once for all rows
    (single_query_attention's ``shared``); without that, every row against its own copy: the same
    tokens at every batch size, and each token's log-prob and entropy to float32 rounding."""
    import dgrpo.policy.sampling as sampling_mod
    from dgrpo.policy.decode_attention import single_query_attention

    params = SamplingParams(top_k=10, temperature=1.0, max_new_tokens=8)
    prompts = [HEAD + [60, 61], HEAD + [70], HEAD + [80, 81, 82], HEAD + [60, 61]]
    seeds, temps = [5, 6, 7, 8], [1.0, 0.0, 1.0, 1.0]
    runs = {}
    for name, shared in (("once", None), ("per_row", 0)):
        if shared is not None:
            monkeypatch.setattr(sampling_mod, "single_query_attention", lambda m, s: single_query_attention(m, 0))
        for rows in (None, 2):
            scores = [[] for _ in prompts]
            runs[name, rows] = (sample(model, prompts, seeds, params, -1, 0, max_rows=rows, temperatures=temps,
                                       scores=scores), scores)
    for rows in (None, 2):
        (once, s_once), (per_row, s_row) = runs["once", rows], runs["per_row", rows]
        assert once == per_row
        torch.testing.assert_close(torch.tensor(s_once[0] + s_once[2]), torch.tensor(s_row[0] + s_row[2]),
                                   rtol=1e-6, atol=1e-6)  # (measured: at most 3e-7 relative)
