"""The framework-neutral API: each check from prompt ids, completion ids, seeds and a model or logits."""

import pytest
import torch

from dgrpo.policy.sampling import SamplingParams, sample
from dgrpo.policy.scoring import group_logits
from dgrpo.verify import (Judge, Replay, Steps, TopK, Verifier, completion_logits, judge_verdicts, replay_verdicts,
                          step_verdicts, topk_verdicts)
from dgrpo.verify.judge import Judgment

PARAMS = SamplingParams(top_k=10, temperature=1.0, max_new_tokens=12)


def _batch(model, eos):
    """Two prompts × 4 honest seeded completions, then one tampered copy of each prompt's first."""
    prompts = [[5, 6, 7, 8]] * 4 + [[9, 10, 11]] * 4
    seeds = list(range(100, 108))
    outs = sample(model, prompts, seeds, PARAMS, eos, eos)
    tampered = []
    for i in (0, 4):
        with torch.no_grad():
            lg = group_logits(model, prompts[i], [outs[i]], eos)[0]
        ids = list(outs[i])
        ids[1] = int(lg[1].argsort()[0])  # the least likely token at position 1
        tampered.append(ids)
    return prompts + [prompts[0], prompts[4]], outs + tampered, seeds + [100, 104]


def test_completion_logits_match_one_group_forward_per_prompt(model, tokenizer):
    eos = tokenizer.eos_token_id
    prompts, comps, _ = _batch(model, eos)
    rows = completion_logits(model, prompts, comps, eos)
    with torch.no_grad():
        second = group_logits(model, prompts[4], comps[4:8], eos)  # the second prompt's group alone
    for g in range(4):
        assert rows[4 + g].shape == (len(comps[4 + g]), len(tokenizer))
        assert torch.allclose(rows[4 + g], second[g, : len(comps[4 + g])], atol=1e-5)


def test_topk_from_a_model_or_from_logits_rejects_exactly_the_tampered(model, tokenizer):
    eos = tokenizer.eos_token_id
    prompts, comps, _ = _batch(model, eos)
    by_model = topk_verdicts(comps, k=10, eos_id=eos, model=model, prompt_ids=prompts, decode=tokenizer.decode)
    by_logits = topk_verdicts(comps, k=10, eos_id=eos, logits=completion_logits(model, prompts, comps, eos))
    assert [v.accepted for v in by_model] == [True] * 8 + [False, False]
    assert [v.accepted for v in by_logits] == [v.accepted for v in by_model]
    assert by_model[8].position == 1 and "outside top-10" in by_model[8].reason
    with pytest.raises(ValueError, match="pass logits="):
        topk_verdicts(comps, k=10, eos_id=eos)


@pytest.mark.parametrize("method", ["fast", "regenerate"])
def test_replay_accepts_the_claimed_seeds_and_rejects_a_wrong_seed_or_a_tampered_token(model, tokenizer, method):
    eos = tokenizer.eos_token_id
    prompts, comps, seeds = _batch(model, eos)
    seeds = seeds[:8] + seeds[8:] + [None]
    comps, prompts = comps + [comps[0]], prompts + [prompts[0]]
    seeds[3] = 999  # completion 3 with another seed
    v = replay_verdicts(comps, seeds, PARAMS, eos_id=eos, model=model, prompt_ids=prompts, method=method)
    assert [x.accepted for x in v] == [True, True, True, False, True, True, True, True, False, False, False]
    assert v[10].reason == "no sampling seed claimed"


def test_step_and_judge_verdicts_give_reasons():
    v = step_verdicts(["2 + 3 = 5 so the answer is 5", "we get 2 + 2 = 5, so 5"])
    assert v[0].accepted and not v[1].accepted
    assert "2 + 2" in v[1].reason and v[1].position == "we get 2 + 2 = 5, so 5".index("2 + 2")

    class Replies:  # a judge server's replies, by completion
        def judge_batch(self, pairs):
            return [Judgment("yes" if "fine" in c else "no", f"judge said {'YES' if 'fine' in c else 'NO'!r}")
                    for _, c in pairs]

    j = judge_verdicts(Replies(), ["q", "q"], ["a fine answer", "hail to the thief"])
    assert [x.accepted for x in j] == [True, False] and j[1].reason == "judge said 'NO'"


def test_verifier_runs_checks_in_order_on_what_is_still_accepted(model, tokenizer):
    eos = tokenizer.eos_token_id
    prompts, comps, seeds = _batch(model, eos)
    texts = ["2 + 2 = 4"] * 10
    texts[2] = "2 + 2 = 5"  # honest tokens, false text: only the step checker sees it
    seen = []

    class Count:
        def judge_batch(self, pairs):
            seen.extend(pairs)
            return [Judgment("yes", "judge said 'YES'") for _ in pairs]

    verifier = Verifier([TopK(k=10), Replay(PARAMS), Steps(), Judge(Count())], model=model, eos_id=eos,
                        decode=tokenizer.decode)
    v = verifier.verify(prompts, comps, seeds=seeds, texts=texts, questions=["q"] * 10)
    assert [x.defense for x in v if not x.accepted] == ["steps", "topk", "topk"]
    assert [i for i, x in enumerate(v) if not x.accepted] == [2, 8, 9]
    assert len(seen) == 7  # the judge saw only the 7 completions every earlier check accepted
    assert set(verifier.seconds) == {"topk", "replay", "steps", "judge"}


@pytest.mark.parametrize("seed", range(6))
def test_fast_replay_names_the_edited_position_as_regeneration_does(model, tokenizer, seed):
    """One token replaced by another of the top-10 at position 0, 3 or 6: the tokens after it were sampled for the
    honest prefix and fall outside the top-10; fast replay named the first of those (up to 7 for an edit at 0)."""
    eos, prompt = tokenizer.eos_token_id, [5, 6, 7, 8]
    params = SamplingParams(top_k=10, temperature=1.0, max_new_tokens=12)
    honest = sample(model, [prompt], [seed], params, eos, eos)[0]
    logits = completion_logits(model, [prompt], [honest], eos)[0]
    for pos in (0, 3, 6):
        edited = list(honest)
        edited[pos] = next(t for t in logits[pos].topk(10).indices.tolist() if t != honest[pos])
        fast = replay_verdicts([edited], [seed], params, eos_id=eos, model=model, prompt_ids=[prompt])[0]
        assert fast.position == pos and fast.reason.startswith(f"seeded sampling picks another token at position {pos}")
        again = replay_verdicts([edited], [seed], params, eos_id=eos, model=model, prompt_ids=[prompt], method="regenerate")
        assert again[0].position == pos
