import pytest
import torch
from transformers import DynamicCache

from dgrpo.policy import kv_cache, stream
from dgrpo.policy.kv_cache import PreallocatedCache, compaction
from dgrpo.policy.sampling import SamplingParams, completion_seed, sample


def test_compaction_moves_last_live_rows_into_holes():
    done = torch.tensor([False, True, False, True, False, False])
    holes, sources, m = compaction(done)
    # 4 rows stay; holes 1 and 3 are filled by rows 4 and 5, rows 0 and 2 do not move
    assert (holes.tolist(), sources.tolist(), m) == ([1, 3], [4, 5], 4)
    holes, sources, m = compaction(torch.tensor([False, False, True]))  # only the last row leaves: nothing moves
    assert (holes.tolist(), sources.tolist(), m) == ([], [], 2)


def _prefill(model):
    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        model(input_ids=torch.tensor([[5, 6, 7, 8], [9, 10, 11, 12]]), cache=cache, use_cache=True)
    return cache


def _step(model, cache, originals, step):
    """One decoding step; row i feeds token 20 + (its original row) + step."""
    ids = torch.tensor([[20 + o + step] for o in originals])
    pos = torch.full((len(originals), 1), 4 + step)
    with torch.no_grad():
        return model(input_ids=ids, position_ids=pos, cache=cache, use_cache=True).logits[:, -1]


def test_preallocated_cache_matches_dynamic_cache_step_by_step(model):
    rows = torch.tensor([0, 1, 1, 0])  # prefill row of each of the 4 sequences
    ref = _prefill(model)
    ref.batch_select_indices(rows)
    pre = PreallocatedCache(_prefill(model), rows, capacity=10)
    pre_rows, ref_rows = [0, 1, 2, 3], [0, 1, 2, 3]  # original sequence held by each row
    for step in range(5):
        a, b = _step(model, pre, pre_rows, step), _step(model, ref, ref_rows, step)
        for i, o in enumerate(pre_rows):
            assert torch.allclose(a[i], b[ref_rows.index(o)], atol=1e-5)
        assert pre.get_seq_length() == ref.get_seq_length() == 5 + step
        assert pre.layers[0].keys.shape == ref.layers[0].keys.shape  # rows × heads × positions × head_dim
        if step == 1:  # sequences 0 and 1 finish: sequences 2 and 3 move into their rows
            holes, sources, m = pre.drop_rows(torch.tensor([o in (0, 1) for o in pre_rows]))
            assert (holes.tolist(), sources.tolist(), m) == ([0, 1], [2, 3], 2)
            pre_rows = [pre_rows[s] for s in sources.tolist()]
            ref.batch_select_indices(torch.tensor([2, 3]))
            ref_rows = [2, 3]


def test_preallocated_cache_refuses_overflow(model):
    pre = PreallocatedCache(_prefill(model), torch.tensor([0, 1]), capacity=5)
    with torch.no_grad():
        model(input_ids=torch.tensor([[1], [2]]), position_ids=torch.tensor([[4], [4]]), cache=pre, use_cache=True)
        with pytest.raises(ValueError, match="capacity"):
            model(input_ids=torch.tensor([[1], [2]]), position_ids=torch.tensor([[5], [5]]), cache=pre, use_cache=True)


def test_sampler_over_the_new_cache_is_batch_and_order_invariant(model, tokenizer, monkeypatch):
    """Rows finish at different steps (so rows move inside the cache), yet every completion equals
    the one sampled alone, the one sampled in reverse order and the one transformers' DynamicCache
    gives."""
    params = SamplingParams(top_k=10, temperature=1.0, max_new_tokens=16)
    prompts = [[5, 6, 7, 8, 9, 10, 11], [12, 13], [14, 15, 16, 17], [18], [12, 13], [5, 6, 7]]
    seeds = [completion_seed(0, 2, n, f"p{n}", n) for n in range(len(prompts))]
    # an "eos" that the random model actually samples, so completions end at different lengths
    free = sample(model, prompts, seeds, params, eos_id=-1, pad_id=0)
    eos = max(set(t for c in free for t in c[1:]), key=lambda t: sum(c.count(t) for c in free))
    moves = []
    real_drop = PreallocatedCache.drop_rows
    monkeypatch.setattr(PreallocatedCache, "drop_rows", lambda self, done: moves.append(int(done.sum())) or real_drop(self, done))
    batch = sample(model, prompts, seeds, params, eos, 0)
    lengths = sorted(len(c) for c in batch)
    assert moves and lengths[0] < lengths[-1]  # rows really left the preallocated cache mid-generation
    for i in range(len(prompts)):
        assert sample(model, [prompts[i]], [seeds[i]], params, eos, 0)[0] == batch[i]
    assert sample(model, prompts[::-1], seeds[::-1], params, eos, 0)[::-1] == batch
    monkeypatch.setattr(stream, "supports", lambda cache: False)  # transformers' DynamicCache path
    assert sample(model, prompts, seeds, params, eos, 0) == batch


def test_rows_for_memory_counts_cache_and_logits(model):
    config = model.config  # 2 layers, 2 key/value heads of size 64 / 4 = 16
    per_row = 2 * 2 * 2 * 16 * 10 * 4 + 3 * 4 * config.vocab_size  # keys + values over 10 positions, 3 logits rows
    assert kv_cache.bytes_per_row(config, 10) == per_row
    assert kv_cache.rows_for_memory(config, 10, 5 * per_row + 1) == 5
    assert kv_cache.rows_for_memory(config, 10, 1) == 1


def test_max_rows_splits_into_batches_with_the_same_completions(model, tokenizer):
    params = SamplingParams(top_k=10, temperature=1.0, max_new_tokens=8)
    prompts = [[5, 6, 7], [12, 13], [5, 6, 7], [14, 15, 16, 17], [12, 13], [5, 6, 7], [18]]
    seeds = list(range(100, 107))
    eos = tokenizer.eos_token_id
    whole = sample(model, prompts, seeds, params, eos, eos)
    for rows in (1, 2, 3):
        assert sample(model, prompts, seeds, params, eos, eos, max_rows=rows) == whole
    with pytest.raises(ValueError, match="max_rows"):
        sample(model, prompts, seeds, params, eos, eos, max_rows=0)
