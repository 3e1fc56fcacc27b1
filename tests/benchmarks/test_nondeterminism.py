"""benchmarks/nondeterminism.py: its arguments, and its CPU pairings end to end on the tiny model."""

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

from dgrpo.metrics.intervals import wilson

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "nondeterminism.py"
spec = importlib.util.spec_from_file_location("nondeterminism_bench", _PATH)
nd = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = nd  # its dataclass resolves annotations through it
spec.loader.exec_module(nd)


@pytest.mark.parametrize("argv, says", [
    (["--pairings", "threads,warp"], "--pairings warp is no pairing of --device cpu; use some of threads, batch, linear"),
    (["--pairings", "cuda_cpu"], "--pairings cuda_cpu is no pairing of --device cpu"),
    (["--pairings", ","], "--pairings (empty)"),
    (["--prompts", "0"], "--prompts=0; use a whole number ≥ 1"),
    (["--verifier-rows", "-3"], "--verifier-rows=-3"),
    (["--start", "-1"], "--start=-1; use a prompt index ≥ 0"),
])
def test_bad_arguments_are_one_line_naming_the_flag(argv, says):
    with pytest.raises(SystemExit) as err:
        nd.parse(argv)
    assert says in str(err.value) and "\n" not in str(err.value)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_cuda_without_a_gpu_is_refused_before_any_model_loads():
    with pytest.raises(SystemExit, match="--device cuda but torch sees no GPU"):
        nd.parse(["--device", "cuda"])


def test_default_pairings_per_device():
    assert nd.parse([]).pairings == list(nd.CPU_PAIRINGS)
    cpu = nd.parse(["--sender-rows", "4", "--verifier-rows", "16"])
    pairs = nd.pairings(cpu)
    assert pairs["batch"][1].rows == 16 and pairs["linear"][1].linear == "mkl" and pairs["threads"][1].threads == 2
    assert pairs["bf16_sender"][0].dtype == "bfloat16" and pairs["bf16_sender"][1] == pairs["batch"][0]
    cpu.device = "cuda"  # the GPU table without a GPU: its paths, not a run
    gpu = nd.pairings(cpu)
    assert set(gpu) == set(nd.CUDA_PAIRINGS)
    assert (gpu["cuda_cpu"][0].device, gpu["cuda_cpu"][1].device) == ("cuda", "cpu")
    assert (gpu["cpu_cuda"][0].device, gpu["cpu_cuda"][1].device) == ("cpu", "cuda")


def test_cpu_pairings_count_an_edited_completion_and_refuse_bf16(tiny_model_dir, monkeypatch, tmp_path):
    """The sender's completion 1 gets its first token replaced by the token its prompt makes least likely
    (found here by a forward pass of its own): every check must reject exactly that one, on every
    float32 pairing; the honest ones pass (float32, tiny model); a bf16 verifier is refused."""
    honest_sample, edited = nd.sample_on, {}

    def sender_edits(path, model, prompts, seeds, params, eos, pad):
        out = honest_sample(path, model, prompts, seeds, params, eos, pad)
        if not edited:  # the first call is the sender's
            with torch.no_grad():
                last = model(torch.tensor([prompts[1]])).logits[0, -1]
            edited["token"] = int(last.argmin())
            out[1] = [edited["token"]] + out[1][1:]
        return out

    monkeypatch.setattr(nd, "sample_on", sender_edits)
    out = tmp_path / "nd.json"
    report = nd.main(["--model", tiny_model_dir, "--prompts", "3", "--group", "2", "--max-new-tokens", "6",
                      "--pairings", "threads,linear,bf16_verifier", "--out", str(out)])
    assert out.exists()
    for name in ("threads", "linear"):
        p = report["pairings"][name]
        assert p["completions"] == 6
        assert p["rejected"] == {c: [1] for c in nd.CHECKS}, name
        assert p["false_positives"]["topk"]["wilson95"] == [round(x, 6) for x in wilson(1, 6)]
        assert p["tolerant_max_score"]["largest"] == float("inf") and p["tolerant_max_score"]["nonzero"] == 1
    assert report["pairings"]["linear"]["paths"]["verifier"]["linear"] == "mkl"
    assert "bfloat16" in report["pairings"]["bf16_verifier"]["refused"]
    rows = report["table"].splitlines()
    assert len(rows) == 2 + 3 and "| linear |" in rows[3] and "1/6 [" in rows[3] and "refused" in rows[4]
    # a second part (the next 2 prompts, no edit) joins the first: counts add, indices shift, intervals recomputed
    part2 = tmp_path / "nd2.json"
    nd.main(["--model", tiny_model_dir, "--start", "3", "--prompts", "2", "--group", "2", "--max-new-tokens", "6",
             "--pairings", "threads", "--out", str(part2)])
    both = nd.main(["--combine", str(out), str(part2), "--out", str(tmp_path / "all.json")])
    threads = both["pairings"]["threads"]
    assert threads["completions"] == 10 and threads["rejected"] == {c: [1] for c in nd.CHECKS}
    assert threads["false_positives"]["exact_replay"]["wilson95"] == [round(x, 6) for x in wilson(1, 10)]
    assert both["pairings"]["linear"]["completions"] == 6 and [p["prompts"] for p in both["parts"]] == [[0, 3], [3, 5]]
    with pytest.raises(SystemExit, match="overlap in prompts"):
        nd.main(["--combine", str(out), str(out)])
