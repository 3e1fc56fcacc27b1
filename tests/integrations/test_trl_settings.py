"""Each TRL setting that makes dgrpo's checks reject honest work is refused before the first update, in
one line naming the setting; so are a second copy of the model, an unwrapped reward function and a
defense never attached to its trainer."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from datasets import Dataset  # noqa: E402
from trl import GRPOTrainer  # noqa: E402

from dgrpo.errors import SettingError  # noqa: E402
from dgrpo.integrations.trl import RolloutDefense, defend_rewards  # noqa: E402
from dgrpo.integrations.trl_trainer import trainer_problems  # noqa: E402
from dgrpo.policy.sampling import SamplingParams  # noqa: E402
from dgrpo.verify import Replay, TopK, Verifier  # noqa: E402

from tests.conftest import build_model  # noqa: E402
from tests.integrations.test_trl import PARAMS, PROMPTS, config, length_reward  # noqa: E402


def _trainer(tokenizer, tmp_path, checks, *, wrap=True, verifier_model=None, **cfg):
    model = build_model(len(tokenizer))
    defense = RolloutDefense(Verifier(checks, model=verifier_model))
    funcs = defend_rewards([length_reward], defense) if wrap else [length_reward]
    trainer = GRPOTrainer(model=model, reward_funcs=funcs, args=config(tmp_path, **cfg), processing_class=tokenizer,
                          train_dataset=Dataset.from_dict({"prompt": PROMPTS * 4}))
    return trainer, defense


TOPK, REPLAY = [TopK(k=10)], [TopK(k=10), Replay(PARAMS)]
GREEDY = [Replay(SamplingParams(top_k=10, temperature=0.0, max_new_tokens=10))]


@pytest.mark.parametrize("checks,cfg,needle", [
    (TOPK, {"bf16": True}, "GRPOConfig.bf16=True"),
    (TOPK, {"top_k": 0}, "GRPOConfig: top_k=0 samples from the whole vocabulary, so TopK(k=10) rejects"),
    (TOPK, {"top_k": 50}, "GRPOConfig: top_k=50 samples outside the top-10"),
    (TOPK, {"repetition_penalty": 1.3}, "GRPOConfig: repetition_penalty=1.3 changes the logits"),
    (REPLAY, {"repetition_penalty": 1.3}, "GRPOConfig: repetition_penalty=1.3 changes the logits"),
    (TOPK, {"generation_kwargs": {"no_repeat_ngram_size": 2}}, "no_repeat_ngram_size=2"),
    # generation_kwargs override GRPOConfig's fields: the effective value is checked and named where it is set
    (TOPK, {"top_k": 10, "generation_kwargs": {"top_k": 50}}, "GRPOConfig.generation_kwargs: top_k=50 samples outside"),
    (TOPK, {"top_k": 10, "generation_kwargs": {"top_k": None}}, "top_k=50 samples outside"),  # transformers' default
    (TOPK, {"generation_kwargs": {"repetition_penalty": 1.2}}, "GRPOConfig.generation_kwargs: repetition_penalty=1.2"),
    (REPLAY, {"temperature": 0.7}, "GRPOConfig.temperature=0.7 but Replay's params.temperature=1.0"),
    # the workers' sampling temperature (Replay's params) against the trainer's, greedy workers included
    (GREEDY, {"temperature": 1.0, "max_completion_length": 10}, "GRPOConfig.temperature=1.0 but Replay's params.temperature=0"),
    (TOPK, {"temperature": 1.0, "generation_kwargs": {"temperature": 0.5}},
     "GRPOConfig.generation_kwargs: temperature=0.5 but GRPOConfig.temperature=1.0"),
    (REPLAY, {"max_completion_length": 16}, "GRPOConfig: max_completion_length=16 but Replay's params.max_new_tokens=10"),
])
def test_a_setting_that_makes_the_checks_reject_honest_work_is_refused(tokenizer, tmp_path, checks, cfg, needle):
    trainer, defense = _trainer(tokenizer, tmp_path, checks, **cfg)
    with pytest.raises(SettingError) as err:
        defense.attach(trainer)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_the_same_trainer_with_fitting_settings_is_accepted(tokenizer, tmp_path):
    trainer, defense = _trainer(tokenizer, tmp_path, REPLAY, top_k=10, temperature=1.0, repetition_penalty=1.0)
    assert defense.attach(trainer) is trainer and defense.verifier.model is trainer.model


def test_generation_kwargs_that_fit_override_a_grpoconfig_field_that_does_not(tokenizer, tmp_path):
    trainer, defense = _trainer(tokenizer, tmp_path, TOPK, top_k=0, generation_kwargs={"top_k": 10})
    assert trainer_problems(trainer, TOPK, tokenizer.eos_token_id) == []  # TRL samples with top-10


def test_trls_default_config_is_refused_for_bf16_first(tokenizer, tmp_path):
    """TRL's GRPOConfig defaults (bf16=True, top_k=0) break the checks twice; the first is named."""
    trainer, defense = _trainer(tokenizer, tmp_path, TOPK, bf16=True, top_k=0)
    problems = trainer_problems(trainer, defense.verifier.checks, tokenizer.eos_token_id)
    assert [p.split(":")[0].split("=")[0] for p in problems] == ["GRPOConfig.bf16", "GRPOConfig"]
    with pytest.raises(SettingError, match="GRPOConfig.bf16=True"):
        defense.attach(trainer)


