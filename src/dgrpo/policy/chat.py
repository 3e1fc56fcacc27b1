"""Prompt and completion encoding through the tokenizer's chat template.

Completion text is always encoded with ``split_special_tokens=True``: a completion whose text holds
the literal characters of a special token (``<|im_end|>``) is scored as those characters, never as
the special token itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


def encode_prompt(tokenizer: PreTrainedTokenizerBase, messages: list[dict]) -> list[int]:
    """Token ids of chat messages followed by the assistant header (generation prompt)."""
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    if not isinstance(ids, list):  # some tokenizers return a BatchEncoding
        ids = ids["input_ids"]
    return list(ids)


def decode_completion(tokenizer: PreTrainedTokenizerBase, ids: list[int]) -> str:
    """Text of a completion: special tokens (the final eos) are dropped."""
    return tokenizer.decode(ids, skip_special_tokens=True)


def encode_completion(tokenizer: PreTrainedTokenizerBase, text: str, add_eos: bool = True) -> list[int]:
    """Token ids of a completion written as text (attackers, re-tokenising receivers), eos appended."""
    ids = tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]
    return list(ids) + ([tokenizer.eos_token_id] if add_eos else [])


def ids_match_text(tokenizer: PreTrainedTokenizerBase, ids: list[int], text: str) -> bool:
    """Whether ``ids`` decode to ``text`` (the ids are what is scored; a mismatch is flagged)."""
    return decode_completion(tokenizer, ids) == text
