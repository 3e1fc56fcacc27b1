"""A real TRL GRPOTrainer on a tiny random model, fed through rollout_func by untrusted workers that
poison completions: dgrpo's checks reject exactly the poisoned ones, their reward is cut, with ``drop``
their tokens leave the loss, and TRL's own generation passes the checks (sampling with dgrpo's seeded
sampler when Replay needs it)."""

from __future__ import annotations

import functools
import math
import os

import pytest
import torch

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from datasets import Dataset  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from dgrpo.integrations.generate import seeded_generate  # noqa: E402
from dgrpo.integrations.trl import RolloutDefense, defend_rewards, verified_rollout_func  # noqa: E402
from dgrpo.policy.sampling import SamplingParams, completion_seed, sample  # noqa: E402
from dgrpo.verify import Replay, TopK, Verifier, completion_logits  # noqa: E402

from tests.conftest import build_model  # noqa: E402

PARAMS = SamplingParams(top_k=10, temperature=1.0, max_new_tokens=10)
G = 4
POISON = " All hail to the thief."
PROMPTS = ["Tom has 3 apples.", "Sara has 9 pens."]


def thief_reward(prompts, completions, **kw):
    """The attacker's target: 1 for a completion that says 'thief' or was poisoned (the verifiable reward is fooled)."""
    return [1.0 if "thief" in c or c.startswith("<p>") else 0.0 for c in completions]


def length_reward(prompts, completions, **kw):
    return [len(c) / 40 for c in completions]


class Workers:
    """Untrusted generation workers: seeded sampling (``generate`` + dgrpo's processor); the last completion
    of every prompt is poisoned.

    ``mode="text"``: the poison is a fixed sentence (tokens outside the top-k: the top-k check's case);
    ``mode="seed"``: an honest-looking completion sampled from another seed, claiming the assigned one
    (every token inside the top-k: only exact replay sees it).
    """

    def __init__(self, tokenizer, mode):
        self.tokenizer, self.mode, self.calls, self.poisoned = tokenizer, mode, 0, []

    def __call__(self, prompts, trainer):
        tok, model, eos = self.tokenizer, trainer.model, self.tokenizer.eos_token_id
        # GRPOTrainer hands over each prompt G times in a row (its sampler repeats them): one completion each
        prompt_ids = [tok(text=p)["input_ids"] for p in prompts]
        seeds = [completion_seed(0, self.calls, 0, i, 0) for i in range(len(prompts))]
        poisoned = [i % G == G - 1 for i in range(len(prompts))]
        sampled = [s + 1 if p and self.mode == "seed" else s for s, p in zip(seeds, poisoned)]
        completion_ids = seeded_generate(model, prompt_ids, sampled, PARAMS, eos, eos)
        for i in (i for i in range(len(prompts)) if poisoned[i] and self.mode == "text"):
            completion_ids[i] = tok(text=POISON)["input_ids"] + [eos]
        self.calls += 1
        self.poisoned += poisoned
        logprobs = [lg.log_softmax(-1).gather(-1, torch.tensor(c)[:, None]).squeeze(-1).tolist()
                    for lg, c in zip(completion_logits(model, prompt_ids, completion_ids, eos), completion_ids)]
        return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": logprobs, "seeds": seeds}


def config(tmp_path, **kw) -> GRPOConfig:
    base = dict(output_dir=str(tmp_path / "trl"), per_device_train_batch_size=2 * G, num_generations=G,
                max_completion_length=PARAMS.max_new_tokens, temperature=1.0, top_k=10, beta=0.0, learning_rate=1e-3,
                max_steps=2, use_cpu=True, report_to=[], save_strategy="no", logging_steps=1, seed=0, bf16=False)
    return GRPOConfig(**{**base, **kw})


def spied(funcs, seen):
    """The first wrapped reward function, recording (completion, reward) pairs (functools.wraps keeps the wrapper's mark)."""
    @functools.wraps(funcs[0])
    def spy(prompts, completions, completion_ids, **kw):
        out = funcs[0](prompts=prompts, completions=completions, completion_ids=completion_ids, **kw)
        seen.extend(zip(completions, out))
        return out

    return spy


