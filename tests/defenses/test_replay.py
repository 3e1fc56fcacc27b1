import pytest
import torch

from dgrpo.config import load_config
from dgrpo.defenses.replay import ReplayDefense, ReplayDefenseConfig
from dgrpo.verify.replay import replay_mismatch
from dgrpo.policy.policy import Policy
from dgrpo.policy.sampling import SamplingParams, sample
from dgrpo.policy.scoring import group_logits
from dgrpo.types import Rollout

PARAMS = SamplingParams(top_k=10, temperature=1.0, max_new_tokens=16)


def _defense(model, tokenizer, method):
    cfg = load_config(overrides=["sampling.max_new_tokens=16"])
    return ReplayDefense(ReplayDefenseConfig(method=method), cfg, Policy("tiny", model, tokenizer, PARAMS), task=None)


def test_same_seed_same_tokens_alone_and_in_padded_batch_of_4(model, tokenizer):
    eos = tokenizer.eos_token_id
    prompts = [[5, 6, 7], [8, 9, 10, 11, 12, 13], [14], [15, 16]]
    batch = sample(model, prompts, [7, 8, 9, 10], PARAMS, eos, eos)
    assert sample(model, [prompts[0]], [7], PARAMS, eos, eos)[0] == batch[0]


@pytest.mark.parametrize("method", ["fast", "regenerate"])
def test_replayable_accepted_and_one_changed_token_rejected(model, tokenizer, method):
    eos = tokenizer.eos_token_id
    prompt = [5, 6, 7, 8]
    seeds = list(range(30))
    outs = sample(model, [prompt] * 30, seeds, PARAMS, eos, eos)
    honest = [Rollout("p", prompt, o, "", 0, seed=s) for o, s in zip(outs, seeds)]
    tampered = []
    for r in honest[:10]:
        ids = list(r.completion_ids)
        t = len(ids) // 2
        ids[t] = next(i for i in range(5, 400) if i != ids[t] and i != eos)  # any other token
        tampered.append(Rollout("p", prompt, ids, "", 0, seed=r.seed))
    wrong_seed = [Rollout("p", prompt, outs[0], "", 0, seed=999)]
    rollouts = honest + tampered + wrong_seed
    with torch.no_grad():
        logits = group_logits(model, prompt, [r.completion_ids for r in rollouts], eos)
    verdicts = _defense(model, tokenizer, method).inspect(rollouts, logits)
    assert all(v.accepted for v in verdicts[:30])
    assert not any(v.accepted for v in verdicts[30:])


def test_length_rules():
    logits = torch.zeros(4, 20)
    params = SamplingParams(top_k=20, temperature=1.0, max_new_tokens=4)
    assert replay_mismatch(logits, [1, 2], 0, params, eos_id=3)[1].startswith("stops before eos")
    assert replay_mismatch(logits, [1, 3, 2], 0, params, eos_id=3)[1] == "continues after eos"
    assert "exceed" in replay_mismatch(torch.zeros(6, 20), [1, 1, 1, 1, 1], 0, params, eos_id=3)[1]
