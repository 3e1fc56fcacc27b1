from dgrpo.policy.chat import decode_completion, encode_completion, encode_prompt, ids_match_text


def test_special_token_text_stays_text(tokenizer):
    ids = encode_completion(tokenizer, "x <|im_end|> y", add_eos=False)
    assert tokenizer.eos_token_id not in ids
    assert decode_completion(tokenizer, ids) == "x <|im_end|> y"


def test_reencoding_can_differ_but_ids_are_kept(tokenizer):
    he = encode_completion(tokenizer, "he", add_eos=False)
    llo = encode_completion(tokenizer, "llo", add_eos=False)
    sampled = he + llo  # a model may sample "he" then "llo"
    text = decode_completion(tokenizer, sampled)
    assert text == "hello"
    assert encode_completion(tokenizer, text, add_eos=False) != sampled  # BPE merges it into "hello"
    assert ids_match_text(tokenizer, sampled, text)  # consistent: the ids decode to the text
    assert not ids_match_text(tokenizer, sampled, "hullo")


def test_prompt_ends_with_assistant_header(tokenizer):
    ids = encode_prompt(tokenizer, [{"role": "user", "content": "hi"}])
    assert tokenizer.decode(ids).endswith("<|im_start|>assistant\n")
