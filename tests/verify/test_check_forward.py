"""The logit-level checks score a model the way its completions were sampled: in eval mode. A trainer's
model is in train mode, where dropout moves the logits and gradient checkpointing drops the KV cache the
checks score against (GPT-2 raised a shape error, OPT gave other logits silently); the checks must give
the eval-mode logits and verdicts, and leave the model's modes as they were."""

from __future__ import annotations

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, OPTConfig, OPTForCausalLM

from dgrpo.integrations.generate import seeded_generate
from dgrpo.policy.sampling import SamplingParams
from dgrpo.verify import Replay, TopK, Verifier, completion_logits
from dgrpo.verify.forward import active_dropout

PARAMS = SamplingParams(top_k=10, temperature=1.0, max_new_tokens=8)
PROMPTS = [[5, 6, 7, 8], [9, 10], [5, 6, 7, 8]]
V, EOS = 120, 3


def _model(kind: str, dropout: float):
    torch.manual_seed(0)
    if kind == "llama":
        return LlamaForCausalLM(LlamaConfig(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                            num_attention_heads=2, num_key_value_heads=2, attention_dropout=dropout,
                                            bos_token_id=1, eos_token_id=EOS, pad_token_id=EOS)).float()
    if kind == "gpt2":
        return GPT2LMHeadModel(GPT2Config(vocab_size=V, n_embd=32, n_layer=2, n_head=2, n_positions=64, resid_pdrop=dropout,
                                          embd_pdrop=dropout, attn_pdrop=dropout, bos_token_id=1, eos_token_id=EOS)).float()
    return OPTForCausalLM(OPTConfig(vocab_size=V, hidden_size=32, num_hidden_layers=2, ffn_dim=64, num_attention_heads=2,
                                    word_embed_proj_dim=32, max_position_embeddings=64, dropout=dropout,
                                    attention_dropout=dropout, bos_token_id=1, eos_token_id=EOS, pad_token_id=EOS)).float()


def _honest(model):
    seeds = [11, 12, 13]
    return seeded_generate(model, PROMPTS, seeds, PARAMS, EOS, EOS), seeds


def _check(model, comps, seeds):
    return Verifier([TopK(k=10), Replay(PARAMS)], model=model, eos_id=EOS).verify(PROMPTS, comps, seeds=seeds)


@pytest.mark.parametrize("kind", ["llama", "gpt2", "opt"])
def test_a_model_in_train_mode_with_dropout_is_scored_without_it(kind):
    model = _model(kind, 0.3)
    assert active_dropout(model)  # the model does have dropout
    comps, seeds = _honest(model)  # sampled in eval mode, as generate and dgrpo's sampler do
    model.eval()
    want = completion_logits(model, PROMPTS, comps, EOS)
    model.train()
    got = completion_logits(model, PROMPTS, comps, EOS)
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    assert model.training and all(m.training for m in model.modules())  # modes restored
    assert [v.accepted for v in _check(model, comps, seeds)] == [True] * 3
    with torch.no_grad():  # what a train-mode forward would have scored: other logits
        full = model(input_ids=torch.tensor([PROMPTS[0] + comps[0]])).logits[0, len(PROMPTS[0]) - 1:-1]
    assert (full - want[0]).abs().max() > 1e-3


@pytest.mark.parametrize("kind", ["gpt2", "opt"])
def test_gradient_checkpointing_in_train_mode_does_not_change_the_checks(kind):
    plain = _model(kind, 0.0)
    comps, seeds = _honest(plain)
    want = completion_logits(plain, PROMPTS, comps, EOS)
    model = _model(kind, 0.0)  # the same weights (same seed), checkpointed and training
    model.gradient_checkpointing_enable()
    model.train()
    got = completion_logits(model, PROMPTS, comps, EOS)
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    assert model.training and model.is_gradient_checkpointing
    assert [v.accepted for v in _check(model, comps, seeds)] == [True] * 3


def test_active_dropout_names_each_kind():
    assert active_dropout(_model("llama", 0.0)) == [] and active_dropout(_model("gpt2", 0.0)) == []
    assert active_dropout(_model("llama", 0.2)) == ["attention_dropout=0.2"]
    assert active_dropout(_model("gpt2", 0.1)) == ["Dropout(p=0.1)"]
    assert active_dropout(_model("opt", 0.1)) == ["dropout=0.1"]  # functional dropout, rates held by the modules
