"""benchmarks/llamacpp_generation.py's measures that need no llama.cpp: the top-k tolerance a completion needs,
checked by hand and against dgrpo's own top-k check."""

import torch

from bench_script import load_script

llamacpp = load_script("", "llamacpp_generation", "bench")


def test_topk_atol_needed_by_hand_and_it_is_the_tolerance_at_which_the_top_k_check_accepts():
    from dgrpo.verify.topk import first_outside_topk

    z = torch.tensor([[5.0, 4.0, 3.0, 2.0, 1.0],    # k = 2: the 2nd largest is 4
                      [0.0, 1.0, 2.0, 3.5, 3.0],    # k = 2: 3.0
                      [9.0, 8.0, 0.5, 0.0, 7.0]])   # k = 2: 8.0
    assert llamacpp.topk_atol_needed(z, [0, 3, 1], 2) == 0.0      # every token inside the top-2
    assert llamacpp.topk_atol_needed(z, [2, 3, 1], 2) == 1.0      # 4 - 3 at position 0
    assert llamacpp.topk_atol_needed(z, [0, 0, 3], 2) == 8.0      # max(3 - 0, 8 - 0)
    ids = [2, 1, 4]                                               # gaps 1, 2, 1: needs 2
    need = llamacpp.topk_atol_needed(z, ids, 2)
    assert need == 2.0
    eos = 99  # no token of these completions ends them
    assert first_outside_topk(z[None], [ids], eos, 2, need)[0] is None
    assert first_outside_topk(z[None], [ids], eos, 2, need - 0.01)[0] == 1
    assert llamacpp.atol_quantiles([0.0, 0.0, 2.0, 1.0])["nonzero"] == 2
