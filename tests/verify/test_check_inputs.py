"""What any caller of dgrpo.verify may hand the checks: bf16 is refused in one line, left-padded prompt ids
give the verdicts of unpadded ones, an empty completion gets a verdict of its own, and each generator
setting that makes the checks reject honest work is named in one line."""

from __future__ import annotations

import pytest
import torch
from transformers import GenerationConfig

from dgrpo.errors import SettingError
from dgrpo.policy.sampling import SamplingParams, sample
from dgrpo.verify import Replay, TopK, Verifier, completion_logits, replay_verdicts, topk_verdicts
from dgrpo.verify.generation import check_generation, generation_problems

PARAMS = SamplingParams(top_k=10, temperature=1.0, max_new_tokens=12)
PROMPTS = [[5, 6, 7, 8], [9, 10], [11, 12, 13, 14, 15, 16]]


def _honest(model, eos):
    seeds = [100, 101, 102]
    return sample(model, PROMPTS, seeds, PARAMS, eos, eos), seeds


def _one_line(err) -> str:
    text = str(err.value)
    assert "\n" not in text
    return text


def test_bf16_weights_and_logits_are_refused_in_one_line(model, tokenizer):
    eos = tokenizer.eos_token_id
    comps, seeds = _honest(model, eos)
    logits = completion_logits(model, PROMPTS, comps, eos)
    half = model.to(torch.bfloat16)
    with pytest.raises(SettingError) as err:
        topk_verdicts(comps, k=10, eos_id=eos, model=half, prompt_ids=PROMPTS)
    assert "the scoring model is bfloat16" in _one_line(err) and "float32" in _one_line(err)
    with pytest.raises(SettingError, match="the scoring model is bfloat16"):
        replay_verdicts(comps, seeds, PARAMS, eos_id=eos, model=half, prompt_ids=PROMPTS, method="regenerate")
    with pytest.raises(SettingError, match="topk_verdicts: a logits tensor is bfloat16"):
        topk_verdicts(comps, k=10, eos_id=eos, logits=[lg.to(torch.bfloat16) for lg in logits])
    with pytest.raises(SettingError, match="float16"):
        Verifier([TopK(k=10)], model=model.to(torch.float16), eos_id=eos).verify(PROMPTS, comps)


def test_left_padded_prompts_get_the_verdicts_of_unpadded_ones(model, tokenizer):
    eos = tokenizer.eos_token_id
    comps, seeds = _honest(model, eos)
    width = max(map(len, PROMPTS))
    padded = [[eos] * (width - len(p)) + p for p in PROMPTS]  # as generate's input_ids carry them
    mask = [[0] * (width - len(p)) + [1] * len(p) for p in PROMPTS]  # and its attention_mask
    for a, b in zip(completion_logits(model, padded, comps, eos, mask), completion_logits(model, PROMPTS, comps, eos)):
        assert torch.equal(a, b)
    verifier = Verifier([TopK(k=10), Replay(PARAMS)], model=model, eos_id=eos)
    assert [v.accepted for v in verifier.verify(padded, comps, seeds=seeds, prompt_mask=mask)] == [True] * 3
    regen = replay_verdicts(comps, seeds, PARAMS, eos_id=eos, model=model, prompt_ids=padded, prompt_mask=mask,
                            method="regenerate")
    assert [v.accepted for v in regen] == [True] * 3
    # scored with the padding as context (what the checks did before), the logits are another model's
    with torch.no_grad():
        as_context = model(input_ids=torch.tensor([padded[1] + comps[1]])).logits[0, len(padded[1]) - 1:-1]
    assert (as_context - completion_logits(model, PROMPTS[1:2], comps[1:2], eos)[0]).abs().max() > 1e-2


def test_a_prompt_that_starts_with_the_pad_token_keeps_it(model, tokenizer):
    """Padding is told by the mask, never by value: with pad_id = the first prompt token (a tokenizer whose
    pad is its bos, say), stripping leading pads removed a real token and the checks scored another prompt."""
    eos, pad = tokenizer.eos_token_id, PROMPTS[0][0]
    comps, seeds = _honest(model, eos)
    for a, b in zip(completion_logits(model, PROMPTS, comps, pad), completion_logits(model, PROMPTS, comps, eos)):
        assert torch.equal(a, b)
    verifier = Verifier([TopK(k=10), Replay(PARAMS)], model=model, eos_id=eos, pad_id=pad)
    assert [v.accepted for v in verifier.verify(PROMPTS, comps, seeds=seeds)] == [True] * 3
    regen = replay_verdicts(comps, seeds, PARAMS, eos_id=eos, pad_id=pad, model=model, prompt_ids=PROMPTS,
                            method="regenerate")
    assert [v.accepted for v in regen] == [True] * 3
    # scored without its first token, the first prompt's completion gets other logits
    stripped = completion_logits(model, [PROMPTS[0][1:]], comps[:1], eos)[0]
    assert (stripped - completion_logits(model, PROMPTS[:1], comps[:1], eos)[0]).abs().max() > 1e-2


