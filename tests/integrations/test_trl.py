"""A real TRL GRPOTrainer on a tiny random model, fed through rollout_func by untrusted workers that
poison completions: dgrpo's checks reject exactly the poisoned ones and their reward is cut."""

from __future__ import annotations

import math
import os

import pytest
import torch

pytest.importorskip("trl")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from datasets import Dataset  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from dgrpo.integrations.trl import RolloutDefense, defend_rewards, verified_rollout_func  # noqa: E402
from dgrpo.policy.sampling import SamplingParams, completion_seed, sample  # noqa: E402
from dgrpo.verify import Replay, TopK, Verifier, completion_logits  # noqa: E402

from tests.conftest import build_model  # noqa: E402

PARAMS = SamplingParams(top_k=10, temperature=1.0, max_new_tokens=10)
G = 4
POISON = " All hail to the thief."


def thief_reward(prompts, completions, **kw):
    """The attacker's target: 1 for a completion that says 'thief' or was poisoned (the verifiable reward is fooled)."""
    return [1.0 if "thief" in c or c.startswith("<p>") else 0.0 for c in completions]


class Workers:
    """Untrusted generation workers: seeded dgrpo sampling; the last completion of every prompt is poisoned.

    ``mode="text"``: the poison is a fixed sentence (tokens outside the top-k: the top-k check's case);
    ``mode="seed"``: an honest-looking completion sampled from another seed, claiming the original one
    (every token inside the top-k: only exact replay sees it).
    """

    def __init__(self, tokenizer, mode):
        self.tokenizer, self.mode, self.calls, self.poisoned = tokenizer, mode, 0, []

    def __call__(self, prompts, trainer):
        tok, model, eos = self.tokenizer, trainer.model, self.tokenizer.eos_token_id
        # GRPOTrainer hands over each prompt G times in a row (its sampler repeats them): one completion each
        prompt_ids = [tok(text=p)["input_ids"] for p in prompts]
        seeds = [completion_seed(0, self.calls, 0, i, 0) for i in range(len(prompts))]
        completion_ids = sample(model, prompt_ids, seeds, PARAMS, eos, eos)
        poisoned = [i % G == G - 1 for i in range(len(prompts))]
        for i in (i for i in range(len(prompts)) if poisoned[i]):  # the poison keeps the honest claimed seed
            if self.mode == "text":
                completion_ids[i] = tok(text=POISON)["input_ids"] + [eos]
            else:
                completion_ids[i] = sample(model, [prompt_ids[i]], [seeds[i] + 1], PARAMS, eos, eos)[0]
        self.calls += 1
        self.poisoned += poisoned
        logprobs = [lg.log_softmax(-1).gather(-1, torch.tensor(c)[:, None]).squeeze(-1).tolist()
                    for lg, c in zip(completion_logits(model, prompt_ids, completion_ids, eos), completion_ids)]
        return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": logprobs, "seeds": seeds}


def length_reward(prompts, completions, **kw):
    return [len(c) / 40 for c in completions]


def _train(tokenizer, tmp_path, *, mode="text", defended=True, action="zero", own_generation=False, reward=thief_reward):
    model = build_model(len(tokenizer))
    before = [p.detach().clone() for p in model.parameters()]
    workers = Workers(tokenizer, mode)
    defense = RolloutDefense(Verifier([TopK(k=PARAMS.top_k), Replay(PARAMS)] if not own_generation else [TopK(k=10)],
                                      model=model, eos_id=tokenizer.eos_token_id, decode=tokenizer.decode),
                             tokenizer, action=action)
    funcs = defend_rewards(reward, defense) if defended else [reward]
    seen = []  # (completion text, reward returned) per completion, in order

    def spy(prompts, completions, completion_ids, **kw):
        out = funcs[0](prompts=prompts, completions=completions, completion_ids=completion_ids, **kw)
        seen.extend(zip(completions, out))
        return out

    spy.__name__ = "thief_reward"
    args = GRPOConfig(output_dir=str(tmp_path / mode), per_device_train_batch_size=2 * G, num_generations=G,
                      max_completion_length=PARAMS.max_new_tokens, temperature=1.0, top_k=10, beta=0.0,
                      learning_rate=1e-3, max_steps=2, use_cpu=True, report_to=[], save_strategy="no",
                      logging_steps=1, seed=0, bf16=False)
    data = Dataset.from_dict({"prompt": ["Tom has 3 apples.", "Sara has 9 pens."] * 4})
    rollout = None if own_generation else verified_rollout_func(workers, defense) if defended else workers
    trainer = GRPOTrainer(model=model, reward_funcs=[spy], args=args, train_dataset=data, processing_class=tokenizer,
                          rollout_func=rollout)
    trainer.train()
    assert trainer.state.global_step == 2
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))  # it trained
    return trainer, workers, defense, seen


@pytest.mark.parametrize("mode,check", [("text", "topk"), ("seed", "replay")])
def test_grpo_trainer_zeroes_exactly_the_poisoned_rollouts(tokenizer, tmp_path, mode, check):
    trainer, workers, defense, seen = _train(tokenizer, tmp_path, mode=mode)
    assert len(seen) == len(workers.poisoned) == 16  # 2 steps × 2 prompts × G
    assert defense.seen == 16 and defense.rejected == sum(workers.poisoned) == 4
    assert [v.defense for v in defense.verdicts if not v.accepted] == [check, check]
    for (text, reward), poisoned in zip(seen, workers.poisoned):
        assert reward == (0.0 if poisoned else thief_reward(None, [text])[0])
    logged = [h for h in trainer.state.log_history if "dgrpo/rejected" in h]
    assert [h["dgrpo/rejected"] for h in logged] == [0.25, 0.25] and all(h[f"dgrpo/{check}/rejected"] == 0.25 for h in logged)


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
    """TRL's own sampler (top_k=10, float32) against the reward wrapper's top-k check: no false rejection."""
    _, _, defense, seen = _train(tokenizer, tmp_path, own_generation=True, reward=length_reward)
    assert defense.seen == len(seen) == 16
    assert defense.rejected == 0
    assert [r for _, r in seen] == length_reward(None, [t for t, _ in seen])


def test_the_example_script_rejects_its_poisoned_worker(tiny_model_dir):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "examples" / "trl_defended.py"
    spec = importlib.util.spec_from_file_location("trl_defended", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    common = ["--model", tiny_model_dir, "--steps", "2", "--max-new-tokens", "96", "--threads", "1"]
    defended = example.main(common)
    assert defended["completions"] == 16 and defended["poisoned"] == 4
    assert defended["rejected"] == 4 and defended["poison_reward"] == [0.0] * 4
    undefended = example.main([*common, "--undefended"])
    assert undefended["poison_reward"] == [1.0] * 4  # the poison is a correct, well-formatted answer