def test_a_second_copy_of_the_model_is_refused(tokenizer, tmp_path):
    trainer, defense = _trainer(tokenizer, tmp_path, TOPK, verifier_model=build_model(len(tokenizer)))
    with pytest.raises(SettingError, match="another model object than the trainer's"):
        defense.attach(trainer)


def test_an_unwrapped_reward_function_is_refused(tokenizer, tmp_path):
    trainer, defense = _trainer(tokenizer, tmp_path, TOPK, wrap=False)
    with pytest.raises(SettingError, match="reward function 'length_reward' is not wrapped"):
        defense.attach(trainer)


def test_a_defense_never_attached_refuses_the_first_batch(tokenizer, tmp_path):
    trainer, defense = _trainer(tokenizer, tmp_path, TOPK, max_steps=1)
    with pytest.raises(SettingError, match=r"not attached to the trainer; call defense.attach\(trainer\)"):
        trainer.train()
    assert trainer.state.global_step == 0


def _vllm_trainer(mode: str, dtype: str | None):
    """A trainer as TRL 1.16 builds it with use_vllm=True (vLLM is not installed here): the vLLM side's dtype is
    read where TRL keeps it (the server's /server_info, the colocated engine's model_config)."""
    args = SimpleNamespace(bf16=False, fp16=False, temperature=1.0, use_vllm=True, top_k=10, repetition_penalty=1.0,
                           generation_kwargs=None, use_transformers_continuous_batching=False, vllm_mode=mode)
    model_config = SimpleNamespace(dtype=dtype)
    info = {"model_config": {"dtype": dtype}}
    gen = None if dtype is None else SimpleNamespace(
        vllm_client=SimpleNamespace(get_server_info=lambda: info), llm=SimpleNamespace(llm_engine=SimpleNamespace(model_config=model_config)))
    return SimpleNamespace(args=args, rollout_func=None, model=build_model(50), vllm_generation=gen,
                           accelerator=SimpleNamespace(unwrap_model=lambda m: m))


def test_vllm_generation_is_refused_under_replay():
    """Checked on the settings alone (vLLM is not installed here): its sampler cannot be replayed."""
    trainer = _vllm_trainer("server", "float32")
    assert trainer_problems(trainer, [TopK(k=10)], 2) == []
    problems = trainer_problems(trainer, [Replay(SamplingParams(10, 1.0, 10))], 2)
    assert len(problems) == 1 and problems[0].startswith("GRPOConfig.use_vllm=True: vLLM's sampler cannot be replayed")
    trainer.args.top_k = 0
    assert trainer_problems(trainer, [TopK(k=10)], 2)[0].startswith("GRPOConfig: top_k=0")


