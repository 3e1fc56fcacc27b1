"""Checks a message passes before a node uses it: schema (parse_message), then meaning (check_message)."""

import pytest

from dgrpo.policy.chat import encode_completion
from dgrpo.swarm.validation import Limits, check_message, parse_message
from dgrpo.types import Message

TOK_ID = "tiny"


def _msg(tok, text="<think>2 + 2 = 4</think>", **kw):
    fields = dict(node=1, round=3, prompt_id="p", index=0, text=text,
                  token_ids=tuple(encode_completion(tok, text)), seed=7, tokenizer=TOK_ID)
    return Message(**{**fields, **kw})


def _check(tokenizer, msg, **kw):
    args = dict(sender=1, round_idx=3, prompt_ids={"p"}, tokenizer=tokenizer, tokenizer_id=TOK_ID, limits=Limits())
    return check_message(msg, **{**args, **kw})


def test_a_well_formed_message_parses_back_to_itself(tokenizer):
    msg = _msg(tokenizer)
    assert parse_message(msg.to_dict()) == (msg, None)
    assert parse_message({**msg.to_dict(), "seed": None})[0].seed is None


@pytest.mark.parametrize("change, reason", [
    ({"index": "0"}, "schema: field 'index' has type str"),
    ({"node": True}, "schema: field 'node' has type bool"),
    ({"seed": 1.5}, "schema: field 'seed' must be an integer or null"),
    ({"token_ids": [1, "2"]}, "schema: token_ids must be integers"),
    ({"extra": 1}, "schema: unknown fields ['extra']"),
])
def test_schema_errors_are_named(tokenizer, change, reason):
    assert parse_message({**_msg(tokenizer).to_dict(), **change}) == (None, reason)


def test_missing_fields_and_non_objects_are_refused(tokenizer):
    raw = _msg(tokenizer).to_dict()
    del raw["text"]
    assert parse_message(raw) == (None, "schema: missing fields ['text']")
    assert parse_message([1]) == (None, "schema: expected an object, got list")


def test_a_valid_message_passes(tokenizer):
    assert _check(tokenizer, _msg(tokenizer)) is None


def test_meaning_checks_in_order(tokenizer):
    ids = encode_completion(tokenizer, "<think>2 + 2 = 4</think>")
    assert _check(tokenizer, _msg(tokenizer), sender=2) == "identity: claims node 1 but was sent by node 2"
    assert _check(tokenizer, _msg(tokenizer, round=2)) == "round: message for round 2 received in round 3"
    assert _check(tokenizer, _msg(tokenizer, prompt_id="q")) == "prompt: unknown prompt id 'q'"
    assert _check(tokenizer, _msg(tokenizer), limits=Limits(max_chars=5)) == "size: text has 24 characters (limit 5)"
    assert _check(tokenizer, _msg(tokenizer), limits=Limits(max_tokens=2)) == f"size: {len(ids)} tokens (limit 2)"
    assert _check(tokenizer, _msg(tokenizer, token_ids=())) == "size: no tokens"
    assert _check(tokenizer, _msg(tokenizer, text="hi <|im_end|>")) == "special token: text contains '<|im_end|>'"


def test_token_id_checks_apply_to_the_receivers_own_tokenizer_only(tokenizer):
    ids = encode_completion(tokenizer, "<think>2 + 2 = 4</think>")
    out_of_vocab = _msg(tokenizer, token_ids=(*ids[:-1], len(tokenizer) + 3, ids[-1]))
    assert _check(tokenizer, out_of_vocab) == f"vocabulary: token id {len(tokenizer) + 3} outside [0, {len(tokenizer)})"
    eos_inside = _msg(tokenizer, token_ids=(ids[0], tokenizer.eos_token_id, *ids[1:]))
    assert _check(tokenizer, eos_inside) == "special token: special token id inside the completion"
    lying = _msg(tokenizer, text="<think>7</think>", token_ids=tuple(ids))  # ids of another text
    assert _check(tokenizer, lying) == "consistency: text is not the decoding of its token ids"
    # another tokenizer's ids are not ours to check: the receiver re-encodes the text
    assert _check(tokenizer, _msg(tokenizer, text="<think>7</think>", token_ids=tuple(ids), tokenizer="other")) is None


def test_limits_leave_room_beyond_what_an_honest_node_samples():
    assert Limits.for_completions(64) == Limits(max_chars=8192, max_tokens=256)    # 4 × 64 < 256: the floor
    assert Limits.for_completions(512) == Limits(max_chars=32768, max_tokens=2048)  # 4 × 512 tokens, 16 chars each
