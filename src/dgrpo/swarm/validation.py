"""Checks every incoming message passes before a node uses it.

A message that fails is rejected with a reason and logged; it never crashes the round.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Container

from dgrpo.policy.chat import ids_match_text
from dgrpo.types import Message

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

_FIELDS = {"node": int, "round": int, "prompt_id": str, "index": int, "text": str, "token_ids": (list, tuple),
           "tokenizer": str}
_OPTIONAL = {"context": str, "signature": str, "proof": str}  # absent in an unsigned message (proof: without TOPLOC)


@dataclass(frozen=True)
class Limits:
    """Size limits on a message.

    Attributes:
        max_chars: longest accepted text, characters.
        max_tokens: most token ids accepted.
    """

    max_chars: int = 8192
    max_tokens: int = 1024

    @classmethod
    def for_completions(cls, max_new_tokens: int) -> "Limits":
        """The limits of a swarm whose nodes sample up to ``max_new_tokens`` tokens.

        Size limits protect the receiver (memory, time); they are not a defense, so they leave room
        for completions longer than an honest node could sample (replay checks that rule).
        """
        max_tokens = max(256, 4 * max_new_tokens)
        return cls(max_chars=max(8192, 16 * max_tokens), max_tokens=max_tokens)


def parse_message(raw: Any) -> tuple[Message | None, str | None]:
    """Schema check of a decoded JSON object.

    Returns:
        (message, None) or (None, reason).
    """
    if isinstance(raw, Message):
        raw = raw.to_dict()
    if not isinstance(raw, dict):
        return None, f"schema: expected an object, got {type(raw).__name__}"
    missing = [k for k in (*_FIELDS, "seed") if k not in raw]
    if missing:
        return None, f"schema: missing fields {missing}"
    extra = sorted(set(raw) - set(_FIELDS) - set(_OPTIONAL) - {"seed"})
    if extra:
        return None, f"schema: unknown fields {extra}"
    for key, typ in _FIELDS.items():
        if not isinstance(raw[key], typ) or isinstance(raw[key], bool):
            return None, f"schema: field {key!r} has type {type(raw[key]).__name__}"
    if raw["seed"] is not None and (not isinstance(raw["seed"], int) or isinstance(raw["seed"], bool)):
        return None, "schema: field 'seed' must be an integer or null"
    for key, typ in _OPTIONAL.items():
        if raw.get(key) is not None and not isinstance(raw[key], typ):
            return None, f"schema: field {key!r} has type {type(raw[key]).__name__}"
    if not all(isinstance(t, int) and not isinstance(t, bool) for t in raw["token_ids"]):
        return None, "schema: token_ids must be integers"
    return Message(**{**raw, "token_ids": tuple(raw["token_ids"]), "context": raw.get("context") or "",
                      "proof": raw.get("proof") or ""}), None


def check_message(
    msg: Message,
    *,
    sender: int,
    round_idx: int,
    prompt_ids: Container[str],
    tokenizer: PreTrainedTokenizerBase,
    tokenizer_id: str,
    limits: Limits = Limits(),
) -> str | None:
    """Semantic checks of a well-formed message.

    Checks, in order: claimed node id equals the sending node; round; known prompt id; text and
    token counts within limits; no special-token text smuggled into the text; and, when the
    message uses the receiver's tokenizer, token ids inside the vocabulary, no special token but a
    final eos, and text equal to the decoding of its ids.

    Returns:
        None when the message passes, else the reason it is rejected.
    """
    if msg.node != sender:
        return f"identity: claims node {msg.node} but was sent by node {sender}"
    if msg.round != round_idx:
        return f"round: message for round {msg.round} received in round {round_idx}"
    if msg.prompt_id not in prompt_ids:
        return f"prompt: unknown prompt id {msg.prompt_id[:40]!r}"
    if len(msg.text) > limits.max_chars:
        return f"size: text has {len(msg.text)} characters (limit {limits.max_chars})"
    if len(msg.token_ids) > limits.max_tokens:
        return f"size: {len(msg.token_ids)} tokens (limit {limits.max_tokens})"
    if len(msg.proof) > limits.max_chars:  # (TOPLOC: 348 base64 characters per 32 tokens at top-128)
        return f"size: proof has {len(msg.proof)} characters (limit {limits.max_chars})"
    if not msg.token_ids:
        return "size: no tokens"
    for special in tokenizer.all_special_tokens:
        if special and special in msg.text:
            return f"special token: text contains {special!r}"
    if msg.tokenizer != tokenizer_id:
        return None  # the receiver re-encodes the text with its own tokenizer
    vocab = len(tokenizer)
    bad = [t for t in msg.token_ids if not 0 <= t < vocab]
    if bad:
        return f"vocabulary: token id {bad[0]} outside [0, {vocab})"
    special_ids = set(tokenizer.all_special_ids)
    inner = [t for t in msg.token_ids[:-1] if t in special_ids]
    last = msg.token_ids[-1]
    if inner or (last in special_ids and last != tokenizer.eos_token_id):
        return "special token: special token id inside the completion"
    if not ids_match_text(tokenizer, list(msg.token_ids), msg.text):
        return "consistency: text is not the decoding of its token ids"
    return None
