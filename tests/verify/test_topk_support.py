"""The pure top-k support check (dgrpo.verify.topk) on hand-made logits."""

import torch

from dgrpo.verify.topk import first_outside_topk

EOS = 0


def test_first_position_outside_the_top_k_per_completion():
    logits = torch.full((3, 4, 6), -5.0)  # (G, T, V)
    logits[..., 1] = 3.0
    logits[..., 2] = 2.0
    logits[..., 3] = 1.0  # top-2 everywhere: tokens 1 and 2
    completions = [[1, 2, 1, EOS], [1, 3, 4], [2, EOS]]
    # completion 0: the final eos (logit −5) is outside; completion 1: token 3 at position 1;
    # completion 2: eos at position 1 is outside, the padding after it is never checked
    assert first_outside_topk(logits, completions, EOS, k=2) == [3, 1, 1]
    assert first_outside_topk(logits, completions, EOS, k=3) == [3, 2, 1]  # token 3 inside the top 3, token 4 not
    logits[..., EOS] = 2.0  # eos ties with token 2 at the 2nd logit: ties count as inside
    assert first_outside_topk(logits[[0, 2]], [[1, 2, 1, EOS], [2, EOS]], EOS, k=2) == [None, None]


def test_atol_absorbs_float_noise_below_the_kth_logit():
    logits = torch.tensor([[[3.0, 2.0, 1.9995]]])  # token 2 trails the 2nd logit by 5e-4
    assert first_outside_topk(logits, [[2]], 5, k=2) == [0]
    assert first_outside_topk(logits, [[2]], 5, k=2, atol=1e-3) == [None]
