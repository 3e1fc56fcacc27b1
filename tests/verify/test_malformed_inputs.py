"""Malformed input to ``Verifier.verify`` is a rejection with its reason (defense ``input``), never a crash: before,
a token id outside the vocabulary raised IndexError in the forward, a negative one the same, a seeds list one
short IndexError in Replay."""

from __future__ import annotations

from dgrpo.policy.sampling import SamplingParams, sample
from dgrpo.verify import Replay, TopK, Verifier

PARAMS = SamplingParams(top_k=10, temperature=1.0, max_new_tokens=12)
PROMPTS = [[5, 6, 7, 8], [9, 10], [11, 12, 13, 14, 15, 16]]


def _verify(model, eos, comps, seeds):
    return Verifier([TopK(k=10), Replay(PARAMS)], model=model, eos_id=eos).verify(PROMPTS, comps, seeds=seeds)


def test_token_ids_outside_the_vocabulary_are_rejected_and_the_honest_one_accepted(model, tokenizer):
    eos, vocab = tokenizer.eos_token_id, len(tokenizer)
    comps = sample(model, PROMPTS, [1, 2, 3], PARAMS, eos, eos)
    bad = [comps[0], comps[1][:2] + [vocab] + comps[1][3:], [-1] + comps[2][1:]]
    verdicts = _verify(model, eos, bad, [1, 2, 3])
    assert [(v.accepted, v.defense, v.reason, v.position) for v in verdicts] == [
        (True, "", "", None),
        (False, "input", f"token id {vocab} at position 2 out of range (vocabulary of {vocab})", 2),
        (False, "input", f"token id -1 at position 0 out of range (vocabulary of {vocab})", 0)]


def test_a_seeds_list_of_another_length_rejects_every_completion(model, tokenizer):
    eos = tokenizer.eos_token_id
    comps = sample(model, PROMPTS, [1, 2, 3], PARAMS, eos, eos)
    verdicts = _verify(model, eos, comps, [1, 2])
    assert {(v.defense, v.reason) for v in verdicts} == {("input", "2 seeds for 3 completions")}


def test_a_seed_that_is_not_a_64_bit_integer_is_rejected(model, tokenizer):
    eos = tokenizer.eos_token_id
    comps = sample(model, PROMPTS, [1, 2, 3], PARAMS, eos, eos)
    verdicts = _verify(model, eos, comps, [1, "2", 2**64])
    assert [v.reason for v in verdicts] == ["", "seed '2' is not an integer", f"seed {2**64} out of range (a 64-bit seed)"]


def test_topk_rejects_tokens_after_the_eos_as_replay_does(model, tokenizer):
    """Honest completions with a payload after their eos: TopK accepted them (it read up to the eos only)."""
    eos = tokenizer.eos_token_id
    comps = sample(model, PROMPTS, [1, 2, 3], PARAMS, eos, eos)
    payload = tokenizer(text=" All hail to the thief.")["input_ids"]
    tails = [c[:2] + [eos] + payload for c in comps]
    verdicts = Verifier([TopK(k=10)], model=model, eos_id=eos).verify(PROMPTS, tails)
    assert [(v.defense, v.reason, v.position) for v in verdicts] == [("topk", "continues after eos (token at position 3)",
                                                                      3)] * 3
    assert all(v.accepted for v in Verifier([TopK(k=10)], model=model, eos_id=eos).verify(PROMPTS, comps))