def test_a_prompt_mask_of_another_length_is_refused(model, tokenizer):
    with pytest.raises(ValueError, match="prompt_mask: a mask of 2 for a prompt of 4 tokens"):
        completion_logits(model, PROMPTS[:1], [[3, 4]], tokenizer.eos_token_id, [[1, 1]])


def test_an_empty_completion_gets_a_verdict_and_the_others_theirs(model, tokenizer):
    eos = tokenizer.eos_token_id
    comps, seeds = _honest(model, eos)
    verdicts = Verifier([TopK(k=10), Replay(PARAMS)], model=model, eos_id=eos).verify(
        PROMPTS + [PROMPTS[0]], comps + [[]], seeds=seeds + [7])
    assert [v.accepted for v in verdicts] == [True, True, True, False]
    assert verdicts[3].defense == "topk" and verdicts[3].reason.startswith("empty completion")
    alone = replay_verdicts([[]], [7], PARAMS, eos_id=eos, model=model, prompt_ids=PROMPTS[:1])
    assert alone[0].reason == "empty completion"


REPLAY, TOPK = Replay(PARAMS), TopK(k=10)
CLEAN_SAMPLING = dict(do_sample=True, top_k=10, max_new_tokens=12, eos_token_id=2)


@pytest.mark.parametrize("settings,checks,seeded,needle", [
    ({**CLEAN_SAMPLING, "top_k": 0}, [TOPK], False, "top_k=0 samples from the whole vocabulary"),
    ({**CLEAN_SAMPLING, "top_k": 50}, [TOPK], False, "top_k=50 samples outside the top-10"),
    ({**CLEAN_SAMPLING, "repetition_penalty": 1.3}, [TOPK], False, "repetition_penalty=1.3 changes the logits"),
    ({**CLEAN_SAMPLING, "no_repeat_ngram_size": 3}, [REPLAY], True, "no_repeat_ngram_size=3"),
    ({**CLEAN_SAMPLING, "suppress_tokens": [5]}, [TOPK], False, "suppress_tokens=[5]"),
    ({**CLEAN_SAMPLING, "min_new_tokens": 2}, [REPLAY], True, "min_new_tokens=2"),
    ({**CLEAN_SAMPLING, "num_beams": 2}, [TOPK], False, "num_beams=2 is beam search"),
    (CLEAN_SAMPLING, [REPLAY], False, "Replay needs dgrpo's seeded sampler"),
    ({**CLEAN_SAMPLING, "max_new_tokens": 20}, [REPLAY], True, "max_new_tokens=20 but Replay's params.max_new_tokens=12"),
    ({**CLEAN_SAMPLING, "eos_token_id": [2, 7]}, [REPLAY], True, "eos_token_id=[2, 7] stops generation at other tokens"),
    # top_k None is not "no top-k": generate fills it (the model's generation_config, then transformers' 50)
    ({**CLEAN_SAMPLING, "top_k": None}, [TOPK], False, "generation config: top_k is unset, so generate samples with the "
     "model's generation_config.top_k or transformers' default 50, and TopK(k=10) rejects honest completions"),
    ({**CLEAN_SAMPLING, "stop_strings": ["a"]}, [REPLAY], True, "stop_strings=['a'] ends generation before eos"),
])
def test_each_setting_that_makes_the_checks_reject_honest_work_is_named(settings, checks, seeded, needle):
    config = GenerationConfig(**settings)
    with pytest.raises(SettingError) as err:
        check_generation(config, checks, seeded=seeded, eos_id=2)
    assert needle in _one_line(err)
    assert generation_problems(settings, checks, seeded=seeded, eos_id=2)[0] == str(err.value)  # a mapping reads the same


def test_a_generator_that_fits_the_checks_passes(model):
    assert generation_problems(GenerationConfig(**CLEAN_SAMPLING), [TOPK], model=model) == []
    assert generation_problems(GenerationConfig(**{**CLEAN_SAMPLING, "top_k": 5, "top_p": 0.9}), [TOPK]) == []  # narrower: inside
    assert generation_problems(GenerationConfig(**CLEAN_SAMPLING), [TOPK, REPLAY], seeded=True, eos_id=2) == []
    assert generation_problems(GenerationConfig(do_sample=False, max_new_tokens=12), [TOPK]) == []  # greedy: top-1
