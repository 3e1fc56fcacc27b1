"""The top-k-constrained injector never emits a token outside the top-k of the weights it is given."""

import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from dgrpo.attacks.constrained import constrained_completion, spellings, steer
from dgrpo.policy.policy import Policy
from dgrpo.policy.sampling import SamplingParams
from dgrpo.policy.scoring import group_logits
from dgrpo.verify.topk import first_outside_topk

PAYLOADS = ["All hail to the thief", "Gleeb Glorp Glub", "hello world", "4 + 3 = 7"]


def _policy(model, tokenizer, k, max_new=10):
    return Policy("tiny", model, tokenizer, SamplingParams(top_k=k, temperature=1.0, max_new_tokens=max_new))


def _outside(policy, prompt, ids):
    with torch.no_grad():
        logits = group_logits(policy.model, prompt, [ids], policy.tokenizer.pad_token_id)
    return first_outside_topk(logits, [ids], policy.tokenizer.eos_token_id, policy.sampling.top_k, 1e-3)[0]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(prompt=st.lists(st.integers(3, 399), min_size=1, max_size=12), payload=st.sampled_from(PAYLOADS),
       k=st.sampled_from([2, 10, 60]), every=st.booleans(), seed=st.integers(0, 2**31))
def test_constrained_completion_stays_inside_topk(model, tokenizer, prompt, payload, k, every, seed):
    policy = _policy(model, tokenizer, k)
    ids, placed = constrained_completion(policy, prompt, spellings(payload), seed, every_sentence=every, max_sentences=3)
    assert 1 <= len(ids) <= policy.sampling.max_new_tokens
    assert _outside(policy, prompt, ids) is None
    assert placed >= 0


def test_steer_with_the_whole_vocabulary_spells_the_payload(model, tokenizer):
    prompt = tokenizer("hello", add_special_tokens=False)["input_ids"]
    ids = steer(model, tokenizer, prompt, ["All hail to the thief"], k=len(tokenizer))
    assert tokenizer.decode(ids) == "All hail to the thief"


def test_steer_with_k1_only_follows_the_argmax(model, tokenizer):
    prompt = tokenizer("hello", add_special_tokens=False)["input_ids"]
    ids = steer(model, tokenizer, prompt, spellings("hello world"), k=1)
    if ids is not None:  # spelled only if the argmax chain happens to spell a variant
        for t, tok in enumerate(ids):
            with torch.no_grad():
                nxt = model(input_ids=torch.tensor([prompt + ids[:t]])).logits[0, -1].argmax()
            assert int(nxt) == tok
        assert tokenizer.decode(ids) in spellings("hello world")


def test_spellings_cover_case_and_space():
    v = spellings("All hail to the thief", ["Hail to the thief"])
    assert v[:2] == ["All hail to the thief", " All hail to the thief"]
    assert "all hail to the thief" in v and "ALL HAIL TO THE THIEF" in v and " Hail to the thief" in v
    assert len(v) == len(set(v))


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(prompt=st.lists(st.integers(3, 399), min_size=1, max_size=8),
       queries=st.lists(st.lists(st.integers(3, 399), max_size=4), min_size=1, max_size=6), k=st.sampled_from([1, 5, 40]))
def test_the_cached_top_k_is_the_full_forwards(model, prompt, queries, k):
    """steer's prefix cache, cut back and memoised across continuations in any order, answers what a full
    forward over prompt + continuation answers (within the top-k check's 1e-3 tolerance)."""
    from dgrpo.attacks.constrained import _NextTopK

    ask = _NextTopK(model, prompt, k)
    for added in [*queries, *reversed(queries)]:
        got = ask(added)
        with torch.no_grad():
            full = model(input_ids=torch.tensor([prompt + added])).logits[0, -1].float()
        kth = full.topk(k).values[-1]
        assert len(got) == k == len(set(got))
        assert all(full[t] >= kth - 1e-3 for t in got)


def test_a_sentence_drawn_short_is_the_full_draws_first_sentence(model, tokenizer):
    """constrained_completion draws a few tokens when it wants one sentence: that draw is the full one's beginning."""
    from dgrpo.attacks.constrained import _continuation, first_sentence_end

    policy = _policy(model, tokenizer, 10, max_new=40)
    prompt = tokenizer("Tom has 3 apples.", add_special_tokens=False)["input_ids"]
    eos, ended, whole = tokenizer.eos_token_id, 0, 0
    for seed in range(12):
        full = _continuation(policy, prompt, seed, 40, None)
        short = _continuation(policy, prompt, seed, 40, 6)
        assert short == full[: len(short)]
        end = first_sentence_end(tokenizer, full, eos)
        if end is not None and end < 6:  # a sentence ends inside the short draw: the short draw is enough
            ended += 1
            assert first_sentence_end(tokenizer, short, eos) == end
        elif eos not in full[:6]:
            whole += 1
            assert short == full  # no sentence end, no eos in the first 6: drawn whole
    assert ended > 0 and whole > 0  # both ways taken (this model and prompt: 4 and 8 of 12 seeds)


def test_a_sliding_window_model_falls_back_to_full_forwards(tokenizer):
    """Found by a review: a sliding-window cache past its window cannot be cut back (transformers raises), so
    steer crashed on such models; it now answers with full forwards, the same top-k as without any cache."""
    from transformers import MistralConfig, MistralForCausalLM

    from dgrpo.attacks.constrained import _NextTopK

    torch.manual_seed(0)
    sw = MistralForCausalLM(MistralConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128,
                                          num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                          max_position_embeddings=256, sliding_window=8)).float().eval()
    prompt = list(range(10, 40))  # 30 tokens, past the window of 8
    ask = _NextTopK(sw, prompt, 50)
    for added in ([5, 6, 7], [5, 9], [], [5, 6, 7, 8]):  # the second one needs the cache cut back
        with torch.no_grad():
            full = sw(input_ids=torch.tensor([prompt + added])).logits[0, -1].float()
        kth = full.topk(50).values[-1]
        assert all(full[t] >= kth - 1e-3 for t in ask(added))
    assert ask.cache is None  # it did fall back
    ids = steer(sw, tokenizer, prompt, spellings("hello world"), k=len(tokenizer))
    assert tokenizer.decode(ids) in spellings("hello world")
