import torch

from dgrpo.config import load_config
from dgrpo.defenses.topk import TopKDefense, TopKDefenseConfig
from dgrpo.verify.topk import outside_topk
from dgrpo.policy.policy import Policy
from dgrpo.policy.sampling import SamplingParams, sample
from dgrpo.policy.scoring import group_logits
from dgrpo.types import Rollout

PARAMS = SamplingParams(top_k=10, temperature=1.0, max_new_tokens=16)


def _defense(model, tokenizer, k=None):
    cfg = load_config()
    return TopKDefense(TopKDefenseConfig(k=k), cfg, Policy("tiny", model, tokenizer, PARAMS))


def test_ties_at_kth_logit_count_inside():
    logits = torch.tensor([[[5.0, 4.0, 3.0, 3.0, 1.0]]])  # k=3: third and fourth tie at 3.0
    mask = torch.ones(1, 1)
    assert not outside_topk(logits, torch.tensor([[3]]), mask, 3)[0, 0]
    assert outside_topk(logits, torch.tensor([[4]]), mask, 3)[0, 0]


def test_honest_completions_never_rejected(model, tokenizer):
    eos = tokenizer.eos_token_id
    defense = _defense(model, tokenizer)
    prompts = [[5, 6, 7, 8], [9, 10], [11, 12, 13]]
    rejected = total = 0
    for p_i, prompt in enumerate(prompts):
        seeds = list(range(p_i * 1000, p_i * 1000 + 70))
        outs = sample(model, [prompt] * len(seeds), seeds, PARAMS, eos, eos)
        rollouts = [Rollout("p", prompt, o, "", 0, seed=s) for o, s in zip(outs, seeds)]
        with torch.no_grad():
            logits = group_logits(model, prompt, outs, eos)
        verdicts = defense.inspect(rollouts, logits)
        rejected += sum(not v.accepted for v in verdicts)
        total += len(verdicts)
    assert total == 210
    assert rejected == 0


def test_forced_token_outside_topk_rejected_at_its_position(model, tokenizer):
    eos = tokenizer.eos_token_id
    prompt = [5, 6, 7]
    (honest,) = sample(model, [prompt], [42], PARAMS, eos, eos)
    forced = list(honest)
    position = min(3, len(forced) - 1)
    with torch.no_grad():
        logits = group_logits(model, prompt, [forced], eos)[0]
    forced[position] = int(logits[position].argsort()[0])  # the least likely token: far outside top-10
    with torch.no_grad():
        logits = group_logits(model, prompt, [honest, forced], eos)
    verdicts = _defense(model, tokenizer).inspect([Rollout("p", prompt, honest, "", 0), Rollout("p", prompt, forced, "", 0)], logits)
    assert verdicts[0].accepted
    assert not verdicts[1].accepted and verdicts[1].position == position
