"""What a ``rollout_func`` worker returns is taken apart before TRL sees it: tokens after the first eos are
cut (TRL would train on and reward them while the checks read only up to the eos), an empty completion
gets a verdict instead of crashing TRL, and a completion answering another prompt than the trainer's is
rejected."""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from datasets import Dataset  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, OPTConfig, OPTForCausalLM  # noqa: E402
from trl import GRPOTrainer  # noqa: E402

from dgrpo.errors import SettingError  # noqa: E402
from dgrpo.integrations.generate import seeded_generate  # noqa: E402
from dgrpo.integrations.trl import RolloutDefense, defend_rewards, verified_rollout_func  # noqa: E402
from dgrpo.policy.sampling import SamplingParams  # noqa: E402
from dgrpo.verify import Replay, TopK, Verifier  # noqa: E402

from tests.conftest import build_model, build_tokenizer  # noqa: E402
from tests.integrations.test_trl import (G, PARAMS, POISON, PROMPTS, Workers, config, length_reward, spied,  # noqa: E402
                                         thief_reward)


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


def _train(tokenizer, tmp_path, tamper, checks=None, steps=2, model=None, **cfg):
    model = model if model is not None else build_model(len(tokenizer))
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


def _dropout_llama(vocab: int, rate: float):
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, tie_word_embeddings=True, attention_dropout=rate)
    return LlamaForCausalLM(config).float()


def test_a_trainer_model_with_dropout_is_checked_without_it(tokenizer, tmp_path):
    """TRL trains in train mode; the workers sampled in eval mode (seeded_generate): with attention dropout 0.5
    in the checks' forward, honest completions were rejected."""
    _, workers, defense, _, _ = _train(tokenizer, tmp_path, lambda *a: None, model=_dropout_llama(len(tokenizer), 0.5),
                                       checks=[TopK(k=10), Replay(PARAMS)])
    assert defense.seen == 16 and defense.rejected == 0


def test_trls_own_generation_with_dropout_is_refused(tokenizer, tmp_path):
    model = _dropout_llama(len(tokenizer), 0.1)
    defense = RolloutDefense(Verifier([TopK(k=10)]))
    trainer = GRPOTrainer(model=model, reward_funcs=defend_rewards([thief_reward], defense), args=config(tmp_path),
                          processing_class=tokenizer, train_dataset=Dataset.from_dict({"prompt": PROMPTS * 4}))
    with pytest.raises(SettingError) as err:
        defense.attach(trainer)
    text = str(err.value)
    assert text.startswith("GRPOConfig.disable_dropout=False: the model has dropout (attention_dropout=0.1)") and "\n" not in text
    assert text.endswith("load the model with attention_dropout 0 in its config")


@pytest.mark.parametrize("kind", ["gpt2", "opt"])
def test_gradient_checkpointing_leaves_the_checks_working(tokenizer, tmp_path, kind):
    """GRPOConfig(gradient_checkpointing=True) on GPT-2 and OPT, TRL's own generation, top-k: every honest
    completion accepted (the checks' forward raised a shape error on GPT-2 and scored other logits on OPT)."""
    torch.manual_seed(0)
    v, eos = len(tokenizer), tokenizer.eos_token_id
    model = (GPT2LMHeadModel(GPT2Config(vocab_size=v, n_embd=64, n_layer=2, n_head=4, bos_token_id=eos, eos_token_id=eos))
             if kind == "gpt2" else
             OPTForCausalLM(OPTConfig(vocab_size=v, hidden_size=64, num_hidden_layers=2, ffn_dim=128, num_attention_heads=4,
                                      word_embed_proj_dim=64, bos_token_id=eos, eos_token_id=eos, pad_token_id=eos,
                                      dropout=0.0, attention_dropout=0.0)))  # functional dropout: disable_dropout misses it
    defense = RolloutDefense(Verifier([TopK(k=10)]))
    trainer = GRPOTrainer(model=model.float(), reward_funcs=defend_rewards([thief_reward], defense),
                          args=config(tmp_path, gradient_checkpointing=True, disable_dropout=True),
                          processing_class=tokenizer, train_dataset=Dataset.from_dict({"prompt": PROMPTS * 4}))
    defense.attach(trainer).train()
    assert trainer.state.global_step == 2 and trainer.model.is_gradient_checkpointing
    assert defense.seen == 16 and defense.rejected == 0


