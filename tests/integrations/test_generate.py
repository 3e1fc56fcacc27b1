"""``model.generate`` with dgrpo's seeded logits processor samples, token for token, what dgrpo's own
sampler samples for the same (prompt, seed), on batch shapes and paddings of their own; exact replay
accepts those completions from their seeds."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from transformers import LogitsProcessorList

from dgrpo.integrations.generate import SeededLogitsProcessor, left_pad, seeded_generate
from dgrpo.policy.sampling import SamplingParams, completion_seed, sample
from dgrpo.verify import replay_verdicts

SHORT, MID, LONG = [5, 6, 7], [12, 13, 14, 15, 16, 17, 18], [18]
SHARED = list(range(30, 50))  # 20 tokens: dgrpo's sampler runs this shared prefix once


def _stop_token(model, prompts, seeds, params, pad: int) -> int:
    """The token the most of these completions contain: as "eos" it ends them at varied lengths."""
    out = sample(model, prompts, seeds, params, pad, pad)
    return Counter(t for o in out for t in set(o) if t != pad).most_common(1)[0][0]


BATCHES = {
    "one prompt": [SHORT],
    "left padding": [SHORT, MID, LONG, [20, 21]],
    "groups": [MID] * 3 + [SHORT] * 3,
    "shared prefix": [SHARED + [7], SHARED + [8, 9, 10], SHARED + [11, 12]] * 2,
}
PARAMS = [SamplingParams(10, 1.0, 16), SamplingParams(5, 0.7, 24), SamplingParams(10, 0.0, 12)]


@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("params", PARAMS, ids=["k10", "k5-t0.7", "greedy"])
def test_generate_with_the_processor_samples_what_dgrpo_samples(model, tokenizer, batch, params):
    pad = tokenizer.eos_token_id
    prompts = BATCHES[batch]
    seeds = [completion_seed(3, 0, 0, i, 0) for i in range(len(prompts))]
    eos = _stop_token(model, prompts, seeds, params, pad)
    ours = sample(model, prompts, seeds, params, eos, pad)
    assert seeded_generate(model, prompts, seeds, params, eos, pad) == ours
    # raw generate, sampling with warpers of its own after the processor: they cannot move the choice
    ids, mask = left_pad(prompts, pad)
    out = model.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=0.5, top_k=50, top_p=0.8,
                         max_new_tokens=params.max_new_tokens, eos_token_id=eos, pad_token_id=pad,
                         logits_processor=LogitsProcessorList([SeededLogitsProcessor(seeds, params)]))
    raw = [row[: row.index(eos) + 1] if eos in row else row for row in out[:, ids.shape[1]:].tolist()]
    assert raw == ours
    if params.temperature:  # the noise decides: other seeds give other completions
        assert sample(model, prompts, [s + 1 for s in seeds], params, eos, pad) != ours
    assert len(prompts) == 1 or len({len(c) for c in ours}) > 1  # eos met at varied steps


def test_num_return_sequences_takes_one_seed_per_row(model, tokenizer):
    pad = tokenizer.eos_token_id
    params = SamplingParams(10, 1.0, 12)
    prompts, seeds = [SHORT, MID], [11, 12, 13, 14]  # rows: SHORT, SHORT, MID, MID
    ids, mask = left_pad(prompts, pad)
    out = model.generate(input_ids=ids, attention_mask=mask, do_sample=True, num_return_sequences=2,
                         max_new_tokens=12, eos_token_id=pad, pad_token_id=pad,
                         logits_processor=LogitsProcessorList([SeededLogitsProcessor(seeds, params)]))
    got = [row[: row.index(pad) + 1] if pad in row else row for row in out[:, ids.shape[1]:].tolist()]
    assert got == sample(model, [SHORT, SHORT, MID, MID], seeds, params, pad, pad)


def test_replay_accepts_generated_completions_from_their_seeds_only(model, tokenizer):
    pad = tokenizer.eos_token_id
    params = SamplingParams(10, 1.0, 16)
    prompts = BATCHES["left padding"] * 2
    seeds = list(range(40, 48))
    eos = _stop_token(model, prompts, seeds, params, pad)
    comps = seeded_generate(model, prompts, seeds, params, eos, pad)
    padded, mask = left_pad(prompts, pad)  # the prompt ids as generate saw them, left padding included, and its mask
    ok = replay_verdicts(comps, seeds, params, eos_id=eos, pad_id=pad, model=model, prompt_ids=padded.tolist(),
                         prompt_mask=mask.tolist())
    assert [v.accepted for v in ok] == [True] * 8
    wrong = replay_verdicts(comps, [s + 100 for s in seeds], params, eos_id=eos, pad_id=pad, model=model, prompt_ids=prompts)
    assert not any(v.accepted for v in wrong)


def test_the_processor_refuses_what_it_cannot_replay(model, tokenizer):
    pad = tokenizer.eos_token_id
    params = SamplingParams(10, 1.0, 4)
    ids, mask = left_pad([SHORT, MID], pad)
    kw = dict(input_ids=ids, attention_mask=mask, do_sample=False, eos_token_id=pad, pad_token_id=pad)
    with pytest.raises(ValueError, match="the batch has 2 rows for 3 seeds"):
        model.generate(**kw, max_new_tokens=4, logits_processor=LogitsProcessorList([SeededLogitsProcessor([1, 2, 3], params)]))
    with pytest.raises(ValueError, match="past params.max_new_tokens=4"):
        model.generate(**kw, max_new_tokens=6, logits_processor=LogitsProcessorList([SeededLogitsProcessor([1, 2], params)]))
    used = SeededLogitsProcessor([1, 2], params)
    model.generate(**kw, max_new_tokens=2, logits_processor=LogitsProcessorList([used]))
    with pytest.raises(ValueError, match="reused by a second generate call"):
        model.generate(**{**kw, "input_ids": ids.flip(0), "attention_mask": mask.flip(0)}, max_new_tokens=2,
                       logits_processor=LogitsProcessorList([used]))
    with pytest.raises(ValueError, match="float32"):
        seeded_generate(model.to(torch.bfloat16), [SHORT], [1], params, pad, pad)
