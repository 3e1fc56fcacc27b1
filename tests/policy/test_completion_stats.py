"""completion_stats: per-token log-probs and entropies of many (prompt, completion) pairs, the
prompts' common prefix run once, against group_logits pair by pair."""

import pytest
import torch

from dgrpo.policy.scoring import completion_stats, group_logits

HEAD = list(range(30, 50))  # 20 tokens shared by the prompts


@pytest.mark.parametrize("max_tokens", [12, 1024], ids=["many_batches", "one_batch"])
@pytest.mark.parametrize("shared", [True, False], ids=["common_prefix", "none"])
def test_stats_match_group_logits_pair_by_pair(model, max_tokens, shared):
    model.eval()
    prompts = [HEAD + [60, 61, 62], HEAD + [70], HEAD + [80, 81], HEAD + [60, 61, 62]]
    if not shared:
        prompts[1] = [5, 6, 7] + HEAD  # no common prefix: every prompt runs whole
    completions = [[3, 4, 5, 6], [7], [8, 9, 10, 11, 12, 13, 14], [15, 16]]
    stats = completion_stats(model, prompts, completions, max_tokens=max_tokens)
    for p, c, (logp, entropy) in zip(prompts, completions, stats):
        with torch.no_grad():
            full = torch.log_softmax(group_logits(model, p, [c], 0)[0, : len(c)].float(), -1)  # (T, V)
        assert logp.shape == entropy.shape == (len(c),)
        assert torch.allclose(logp, full.gather(-1, torch.tensor(c)[:, None]).squeeze(-1), atol=1e-5)
        assert torch.allclose(entropy, -(full.exp() * full).sum(-1), atol=1e-5)


def test_bad_pairs_are_refused(model):
    with pytest.raises(ValueError, match="one non-empty prompt per non-empty completion"):
        completion_stats(model, [[1, 2]], [[3], [4]])
    with pytest.raises(ValueError, match="one non-empty prompt per non-empty completion"):
        completion_stats(model, [[1, 2]], [[]])
