"""benchmarks/generation.py's update phases name what the update runs now: the policy's forward (the packed
groups' log-probs, not learner.forward), the reference model's, the backward, the shared prefix's forward and
backward, clipping and AdamW, on the tiny model; every wrapped function is put back afterwards."""

import copy

import pytest
import torch
from bench_script import load_script

from dgrpo.grpo.learner import GRPOParams, Learner
from dgrpo.policy.prefix import SharedPrefix
from dgrpo.types import Rollout

EOS = 2
SHARED = list(range(30, 50))
PROMPTS = {"a": SHARED + [60, 61, 62], "b": SHARED + [70]}
SPECS = [("a", [20, 21, EOS], 1.0), ("a", [22, EOS], 0.0), ("b", [30, EOS], 1.0), ("b", [31, 32, 33, EOS], 0.0)]


@pytest.fixture(scope="module")
def generation():
    return load_script("", "generation", "bench")


def _rollouts():
    return [Rollout(pid, PROMPTS[pid], ids, "", 0, reward=r) for pid, ids, r in SPECS]


@pytest.mark.parametrize("beta,packed", [(0.0, True), (0.1, True), (0.0, False)])
def test_update_phases_name_what_runs(generation, model, beta, packed):
    learner = Learner(model, GRPOParams(beta=beta, max_len=6), EOS, EOS,
                      ref_model=copy.deepcopy(model) if beta else None)
    if not packed:
        learner.pack_rows = 0
    calls = []
    original = torch.Tensor.backward
    phases = generation.update_phases(learner, lambda: calls.append(1) or _rollouts(), threads=1)
    assert calls == [1]
    assert set(phases) == {"wall", "cpu_share", *generation.PHASES}
    for key in ("prefix_forward", "forward", "backward", "prefix_backward", "clip", "adamw"):
        assert phases[key] > 0, key
    assert (phases["reference_forward"] > 0) == (beta > 0)
    assert phases["other"] >= 0
    assert sum(v for k, v in phases.items() if k in generation.PHASES) == pytest.approx(phases["wall"])
    # put back: the class's methods again, nothing left on the instances
    assert torch.Tensor.backward is original and "forward" not in vars(learner)
    assert "step" not in vars(learner.optimizer) and SharedPrefix.__init__.__name__ == "__init__"


def test_update_section_times_after_mkl_on_mkl_and_the_others_on_onednn(generation, model):
    """``after_mkl`` is ``after`` with the update's linears on MKL (grpo.update_kernel=mkl); every other
    variant runs the update on oneDNN, interleaved, each repeat in UPDATE's order."""
    from types import SimpleNamespace

    learner = Learner(model, GRPOParams(max_len=6, lr=0.0), EOS, EOS)
    kernels, step = [], learner.step
    learner.step = lambda batch: kernels.append(learner.kernel) or step(batch)
    prompts = [r.prompt_ids for r in _rollouts()]
    tokens = sum(len(r.completion_ids) for r in _rollouts())
    out = generation.update_section(SimpleNamespace(update_repeats=2, threads=1), learner, _rollouts, prompts, tokens,
                                    weights=1000, peak={"mkl_gflops": 1.0, "onednn_gflops": 1.0})
    assert list(out["variants"]) == list(generation.UPDATE) and "after_mkl" in out["variants"]
    want = [generation.KERNEL.get(name, "onednn") for name in generation.UPDATE]
    assert kernels[2 : 2 + 2 * len(want)] == want * 2  # after the two warm-up steps (onednn, mkl)
    assert kernels[:2] == ["onednn", "mkl"] and want.count("mkl") == 1
    assert set(out["phases"]) == {"keys", "+shared", "after", "after_mkl"}
    assert out["auto_update_kernel"] in ("onednn", "mkl") and isinstance(out["cpu_vendor"], str)
