import torch

from dgrpo.policy.sampling import SamplingParams, choose_tokens, completion_seed, gumbel_table, sample

P = SamplingParams(top_k=10, temperature=1.0, max_new_tokens=12)


def test_same_seed_same_tokens_alone_and_in_padded_batch(model, tokenizer):
    eos = tokenizer.eos_token_id
    prompts = [[5, 6, 7, 8, 9, 10, 11], [12, 13], [14, 15, 16, 17], [18]]
    seeds = [completion_seed(0, 1, n, f"p{n}", 0) for n in range(4)]
    batch = sample(model, prompts, seeds, P, eos, eos)
    for i in range(4):
        alone = sample(model, [prompts[i]], [seeds[i]], P, eos, eos)[0]
        assert alone == batch[i]
    # order of the batch does not matter either
    rev = sample(model, prompts[::-1], seeds[::-1], P, eos, eos)
    assert rev[::-1] == batch


def test_different_seeds_differ(model, tokenizer):
    eos = tokenizer.eos_token_id
    outs = sample(model, [[5, 6, 7]] * 6, list(range(6)), P, eos, eos)
    assert len({tuple(o) for o in outs}) > 1


def test_tokens_always_inside_top_k(model, tokenizer):
    eos = tokenizer.eos_token_id
    prompt = [5, 6, 7]
    (out,) = sample(model, [prompt], [123], SamplingParams(top_k=3, temperature=1.0, max_new_tokens=10), eos, eos)
    logits = model(input_ids=torch.tensor([prompt + out])).logits[0].float()
    for t, tok in enumerate(out):
        top = logits[len(prompt) - 1 + t].topk(3).indices.tolist()
        assert tok in top


def test_gumbel_max_matches_softmax_frequencies():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    params = SamplingParams(top_k=4, temperature=1.0)
    n = 4000
    counts = torch.zeros(4)
    for s in range(n):
        counts[choose_tokens(logits, gumbel_table(s, 1, 4)[0][None], params)] += 1
    expected = torch.softmax(logits[0], -1)
    assert torch.allclose(counts / n, expected, atol=0.03)


def test_seed_is_stable_and_distinct():
    assert completion_seed(0, 1, 2, "p", 3) == completion_seed(0, 1, 2, "p", 3)
    assert completion_seed(0, 1, 2, "p", 3) != completion_seed(0, 1, 2, "p", 4)
    assert 0 <= completion_seed(7, 0, 0, "x", 0) < 2**63


def test_shared_prefix_length():
    from dgrpo.policy.sampling import _shared_prefix

    head = tuple(range(3, 23))  # 20 shared tokens
    assert _shared_prefix([head + (30, 31), head + (40,), head + (30, 50)]) == 20
    assert _shared_prefix([head + (30,)]) == 0  # one prompt: nothing to share
    assert _shared_prefix([head, head + (40,)]) == 19  # the shorter prompt keeps its last token
    assert _shared_prefix([head[:10] + (1,), head[:10] + (2,)]) == 0  # under 16 tokens: not worth a forward


def test_prompts_sharing_a_prefix_sample_as_alone(model, tokenizer, monkeypatch):
    from dgrpo.policy import sampling

    eos = tokenizer.eos_token_id
    head = list(range(30, 50))
    prompts = [head + [60, 61, 62], head + [70], head + [60, 61, 62], head + [80, 81]]
    seeds = [11, 12, 13, 14]
    batch = sample(model, prompts, seeds, P, eos, eos)
    for i in range(4):
        assert sample(model, [prompts[i]], [seeds[i]], P, eos, eos)[0] == batch[i]
    monkeypatch.setattr(sampling, "_shared_prefix", lambda distinct: 0)  # every prompt prefilled whole
    assert sample(model, prompts, seeds, P, eos, eos) == batch


def test_model_left_in_train_mode_samples_the_same_with_single_query_attention(model, tokenizer, monkeypatch):
    from dgrpo.policy import decode_attention

    eos = tokenizer.eos_token_id
    prompts, seeds = [[5, 6, 7], [8, 9]], [1, 2]
    ref = sample(model.eval(), prompts, seeds, P, eos, eos)
    to_sdpa = []
    real = decode_attention.sdpa_attention_forward
    monkeypatch.setattr(decode_attention, "sdpa_attention_forward",
                        lambda module, q, *a, **kw: to_sdpa.append(q.shape[2]) or real(module, q, *a, **kw))
    model.train()  # as a learner leaves it
    assert sample(model, prompts, seeds, P, eos, eos) == ref
    assert model.training
    assert to_sdpa and 1 not in to_sdpa  # only the prefill went to SDPA; every decoding step used the matmul path
