"""What a ``rollout_func`` worker returns is taken apart before TRL sees it: tokens after the first eos are
cut (TRL would train on and reward them while the checks read only up to the eos), an empty completion
gets a verdict instead of crashing TRL, and a completion answering another prompt than the trainer's is
rejected."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from datasets import Dataset  # noqa: E402
from trl import GRPOTrainer  # noqa: E402

from dgrpo.errors import SettingError  # noqa: E402
from dgrpo.integrations.trl import RolloutDefense, defend_rewards, verified_rollout_func  # noqa: E402
from dgrpo.policy.sampling import SamplingParams  # noqa: E402
from dgrpo.verify import Replay, TopK, Verifier  # noqa: E402

from tests.conftest import build_model  # noqa: E402
from tests.integrations.test_trl import G, POISON, PROMPTS, Workers, config, spied, thief_reward  # noqa: E402


class Tampering(Workers):
    """Honest seeded workers; ``tamper(out, i)`` edits the rollout dict at each last-of-group row i."""

    def __init__(self, tokenizer, tamper):
        super().__init__(tokenizer, "honest")
        self.tamper, self.honest = tamper, []

    def __call__(self, prompts, trainer):
        out = super().__call__(prompts, trainer)
        self.honest.append([list(c) for c in out["completion_ids"]])
        for i in range(len(prompts)):
            if i % G == G - 1:
                self.tamper(self, out, i)
        return out


def _train(tokenizer, tmp_path, tamper, checks=None, steps=2, **cfg):
    model = build_model(len(tokenizer))
    workers = Tampering(tokenizer, tamper)
    defense = RolloutDefense(Verifier(checks or [TopK(k=10)]))
    seen, ids_seen = [], []

    def reward(prompts, completions, completion_ids, **kw):
        ids_seen.extend(list(c) for c in completion_ids)
        return thief_reward(prompts, completions)

    reward.__name__ = "thief_reward"
    trainer = GRPOTrainer(model=model, reward_funcs=[spied(defend_rewards([reward], defense), seen)],
                          args=config(tmp_path, max_steps=steps, **cfg), processing_class=tokenizer,
                          train_dataset=Dataset.from_dict({"prompt": PROMPTS * 4}),
                          rollout_func=verified_rollout_func(workers, defense))
    trainer.train()
    return trainer, workers, defense, seen, ids_seen


def test_tokens_after_eos_never_reach_trl_nor_the_rewards(tokenizer, tmp_path):
    """A worker appends the poison after an eos: the checks read up to the eos only, so TRL must get the
    completion cut there (else the reward reads "thief" and the loss trains the tail, unchecked)."""
    eos = tokenizer.eos_token_id
    tail = tokenizer(text=POISON)["input_ids"]

    def after_eos(workers, out, i):
        head = out["completion_ids"][i][:3]
        out["completion_ids"][i] = head + [eos] + tail
        out["logprobs"][i] = out["logprobs"][i][:3] + [0.0] * (1 + len(tail))

    trainer, workers, defense, seen, ids_seen = _train(tokenizer, tmp_path, after_eos)
    assert trainer.state.global_step == 2
    want = [h[:3] + [eos] if i % G == G - 1 else h for step in workers.honest for i, h in enumerate(step)]
    assert ids_seen == want and len(want) == 16  # cut after the eos; the honest ones untouched
    texts = tokenizer.batch_decode(want, skip_special_tokens=True)
    assert [t for t, _ in seen] == texts and not any(POISON.strip() in t for t in texts)
    assert [r for _, r in seen] == thief_reward(None, texts)  # the poison after the eos is never rewarded


def test_an_empty_completion_gets_a_verdict_and_the_trainer_goes_on(tokenizer, tmp_path):
    def empty(workers, out, i):
        out["completion_ids"][i], out["logprobs"][i] = [], []

    trainer, workers, defense, seen, ids_seen = _train(tokenizer, tmp_path, empty)
    assert trainer.state.global_step == 2
    assert defense.seen == 16 and defense.rejected == 4
    rejected = [(i, v.defense, v.reason) for i, v in enumerate(defense.verdicts) if not v.accepted]
    assert [(i, d) for i, d, _ in rejected] == [(3, "rollout"), (7, "rollout")]
    assert all(r.startswith("empty completion") for _, _, r in rejected)
    assert [ids_seen[i] for i in (3, 7, 11, 15)] == [[tokenizer.eos_token_id]] * 4  # one masked filler token
    logged = [h for h in trainer.state.log_history if "dgrpo/rejected" in h]
    assert [h["dgrpo/rollout/rejected"] for h in logged] == [0.25, 0.25]


def test_workers_sampling_at_another_temperature_than_the_trainers_are_refused_on_the_first_batch(tokenizer, tmp_path):
    """The workers agreed on Replay's params (temperature 0.7); GRPOConfig scores at 1.0: one line, no step."""
    workers_params = SamplingParams(top_k=10, temperature=0.7, max_new_tokens=10)
    with pytest.raises(SettingError) as err:
        _train(tokenizer, tmp_path, lambda *a: None, checks=[Replay(workers_params)], temperature=1.0)
    text = str(err.value)
    assert text.startswith("GRPOConfig.temperature=1.0 but Replay's params.temperature=0.7") and "\n" not in text
