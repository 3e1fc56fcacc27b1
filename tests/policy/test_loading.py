"""Loading a policy by folder, the errors a user sees, and where the default model is cached."""

from pathlib import Path

import pytest
import torch

from dgrpo.errors import PolicyLoadError
from dgrpo.policy.loading import cache_dir, load_policy, load_tokenizer, resolve_model_path


def test_a_folder_loads_as_a_trainable_or_frozen_policy(tiny_model_dir):
    model, tokenizer = load_policy(tiny_model_dir, "float32", trainable=True)
    assert all(p.requires_grad for p in model.parameters()) and model.dtype == torch.float32
    assert model.generation_config.pad_token_id == tokenizer.pad_token_id == tokenizer.eos_token_id
    frozen, _ = load_policy(tiny_model_dir, "bfloat16", trainable=False)
    assert not frozen.training and not any(p.requires_grad for p in frozen.parameters())
    assert frozen.dtype == torch.bfloat16


def test_bad_names_are_one_line_errors(tmp_path, tiny_model_dir):
    with pytest.raises(PolicyLoadError, match=f"no such model folder: {tmp_path / 'missing'}"):
        resolve_model_path(str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="dtype must be one of"):
        load_policy(tiny_model_dir, "float64")
    assert resolve_model_path("org/some-hub-model") == "org/some-hub-model"  # hub ids pass through


def test_a_tokenizer_needs_a_chat_template_and_gets_a_pad_token(tmp_path, tokenizer):
    tokenizer.save_pretrained(tmp_path / "tok")
    assert load_tokenizer(str(tmp_path / "tok")).pad_token_id == tokenizer.eos_token_id
    plain = tmp_path / "plain"
    tokenizer.save_pretrained(plain)
    config = plain / "tokenizer_config.json"
    config.write_text(config.read_text().replace('"chat_template"', '"unused_template"'))
    for extra in plain.glob("chat_template.*"):
        extra.unlink()
    with pytest.raises(PolicyLoadError, match="has no chat template"):
        load_tokenizer(str(plain))


def test_the_cache_folder_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("DGRPO_CACHE", str(tmp_path))
    assert cache_dir() == tmp_path
    monkeypatch.delenv("DGRPO_CACHE")
    assert cache_dir() == Path.home() / ".cache" / "dgrpo"