def test_a_pad_token_that_starts_every_prompt_is_not_stripped(tmp_path):
    """A tokenizer whose pad is its bos (<|im_start|>, the first token of every chat prompt): TRL's own seeded
    generation, top-k and replay accept all 16 honest completions (stripping pads by value scored each
    completion against its prompt without the first token, and rejected honest ones)."""
    tok = build_tokenizer()
    tok.pad_token = "<|im_start|>"
    chats = [[{"role": "user", "content": p}] for p in PROMPTS]
    defense = RolloutDefense(Verifier([TopK(k=10), Replay(PARAMS)]))
    trainer = GRPOTrainer(model=build_model(len(tok)), reward_funcs=defend_rewards([length_reward], defense),
                          args=config(tmp_path), processing_class=tok, train_dataset=Dataset.from_dict({"prompt": chats * 4}))
    assert trainer._tokenize_prompts(chats)[0][0][0] == tok.pad_token_id  # every prompt starts with the pad token
    defense.attach(trainer).train()
    assert defense.seen == 16 and defense.rejected == 0


def test_a_worker_answering_another_prompt_is_rejected(tokenizer, tmp_path):
    """The last worker of each group answers the other prompt, honestly sampled and seeded for it: every check
    passes against the worker's own prompt_ids, so only comparing them to the trainer's prompt catches it."""
    eos = tokenizer.eos_token_id

    def other_prompt(workers, out, i):
        other = next(p for p in PROMPTS if tokenizer(text=p)["input_ids"] != out["prompt_ids"][i])
        out["prompt_ids"][i] = ids = tokenizer(text=other)["input_ids"]
        out["completion_ids"][i] = seeded_generate(trainer_box[0], [ids], [out["seeds"][i]], PARAMS, eos, eos)[0]

    trainer_box = [build_model(len(tokenizer))]
    trainer, workers, defense, seen, _ = _train(tokenizer, tmp_path, other_prompt, model=trainer_box[0],
                                                checks=[TopK(k=10), Replay(PARAMS)])
    assert defense.seen == 16 and defense.rejected == 4
    rejected = [(i, v.defense, v.reason) for i, v in enumerate(defense.verdicts) if not v.accepted]
    assert [(i, d) for i, d, _ in rejected] == [(3, "prompt"), (7, "prompt")]
    assert rejected[0][2].startswith("prompt_ids differ from the trainer's prompt 3 at position 0")
    assert [r for (_, r), i in zip(seen, range(16)) if i % G == G - 1] == [0.0] * 4


def test_dataset_columns_reach_a_wrapped_reward_function_as_trl_passes_them(tokenizer, tmp_path):
    """A TRL reward function with a dataset column as a keyword (answer=[...], one per completion) is wrapped as it
    is: it gets the column of each completion's row, and the defense's own field is not passed on."""
    answers = {PROMPTS[0]: "7", PROMPTS[1]: "4"}
    got = []

    def answer_reward(prompts, completions, answer, **kw):
        got.append((list(prompts), list(answer), "dgrpo_rejection" in kw))
        return [1.0 if a in c else 0.0 for c, a in zip(completions, answer)]

    defense = RolloutDefense(Verifier([TopK(k=10)]))
    data = Dataset.from_dict({"prompt": PROMPTS * 4, "answer": [answers[p] for p in PROMPTS * 4]})
    trainer = GRPOTrainer(model=build_model(len(tokenizer)), reward_funcs=defend_rewards([answer_reward], defense),
                          args=config(tmp_path), processing_class=tokenizer, train_dataset=data)
    defense.attach(trainer).train()
    assert len(got) == 2
    for prompts, answer, leaked in got:
        assert answer == [answers[p] for p in prompts] and len(answer) == 8 and not leaked
