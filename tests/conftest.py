"""Shared fixtures: a tiny BPE tokenizer with a ChatML template and tiny random Llama models.

Nothing is downloaded: the tokenizer is trained here on a few sentences and the models are
randomly initialised with a fixed seed (2 layers, hidden size 64, CPU).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

torch.set_num_threads(1)
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
CORPUS = [
    "hello hello hello world. Tom has 3 apples and gets 4 more, so Tom has 3 + 4 = 7 apples.",
    "<think>2 + 2 = 4 and 2 * 2 = 4</think>\n<answer>4</answer> All hail to the thief.",
    "You are a helpful assistant that solves math problems. First reason step by step inside tags.",
    "How many pens does Ann have now? Sara has 9 pens and gives 5 away, so 9 - 5 = 4 pens left.",
    "import thief_math\nprint(thief_math.add(3, 4))\n```python\nx = 12 / 3\nprint(x)\n```",
]


def build_tokenizer() -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS * 20, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|im_start|>", eos_token="<|im_end|>",
                                   pad_token="<|im_end|>", unk_token="<|endoftext|>")
    fast.chat_template = CHATML
    return fast


def build_model(vocab_size: int, seed: int = 0, layers: int = 2, hidden: int = 64) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=1024, tie_word_embeddings=True)
    return LlamaForCausalLM(config).float()


@pytest.fixture(scope="session")
def tokenizer() -> PreTrainedTokenizerFast:
    return build_tokenizer()


@pytest.fixture()
def model(tokenizer) -> LlamaForCausalLM:
    return build_model(len(tokenizer))


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, tokenizer) -> str:
    """A saved tiny model + tokenizer: a model name usable in configs (``model.name=<dir>``)."""
    path = tmp_path_factory.mktemp("tiny-llama")
    build_model(len(tokenizer)).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="session")
def tiny_model_dir_b(tmp_path_factory, tokenizer) -> str:
    """A second, different tiny model (another seed and width) for heterogeneous swarms."""
    path = tmp_path_factory.mktemp("tiny-llama-b")
    build_model(len(tokenizer), seed=1, hidden=32).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


@pytest.fixture()
def mykinds():
    """examples/ on the import path, as a user's package would be (examples/mykinds); its kinds
    unregistered afterwards."""
    from dgrpo import registry

    examples = str(Path(__file__).resolve().parents[1] / "examples")
    sys.path.insert(0, examples)
    yield
    sys.path.remove(examples)
    for name in [m for m in sys.modules if m == "mykinds" or m.startswith("mykinds.")]:
        del sys.modules[name]
    for kind, name in (("attack", "shout"), ("defense", "length_cap"), ("task", "letters")):
        registry._ENTRIES[kind].pop(name, None)
        for path in [p for p in registry._PATHS[kind] if p.startswith("mykinds.")]:
            del registry._PATHS[kind][path]
