"""Regenerating completions from their seeds (dgrpo.verify.replay): equal ones pass, the first difference is named."""

from dgrpo.policy.sampling import SamplingParams, completion_seed, sample
from dgrpo.verify.replay import regeneration_mismatches

P = SamplingParams(top_k=10, temperature=1.0, max_new_tokens=8)


def test_regeneration_finds_the_first_differing_position(model, tokenizer):
    eos = tokenizer.eos_token_id
    prompts = [[5, 6, 7], [8, 9], [10, 11, 12, 13]]
    seeds = [completion_seed(1, 0, 0, f"p{i}", i) for i in range(3)]
    honest = sample(model, prompts, seeds, P, eos, eos)  # what a node holding the same weights samples
    edited = list(honest[1])
    edited[2] = (edited[2] + 1) % len(tokenizer)
    claims = [honest[0], edited, honest[2][:-1]]  # as sent, one token changed, one cut short
    assert regeneration_mismatches(model, prompts, claims, seeds, P, eos, eos) == [None, 2, len(honest[2]) - 1]
    other_seed = [seeds[0] + 1, seeds[1], seeds[2]]  # the same completion claimed with another seed
    assert regeneration_mismatches(model, prompts[:1], honest[:1], other_seed[:1], P, eos, eos) != [None]
