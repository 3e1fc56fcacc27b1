"""The prepared GPU check runs end to end (here on the CPU, with a tiny model)."""

import importlib.util
import math
from pathlib import Path

import torch

from dgrpo.verify.replay import replay_mismatch
from dgrpo.policy.sampling import SamplingParams, completion_seed, sample
from dgrpo.policy.scoring import group_logits

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_check.py"
spec = importlib.util.spec_from_file_location("gpu_check", _PATH)
gpu_check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu_check)


def test_smoke_run_writes_every_figure(tmp_path):
    out = tmp_path / "check.json"
    report = gpu_check.main(["--device", "cpu", "--tiny", "--out", str(out), "--budget-s", "120"])
    assert out.exists()
    ex = report["exactness_float32"]
    assert ex["completions"] == 2 + 8 + 32 and 0 < ex["decisions"] <= 8 * 42  # up to 8 tokens each
    # On the CPU, float32 batched decoding and one re-scoring forward agree to rounding noise
    # (~1e-5 here), far below the production tolerance: no honest completion is rejected.
    assert ex["gap_quantiles"]["max"] < 1e-4
    assert ex["replay_false_positives_at_default_1e-3"] == 0 and ex["topk_false_positives"] == 0
    assert ex["chosen_atol"] >= 10 * ex["gap_quantiles"]["max"]
    assert ex["alone_vs_batched_tokens"]["checked"] == 16  # 8 from each batch size > 1
    for dtype in ("float32", "bfloat16"):
        s = report["speed_paper_batch"][dtype]
        assert s["generation"]["new_tokens"] == 2 * 4 * 8  # no eos: every row runs its full length
        assert s["generation"]["tokens_per_s"] > 0 and s["update"]["tokens_per_s"] > 0
    assert report["profile_generation_float32"] and all(0 <= r["share"] <= 1 for r in report["profile_generation_float32"])


def test_gap_matches_the_replay_defense():
    # replay_gap is the quantity replay_mismatch compares with atol: the defense accepts exactly
    # when the gap is within atol (a second implementation of the same decision).
    model = gpu_check.build_model(gpu_check.TINY, torch.device("cpu"), torch.float32)
    params = SamplingParams(10, 1.0, 8)
    prompts = gpu_check.random_prompts(6, 512, 4, 12, seed=3)
    seeds = [completion_seed(1, 0, 0, i, 0) for i in range(6)]
    outs = sample(model, prompts, seeds, params, gpu_check.EOS, gpu_check.EOS)
    for prompt, seed, ids in zip(prompts, seeds, outs):
        logits = group_logits(model, prompt, [ids], gpu_check.EOS)[0]
        gap, left = gpu_check.replay_gap(logits, ids, seed, params)
        assert not left and math.isfinite(gap)
        assert replay_mismatch(logits, ids, seed, params, gpu_check.EOS, atol=gap + 1e-9) is None
        forged = list(ids)
        forged[0] = int(logits[0].topk(10).indices[-1]) if forged[0] != int(logits[0].topk(10).indices[-1]) else int(logits[0].topk(10).indices[-2])
        g2, _ = gpu_check.replay_gap(logits, forged, seed, params)
        assert (replay_mismatch(logits, forged, seed, params, gpu_check.EOS, atol=1e-3) is None) == (g2 <= 1e-3)