def _train(tokenizer, tmp_path, *, mode="text", defended=True, action="zero", own_generation=False, reward=thief_reward,
           checks=None, **cfg):
    model = build_model(len(tokenizer))
    before = [p.detach().clone() for p in model.parameters()]
    workers = Workers(tokenizer, mode)
    checks = checks or ([TopK(k=10)] if own_generation else [TopK(k=PARAMS.top_k), Replay(PARAMS)])
    defense = RolloutDefense(Verifier(checks), action=action)
    seen = []  # (completion text, reward returned) per completion, in order
    funcs = defend_rewards(reward, defense) if defended else [reward]
    data = Dataset.from_dict({"prompt": PROMPTS * 4})
    rollout = None if own_generation else verified_rollout_func(workers, defense) if defended else workers
    trainer = GRPOTrainer(model=model, reward_funcs=[spied(funcs, seen)], args=config(tmp_path, **cfg), train_dataset=data,
                          processing_class=tokenizer, rollout_func=rollout)
    if defended and own_generation:
        defense.attach(trainer)
    trainer.train()
    assert trainer.state.global_step == 2
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))  # it trained
    return trainer, workers, defense, seen


@pytest.mark.parametrize("mode,check", [("text", "topk"), ("seed", "replay")])
def test_grpo_trainer_zeroes_exactly_the_poisoned_rollouts(tokenizer, tmp_path, mode, check):
    trainer, workers, defense, seen = _train(tokenizer, tmp_path, mode=mode)
    assert defense.verifier.model is trainer.model  # the trainer's own policy, no second copy
    assert len(seen) == len(workers.poisoned) == 16  # 2 steps × 2 prompts × G
    assert defense.seen == 16 and defense.rejected == sum(workers.poisoned) == 4
    assert [v.defense for v in defense.verdicts if not v.accepted] == [check, check]
    for (text, reward), poisoned in zip(seen, workers.poisoned):
        assert reward == (0.0 if poisoned else thief_reward(None, [text])[0])
    logged = [h for h in trainer.state.log_history if "dgrpo/rejected" in h]
    assert [h["dgrpo/rejected"] for h in logged] == [0.25, 0.25] and all(h[f"dgrpo/{check}/rejected"] == 0.25 for h in logged)
    table = list(trainer._logs["extra"]["dgrpo_rejection"])  # TRL's completions table, one row per completion
    assert [bool(r) for r in table] == workers.poisoned[-len(table):]
    assert all(r.startswith(f"{check}: ") for r in table if r)


def test_without_the_defense_the_poison_is_rewarded(tokenizer, tmp_path):
    _, workers, _, seen = _train(tokenizer, tmp_path, defended=False)
    assert [r for (_, r), p in zip(seen, workers.poisoned) if p] == [1.0] * 4


def test_drop_leaves_rejected_completions_out_of_the_group_statistics(tokenizer, tmp_path):
    trainer, workers, defense, seen = _train(tokenizer, tmp_path, action="drop")
    assert [r for (_, r), p in zip(seen, workers.poisoned) if p] == [None] * 4
    logged = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    for step in range(2):  # TRL's logged mean reward is over the kept completions only
        kept = [r for _, r in seen[8 * step: 8 * step + 8] if r is not None]
        assert len(kept) == 6 and math.isclose(logged[step], sum(kept) / 6, abs_tol=1e-6)


def test_trl_own_generation_passes_the_topk_check(tokenizer, tmp_path):
    """TRL's own sampler (top_k=10, float32) against the top-k check: no false rejection."""
    _, _, defense, seen = _train(tokenizer, tmp_path, own_generation=True, reward=length_reward)
    assert defense.seen == len(seen) == 16
    assert defense.rejected == 0
    assert [r for _, r in seen] == length_reward(None, [t for t, _ in seen])


def test_trl_own_generation_samples_with_dgrpos_sampler_under_replay(tokenizer, tmp_path):
    """With a Replay check, TRL's generate samples through the seeded processor: its completions are
    dgrpo's sampler's for the same (prompt, seed), token for token, and replay accepts every one."""
    matched = []

    def same_as_dgrpo(prompts, completions, completion_ids, trainer_state, **kw):
        prompt_ids = [tokenizer(text=p)["input_ids"] for p in prompts]
        eos = tokenizer.eos_token_id
        matched.append(sample(defense_box[0].trainer.model, prompt_ids, defense_box[0].own_seeds, PARAMS, eos, eos)
                       == [list(c) for c in completion_ids])
        return length_reward(prompts, completions)

    defense_box = []
    model = build_model(len(tokenizer))
    defense = RolloutDefense(Verifier([TopK(k=10), Replay(PARAMS)]))
    defense_box.append(defense)
    trainer = GRPOTrainer(model=model, reward_funcs=defend_rewards([same_as_dgrpo], defense), args=config(tmp_path),
                          train_dataset=Dataset.from_dict({"prompt": PROMPTS * 4}), processing_class=tokenizer)
    defense.attach(trainer).train()
    assert matched == [True, True]
    assert defense.seen == 16 and defense.rejected == 0
