"""Models whose embedding has more rows than the tokenizer has tokens (Qwen2.5: 151,936 rows, 151,665 tokens).

The rows past the tokenizer are ids no tokenizer produces; a receiver refuses a message holding one as
``vocabulary`` (a strike). ``load_policy`` masks them (:func:`dgrpo.policy.loading.mask_padded_vocabulary`),
so the sampler never draws one and the replay and top-k checks see the distribution it sampled from.
"""

import pytest
import torch
from tests.conftest import build_model

from dgrpo.policy.chat import encode_prompt
from dgrpo.policy.loading import load_policy, mask_padded_vocabulary
from dgrpo.policy.sampling import SamplingParams, sample
from dgrpo.verify.checks import replay_verdicts, topk_verdicts

PAD_ROWS = 40
PARAMS = SamplingParams(top_k=10, temperature=1.0, max_new_tokens=24)


@pytest.fixture(scope="module")
def padded_dir(tmp_path_factory, tokenizer):
    path = tmp_path_factory.mktemp("padded")
    build_model(len(tokenizer) + PAD_ROWS).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def _requests(tokenizer, n=8):
    prompt = encode_prompt(tokenizer, [{"role": "user", "content": "How many pens does Ann have now?"}])
    return [prompt] * n, list(range(1000, 1000 + n))


def test_the_unmasked_padded_model_draws_ids_the_tokenizer_lacks(padded_dir, tokenizer):
    """The test's premise: loaded without the mask, this model samples ids >= len(tokenizer)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(padded_dir)
    prompts, seeds = _requests(tokenizer)
    outs = sample(model, prompts, seeds, PARAMS, tokenizer.eos_token_id, tokenizer.pad_token_id)
    assert any(t >= len(tokenizer) for ids in outs for t in ids)


def test_load_policy_masks_the_padded_ids_and_replay_and_topk_accept_what_it_samples(padded_dir, tokenizer):
    """Through ``load_policy`` no sampled id lies past the tokenizer; the completions equal those of the same
    weights cut to the tokenizer's rows (an independent model without padding), and the fast replay and the
    top-k check on the masked model's logits accept every one of them."""
    model, tok = load_policy(str(padded_dir), trainable=False)
    assert model.get_output_embeddings().weight.shape[0] == len(tok) + PAD_ROWS
    prompts, seeds = _requests(tok)
    outs = sample(model, prompts, seeds, PARAMS, tok.eos_token_id, tok.pad_token_id)
    assert all(0 <= t < len(tok) for ids in outs for t in ids)

    cut = build_model(len(tok))  # the same weights without the padded rows
    cut.load_state_dict({k: v[: len(tok)] if v.shape[:1] == (len(tok) + PAD_ROWS,) else v
                         for k, v in model.state_dict().items()})
    cut.eval()
    assert sample(cut, prompts, seeds, PARAMS, tok.eos_token_id, tok.pad_token_id) == outs
    with torch.no_grad():
        ids = torch.tensor([prompts[0] + outs[0]])
        full, plain = model(ids).logits[0], cut(ids).logits[0]
    assert torch.allclose(full[:, : len(tok)], plain, atol=1e-5)
    assert bool((full[:, len(tok):] < -1e30).all())  # the padded ids: probability exactly 0
    assert torch.log_softmax(full, -1).isfinite().all()  # (finite: no NaN in an entropy)

    verdicts = replay_verdicts(outs, seeds, PARAMS, eos_id=tok.eos_token_id, model=model, prompt_ids=prompts,
                               pad_id=tok.pad_token_id)
    assert all(v.accepted for v in verdicts), [v.reason for v in verdicts if not v.accepted]
    verdicts = topk_verdicts(outs, k=PARAMS.top_k, eos_id=tok.eos_token_id, model=model, prompt_ids=prompts,
                             pad_id=tok.pad_token_id)
    assert all(v.accepted for v in verdicts), [v.reason for v in verdicts if not v.accepted]


def test_a_model_without_padding_is_left_untouched(tokenizer):
    model = build_model(len(tokenizer))
    assert mask_padded_vocabulary(model, len(tokenizer)) is False
    assert not model.get_output_embeddings()._forward_hooks
    assert mask_padded_vocabulary(build_model(len(tokenizer) + 1), len(tokenizer)) is True
