"""A ``rollout_func`` reaches TRL only through :func:`verified_rollout_func`: a raw one (passed to GRPOTrainer
as it is, with ``defense.attach`` called by hand) would hand TRL tails after eos, empty completions, other
prompts' answers and its own ``dgrpo_rejection`` verdicts, unchecked."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from datasets import Dataset  # noqa: E402
from trl import GRPOTrainer  # noqa: E402

from dgrpo.errors import SettingError  # noqa: E402
from dgrpo.integrations.trl import RolloutDefense, defend_rewards, verified_rollout_func  # noqa: E402
from dgrpo.verify import TopK, Verifier  # noqa: E402

from tests.conftest import build_model  # noqa: E402
from tests.integrations.test_trl import PROMPTS, Workers, config, thief_reward  # noqa: E402


def _trainer(tokenizer, tmp_path, defense, rollout, **cfg):
    return GRPOTrainer(model=build_model(len(tokenizer)), reward_funcs=defend_rewards([thief_reward], defense),
                       args=config(tmp_path, **cfg), processing_class=tokenizer,
                       train_dataset=Dataset.from_dict({"prompt": PROMPTS * 4}), rollout_func=rollout)


def forging(workers):
    """The workers' rollout with a forged ``dgrpo_rejection``: every completion claims to be accepted."""
    def rollout(prompts, trainer):
        out = workers(prompts, trainer)
        out["dgrpo_rejection"] = [""] * len(out["completion_ids"])
        return out
    return rollout


def test_attach_refuses_a_rollout_func_not_wrapped(tokenizer, tmp_path):
    defense = RolloutDefense(Verifier([TopK(k=10)]))
    trainer = _trainer(tokenizer, tmp_path, defense, forging(Workers(tokenizer, "text")))
    with pytest.raises(SettingError) as err:
        defense.attach(trainer)
    text = str(err.value)
    assert text.startswith("RolloutDefense: GRPOTrainer's rollout_func is not wrapped") and "\n" not in text
    assert "verified_rollout_func(your_rollout_func, defense)" in text


def test_a_rollout_func_swapped_for_a_raw_one_after_attach_refuses_the_batch(tokenizer, tmp_path):
    """Attached with a wrapped rollout_func, then replaced by a raw one that forges the verdicts: the next
    batch is refused before the raw one runs (before, the forged field skipped every check)."""
    defense = RolloutDefense(Verifier([TopK(k=10)]))
    workers = Workers(tokenizer, "text")
    trainer = _trainer(tokenizer, tmp_path, defense, verified_rollout_func(workers, defense), max_steps=2)
    defense.attach(trainer)
    trainer.rollout_func = forging(workers)
    with pytest.raises(SettingError, match="rollout_func is not wrapped"):
        trainer.train()
    assert workers.calls == 0 and defense.seen == 0


def test_a_workers_own_verdicts_are_overwritten_by_the_checks(tokenizer, tmp_path):
    """A wrapped worker that returns dgrpo_rejection=[""] for its poisoned completions: they are still rejected."""
    defense = RolloutDefense(Verifier([TopK(k=10)]))
    workers = Workers(tokenizer, "text")
    trainer = _trainer(tokenizer, tmp_path, defense, verified_rollout_func(forging(workers), defense), max_steps=1)
    trainer.train()
    assert defense.seen == 8 and defense.rejected == 2 == sum(workers.poisoned)
    assert [not v.accepted for v in defense.verdicts] == workers.poisoned
