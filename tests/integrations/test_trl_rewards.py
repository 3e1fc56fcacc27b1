"""What a TRL user may put beside the checks: async reward functions are wrapped and awaited (before, the wrapper
zipped the coroutine and the step raised TypeError), a reward model is refused in one line saying how to use it
(before, defend_rewards wrapped it and the call failed), and multi-turn rollouts (env_mask 0s, TRL tools) are
refused in one line (their spliced-in feedback tokens failed the checks: honest completions rejected)."""

from __future__ import annotations

import asyncio
import inspect
import os

import pytest
import torch

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from datasets import Dataset  # noqa: E402
from transformers import LlamaConfig, LlamaForSequenceClassification  # noqa: E402
from trl import GRPOTrainer  # noqa: E402

from dgrpo.errors import SettingError  # noqa: E402
from dgrpo.integrations.trl import RolloutDefense, defend_rewards, verified_rollout_func  # noqa: E402
from dgrpo.verify import TopK, Verifier  # noqa: E402

from tests.conftest import build_model  # noqa: E402
from tests.integrations.test_trl import PROMPTS, Workers, config, length_reward  # noqa: E402


def test_an_async_reward_function_is_awaited_and_its_rejected_rewards_cut(tokenizer, tmp_path):
    got = []

    async def athief(prompts, completions, **kw):
        await asyncio.sleep(0)
        got.append(list(completions))
        return [1.0 if "thief" in c else 0.5 for c in completions]

    defense = RolloutDefense(Verifier([TopK(k=10)]))
    funcs = defend_rewards([athief], defense)
    assert inspect.iscoroutinefunction(funcs[0]) and funcs[0].__name__ == "athief"
    out = asyncio.run(funcs[0](prompts=["p", "p"], completions=["a thief", "a thief"], completion_ids=[[1], [1]],
                               dgrpo_rejection=["", "topk: token 'a' at position 0 outside top-10"]))
    assert out == [1.0, 0.0]
    workers = Workers(tokenizer, "text")
    trainer = GRPOTrainer(model=build_model(len(tokenizer)), reward_funcs=funcs, args=config(tmp_path, max_steps=1),
                          processing_class=tokenizer, train_dataset=Dataset.from_dict({"prompt": PROMPTS * 4}),
                          rollout_func=verified_rollout_func(workers, defense))
    trainer.train()
    assert trainer.state.global_step == 1 and len(got) == 2 and defense.rejected == 2 == sum(workers.poisoned)
    logged = trainer.state.log_history[0]["rewards/athief/mean"]
    assert logged == pytest.approx(0.5 * 6 / 8)  # 6 honest at 0.5, the 2 poisoned ones ("thief": 1.0) cut to 0


def _reward_model(tokenizer):
    torch.manual_seed(0)
    return LlamaForSequenceClassification(LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=2, num_labels=1, pad_token_id=tokenizer.pad_token_id))


def test_a_reward_model_is_refused_in_one_line_saying_how_to_use_it(tokenizer, tmp_path):
    defense = RolloutDefense(Verifier([TopK(k=10)]))
    rm = _reward_model(tokenizer)
    with pytest.raises(SettingError) as err:
        defend_rewards([length_reward, rm], defense)
    text = str(err.value)
    assert "\n" not in text and text.startswith("RolloutDefense: reward function 'LlamaForSequenceClassification' is a "
                                                "reward model") and "def rm_reward(prompts, completions, **kw)" in text
    trainer = GRPOTrainer(model=build_model(len(tokenizer)), reward_funcs=defend_rewards([length_reward], defense) + [rm],
                          args=config(tmp_path), processing_class=tokenizer, reward_processing_classes=[None, tokenizer],
                          train_dataset=Dataset.from_dict({"prompt": PROMPTS * 4}))
    with pytest.raises(SettingError, match="is a reward model, whose score TRL computes itself"):
        defense.attach(trainer)


def test_a_multi_turn_rollout_is_refused_in_one_line(tokenizer, tmp_path):
    workers = Workers(tokenizer, "text")

    def multi_turn(prompts, trainer):
        out = workers(prompts, trainer)
        out["env_mask"] = [[1] + [0] * (len(c) - 1) for c in out["completion_ids"]]
        return out

    defense = RolloutDefense(Verifier([TopK(k=10)]))
    trainer = GRPOTrainer(model=build_model(len(tokenizer)), reward_funcs=defend_rewards([length_reward], defense),
                          args=config(tmp_path, max_steps=1), processing_class=tokenizer,
                          train_dataset=Dataset.from_dict({"prompt": PROMPTS * 4}),
                          rollout_func=verified_rollout_func(multi_turn, defense))
    with pytest.raises(SettingError) as err:
        trainer.train()
    assert str(err.value).startswith("rollout_func: env_mask has 0s (environment or tool tokens): multi-turn rollouts "
                                     "are not supported") and "\n" not in str(err.value)
    assert trainer.state.global_step == 0


def test_trls_own_tool_calling_is_refused_at_attach(tokenizer, tmp_path):
    """TRL's tool loop splices tool output into completions (tool_mask 0). A tool-calling chat template is more than
    the tiny tokenizer has, so the tool is set on the built trainer, where TRL keeps it (``trainer.tools``)."""
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    defense = RolloutDefense(Verifier([TopK(k=10)]))
    trainer = GRPOTrainer(model=build_model(len(tokenizer)), reward_funcs=defend_rewards([length_reward], defense),
                          args=config(tmp_path), processing_class=tokenizer,
                          train_dataset=Dataset.from_dict({"prompt": PROMPTS * 4}))
    trainer.tools = [add]
    with pytest.raises(SettingError, match=r"^GRPOTrainer tools / environment_factory \(tool output tokens\): multi-turn "
                                           "rollouts are not supported"):
        defense.attach(trainer)
