import pytest
import torch
from transformers import DynamicCache

from dgrpo.policy.decode_attention import decode_attention, single_query_attention


class _Module(torch.nn.Module):
    num_key_value_groups = 3
    is_causal = True


def _reference(q, k, v, keep):
    """softmax(q kᵀ / √d + mask) v head by head in float64, key/value heads shared by 3 query heads."""
    b, hq, _, d = q.shape
    out = torch.empty(b, 1, hq, d, dtype=torch.float64)
    for i in range(b):
        for h in range(hq):
            s = (q[i, h, 0].double() @ k[i, h // 3].double().T) / d**0.5
            s[~keep[i]] = float("-inf")
            out[i, 0, h] = torch.softmax(s, -1) @ v[i, h // 3].double()
    return out


@pytest.mark.parametrize("mask_kind", ["none", "bool", "float"])
def test_single_query_matches_softmax_attention(mask_kind):
    torch.manual_seed(0)
    b, hq, hk, length, d = 3, 6, 2, 11, 8
    q, k, v = torch.randn(b, hq, 1, d), torch.randn(b, hk, length, d), torch.randn(b, hk, length, d)
    keep = torch.ones(b, length, dtype=torch.bool)
    keep[1, :4] = False  # a left-padded row
    mask = {"none": None, "bool": keep[:, None, None, :],
            "float": torch.zeros(b, 1, 1, length).masked_fill(~keep[:, None, None, :], float("-inf"))}[mask_kind]
    if mask_kind == "none":
        keep[:] = True
    out, weights = decode_attention(_Module().eval(), q, k, v, mask, scaling=d**-0.5)
    assert weights is None and out.shape == (b, 1, hq, d)
    assert torch.allclose(out.double(), _reference(q, k, v, keep), atol=1e-5)


def test_longer_queries_go_to_sdpa_unchanged():
    torch.manual_seed(1)
    q, k, v = torch.randn(2, 6, 4, 8), torch.randn(2, 2, 4, 8), torch.randn(2, 2, 4, 8)
    out, _ = decode_attention(_Module().eval(), q, k, v, None, scaling=8**-0.5)
    expected = torch.nn.functional.scaled_dot_product_attention(q, k.repeat_interleave(3, 1), v.repeat_interleave(3, 1),
                                                                 is_causal=True, scale=8**-0.5)
    assert torch.allclose(out, expected.transpose(1, 2), atol=1e-6)


def _decode_step(model):
    """Prefill 2 left-padded rows, then one decoding step: the step's logits."""
    cache = DynamicCache(config=model.config)
    ids, mask = torch.tensor([[0, 5, 6, 7], [8, 9, 10, 11]]), torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]])
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    model(input_ids=ids, attention_mask=mask, position_ids=pos, cache=cache)
    step_mask = torch.cat([mask, torch.ones(2, 1, dtype=torch.long)], 1)
    return model(input_ids=torch.tensor([[12], [13]]), attention_mask=step_mask, position_ids=pos[:, -1:] + 1,
                 cache=cache).logits


def test_context_switches_the_model_and_keeps_its_outputs(model):
    with torch.no_grad():
        ref = _decode_step(model)
        with single_query_attention(model):
            assert model.config._attn_implementation != "sdpa"
            out = _decode_step(model)
    assert model.config._attn_implementation == "sdpa"
    assert torch.allclose(out, ref, atol=1e-5)


@pytest.mark.parametrize("mask_kind", ["bool", "float"])
def test_keys_every_row_shares_are_scored_once_with_the_same_result(model, mask_kind):
    """single_query_attention(model, shared=S): rows whose first S keys are copies of one prefix
    (views into a larger cache buffer, as the sampler holds them) give the softmax attention of the
    float64 reference, and the same output as without ``shared`` to float32 rounding."""
    from dgrpo.policy import decode_attention as module

    torch.manual_seed(1)
    b, hq, hk, s, length, d = 5, 6, 2, 7, 12, 8
    buf_k, buf_v = torch.randn(b, hk, 20, d), torch.randn(b, hk, 20, d)
    buf_k[:, :, :s], buf_v[:, :, :s] = buf_k[:1, :, :s], buf_v[:1, :, :s]  # the common prefix, copied to every row
    k, v, q = buf_k[:, :, :length], buf_v[:, :, :length], torch.randn(b, hq, 1, d)
    keep = torch.ones(b, length, dtype=torch.bool)
    keep[2, s : s + 3] = False  # a row with masked positions after the prefix (refill)
    mask = keep[:, None, None, :] if mask_kind == "bool" else \
        torch.zeros(b, 1, 1, length).masked_fill(~keep[:, None, None, :], float("-inf"))
    plain, _ = decode_attention(_Module().eval(), q, k, v, mask, scaling=d**-0.5)
    token = module._SHARED.set(s)
    try:
        once, _ = decode_attention(_Module().eval(), q, k, v, mask, scaling=d**-0.5)
    finally:
        module._SHARED.reset(token)
    assert torch.allclose(once.double(), _reference(q, k, v, keep), atol=1e-5)
    torch.testing.assert_close(once, plain, rtol=0, atol=1e-6)
    with single_query_attention(model, shared=s):
        assert module._SHARED.get() == s
    assert module._SHARED.get() == 0