@pytest.mark.parametrize("mode,dtype,needle", [
    ("server", "bfloat16", "GRPOConfig.use_vllm=True: vLLM generates in bfloat16"),
    ("colocate", "torch.float16", "GRPOConfig.use_vllm=True: vLLM generates in float16"),
    ("colocate", None, "GRPOConfig.use_vllm=True: the vLLM side's dtype cannot be read"),
])
def test_vllm_in_another_dtype_than_float32_is_refused(mode, dtype, needle):
    problems = trainer_problems(_vllm_trainer(mode, dtype), [TopK(k=10)], 2)
    assert len(problems) == 1 and problems[0].startswith(needle) and "\n" not in problems[0]
    assert trainer_problems(_vllm_trainer(mode, "torch.float32"), [TopK(k=10)], 2) == []


def test_a_second_eos_id_under_replay_with_a_rollout_func_is_refused(tokenizer, tmp_path):
    """The model's generation_config lists two eos ids (as Qwen's does): TRL cuts rollouts at both, the workers'
    seeded sampler stops at the tokenizer's only, so Replay rejected honest completions (4 of 8 in the review)."""
    from transformers import GenerationConfig

    from dgrpo.integrations.trl import verified_rollout_func
    from tests.integrations.test_trl import Workers

    model = build_model(len(tokenizer))
    eos = tokenizer.eos_token_id
    model.generation_config = GenerationConfig(eos_token_id=[eos, 0])
    defense = RolloutDefense(Verifier(REPLAY))
    trainer = GRPOTrainer(model=model, reward_funcs=defend_rewards([length_reward], defense), args=config(tmp_path),
                          processing_class=tokenizer, train_dataset=Dataset.from_dict({"prompt": PROMPTS * 4}),
                          rollout_func=verified_rollout_func(Workers(tokenizer, "text"), defense))
    with pytest.raises(SettingError) as err:
        defense.attach(trainer)
    text = str(err.value)
    assert text == (f"model.generation_config.eos_token_id: TRL ends completions at {[eos, 0]} (GRPOTrainer.eos_token_ids) "
                    f"and a rollout is cut at each, but Replay's seeded sampler stops at eos_id={eos} only, so honest "
                    f"completions are rejected; set model.generation_config.eos_token_id={eos}")
    defense = RolloutDefense(Verifier(TOPK))  # TopK reads each completion up to its cut: both ids are fine
    trainer = GRPOTrainer(model=model, reward_funcs=defend_rewards([length_reward], defense), args=config(tmp_path),
                          processing_class=tokenizer, train_dataset=Dataset.from_dict({"prompt": PROMPTS * 4}),
                          rollout_func=verified_rollout_func(Workers(tokenizer, "text"), defense))
    assert defense.attach(trainer) is trainer


@pytest.mark.parametrize("flag,want", [
    ("fp16", "GRPOConfig.fp16=True: the top-k and replay checks are exact only in float32 (in fp16 honest tokens fall "
             "outside the top-k and replay rejects honest completions); set fp16=False"),
    ("bf16", "GRPOConfig.bf16=True (TRL's default when bf16 is unset): the top-k and replay checks are exact only in "
             "float32 (in bf16 honest tokens fall outside the top-k and replay rejects honest completions); set bf16=False"),
])
def test_a_half_precision_flag_is_named_as_itself(flag, want):
    """The fp16 refusal used to speak of "TRL's default bf16=True"."""
    trainer = _vllm_trainer("server", "float32")
    setattr(trainer.args, flag, True)
    assert trainer_problems(trainer, [TopK(k=10)], 2)[0] == want
