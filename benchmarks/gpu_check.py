"""The prepared GPU check (issue 19): exactness of the top-k and replay checks on CUDA, and speed.

    python benchmarks/gpu_check.py --out benchmarks/results/gpu_check.json        # on a GPU, ~4 min
    python benchmarks/gpu_check.py --device cpu --tiny --out /tmp/gpu_check.json  # smoke run anywhere

The model is untrained, with SmolLM2-135M-Instruct's architecture built from its config (no
download): enough for kernel speed and for the numerics of verification, which depend on shapes,
not on what the weights know. An untrained model's logits are flatter than a trained one's, so
near-ties (where rounding can flip a token) are more frequent: the exactness figures are a
pessimistic bound for a trained model.

What it measures, in float32 with TF32 off (:func:`dgrpo.policy.device.exact_float32`):

1. **Exactness.** Honest completions sampled at batch sizes 1..64 from prompts of mixed lengths
   (left padding), then re-scored the way a receiver does (one forward of prompt + completions,
   :func:`dgrpo.policy.scoring.group_logits`). Per completion: the largest fast-replay score gap
   (:func:`dgrpo.verify.replay.replay_mismatch`'s quantity) and whether any token fell outside
   the re-scored top-k. The tolerance is chosen from the gap distribution (10× its maximum,
   rounded up to a power of ten) and the false-positive rate is reported at it and at the
   default ``atol`` (1e-3). Also: how often the same (prompt, seed) alone and inside a batch give
   different tokens (batch-shape dependence of the kernels), and the gaps with TF32 on.
2. **Speed** at the paper's batch (32 prompts × 12 completions): generation and update
   tokens/s in float32 and bfloat16, and their fraction of the matmul peak the script measures.
3. **Profile** of one generation call: the top operators by device time.

Everything goes into one JSON file (``--out``).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from dgrpo.verify.replay import replay_mismatch
from dgrpo.verify.topk import outside_topk
from dgrpo.policy.device import exact_float32, resolve_device
from dgrpo.policy.sampling import SamplingParams, completion_seed, gumbel_table, sample
from dgrpo.policy.scoring import completion_mask, group_logits, pad_right, token_logprobs

# SmolLM2-135M-Instruct's config.json (the architecture only; the weights here are random).
SMOLLM2_135M = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                    num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
                    rms_norm_eps=1e-5, rope_theta=100000.0, tie_word_embeddings=True, hidden_act="silu")
# Qwen2.5-1.5B-Instruct's config.json, for the memory of one paper-scale update (random weights).
QWEN25_15B = dict(vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                  num_attention_heads=12, num_key_value_heads=2, max_position_embeddings=32768,
                  rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True, hidden_act="silu")
TINY = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=1024, tie_word_embeddings=True)
EOS = 2


def build_model(arch: dict, device: torch.device, dtype: torch.dtype, attn: str = "sdpa", seed: int = 0):
    """An untrained causal LM of ``arch`` on ``device`` (seeded; the same weights every time)."""
    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig(**arch, attn_implementation=attn, eos_token_id=EOS, pad_token_id=EOS))
    return model.to(device=device, dtype=dtype).eval()


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def random_prompts(n: int, vocab: int, lo: int, hi: int, seed: int) -> list[list[int]]:
    """n prompts of token ids 3..vocab-1 with lengths uniform in [lo, hi] (mixed lengths: left padding)."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(lo, hi + 1, (n,), generator=g).tolist()
    return [torch.randint(3, vocab, (L,), generator=g).tolist() for L in lengths]


# ------------------------------------------------------------------------------------------ speed
def matmul_peak(device: torch.device, dtype: torch.dtype, n: int, reps: int) -> float:
    """Measured matmul throughput, FLOP/s, of an n×n @ n×n product."""
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(2):
        a @ b
    sync(device)
    t0 = time.perf_counter()
    for _ in range(reps):
        a @ b
    sync(device)
    return 2 * n**3 * reps / (time.perf_counter() - t0)


def flops_per_token(model) -> float:
    """Forward FLOPs per token ≈ 2 × (parameters in matmuls), lm_head included, attention excluded."""
    cfg = model.config
    per_layer = 2 * cfg.hidden_size * cfg.hidden_size + 2 * cfg.hidden_size * (
        cfg.hidden_size * cfg.num_key_value_heads // cfg.num_attention_heads) + 3 * cfg.hidden_size * cfg.intermediate_size
    return 2.0 * (cfg.num_hidden_layers * per_layer + cfg.hidden_size * cfg.vocab_size)


def generation_speed(model, device, prompts, completions, params) -> dict:
    """Tokens/s of one batched :func:`sample` call over ``prompts`` × ``completions`` each."""
    rows = [p for p in prompts for _ in range(completions)]
    seeds = [completion_seed(0, 0, 0, i, j) for i in range(len(prompts)) for j in range(completions)]
    sample(model, rows[:2], seeds[:2], SamplingParams(params.top_k, params.temperature, 4), EOS + 10**9, EOS)  # warm-up
    sync(device)
    t0 = time.perf_counter()
    outs = sample(model, rows, seeds, params, EOS + 10**9, EOS)  # no eos: every row runs the full length
    sync(device)
    secs = time.perf_counter() - t0
    tokens = sum(len(o) for o in outs)
    return {"rows": len(rows), "new_tokens": tokens, "seconds": round(secs, 3), "tokens_per_s": tokens / secs}


def update_speed(model, device, prompts, completions, new_tokens: int) -> dict:
    """Tokens/s of one GRPO-shaped update: per group forward with grad, backward, one AdamW step."""
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-6)
    g = torch.Generator().manual_seed(1)
    vocab = model.config.vocab_size
    groups = [(p, [torch.randint(3, vocab, (new_tokens,), generator=g).tolist() for _ in range(completions)])
              for p in prompts]

    def step():
        opt.zero_grad(set_to_none=True)
        for prompt, comps in groups:
            logits = group_logits(model, prompt, comps, EOS)
            logp = token_logprobs(logits, pad_right(comps, EOS).to(device))
            (-logp.mean()).backward()
        opt.step()

    step()  # warm-up (optimizer state, allocator)
    sync(device)
    t0 = time.perf_counter()
    step()
    sync(device)
    secs = time.perf_counter() - t0
    tokens = sum(len(p) + new_tokens * completions for p, _ in groups)  # the prompt runs once per group
    model.eval()
    opt.zero_grad(set_to_none=True)
    del opt
    return {"tokens": tokens, "seconds": round(secs, 3), "tokens_per_s": tokens / secs}


# ------------------------------------------------------------------------------------- exactness
def replay_gap(logits: torch.Tensor, ids: list[int], seed: int, params: SamplingParams) -> tuple[float, bool]:
    """Largest fast-replay score gap of one completion, and whether a token left the top-k.

    The gap at a step is ``max_j(score_j) − score(claimed)`` with ``score = topk_logit/τ + g``
    (the quantity :func:`replay_mismatch` compares with ``atol``); a token outside the re-scored
    top-k counts as an infinite gap.
    """
    n = len(ids)
    top_v, top_i = logits[:n].topk(params.top_k, dim=-1)
    claimed = torch.tensor(ids, device=logits.device)[:, None]
    hit = top_i == claimed
    if not bool(hit.any(-1).all()):
        return math.inf, True
    score = top_v / params.temperature + gumbel_table(seed, params.max_new_tokens, params.top_k)[:n].to(logits.device)
    chosen = torch.where(hit, score, torch.full_like(score, -math.inf)).max(-1).values
    return float((score.max(-1).values - chosen).max()), False


def decision_margins(logits: torch.Tensor, ids: list[int], seed: int, params: SamplingParams) -> torch.Tensor:
    """(n,) perturbed-score margin between the best and second-best candidate at each step: how
    far each sampling decision was from a tie (a rounding error larger than this flips it)."""
    n = len(ids)
    top_v = logits[:n].topk(params.top_k, dim=-1).values
    score = top_v / params.temperature + gumbel_table(seed, params.max_new_tokens, params.top_k)[:n].to(logits.device)
    best2 = score.topk(2, dim=-1).values
    return (best2[:, 0] - best2[:, 1]).cpu()


@torch.no_grad()
def exactness(model, device, params: SamplingParams, per_batch: dict[int, int], vocab: int, budget_s: float) -> dict:
    """Sample honest completions at each batch size, re-score them per group, collect the gaps."""
    start = time.perf_counter()
    gaps, outside, by_batch, invariance = [], 0, {}, {"checked": 0, "differ": 0}
    topk_fp, margins = 0, []
    for b, total in per_batch.items():
        done, batch_gaps = 0, []
        call = 0
        while done < total and time.perf_counter() - start < budget_s:
            prompts = random_prompts(b, vocab, 8, 160, seed=10_000 * b + call)
            seeds = [completion_seed(19, b, call, i, 0) for i in range(b)]
            outs = sample(model, prompts, seeds, params, EOS, EOS)
            for prompt, seed, ids in zip(prompts, seeds, outs):
                logits = group_logits(model, prompt, [ids], EOS)[0]
                gap, left = replay_gap(logits, ids, seed, params)
                mask = completion_mask(torch.tensor([ids], device=device), EOS, [len(ids)])
                topk_fp += int(outside_topk(logits[None, : len(ids)], torch.tensor([ids], device=device), mask,
                                            params.top_k).any())
                outside += left
                margins.append(decision_margins(logits, ids, seed, params))
                batch_gaps.append(gap)
            if b > 1 and call == 0:  # the same (prompt, seed) alone: does the batch shape change tokens?
                for prompt, seed, ids in list(zip(prompts, seeds, outs))[:8]:
                    alone = sample(model, [prompt], [seed], params, EOS, EOS)[0]
                    invariance["checked"] += 1
                    invariance["differ"] += alone != ids
            done += b
            call += 1
        finite = [g for g in batch_gaps if math.isfinite(g)]
        by_batch[str(b)] = {"completions": len(batch_gaps), "max_gap": max(finite, default=0.0),
                            "outside_topk": sum(not math.isfinite(g) for g in batch_gaps)}
        gaps += batch_gaps
    finite = sorted(g for g in gaps if math.isfinite(g))
    worst = finite[-1] if finite else 0.0
    tol = 10 ** math.ceil(math.log10(10 * worst)) if worst > 0 else 1e-6
    q = lambda p: finite[min(len(finite) - 1, int(p * len(finite)))] if finite else None  # noqa: E731
    m = torch.cat(margins) if margins else torch.zeros(0)
    return {
        "completions": len(gaps), "decisions": int(m.numel()),
        "decisions_within_margin": {str(e): int((m < e).sum()) for e in (1e-6, 1e-5, 1e-4, 1e-3)}, "seconds": round(time.perf_counter() - start, 1),
        "gap_quantiles": {"p50": q(0.5), "p90": q(0.9), "p99": q(0.99), "p999": q(0.999), "max": worst},
        "chosen_atol": tol,
        "replay_false_positives_at_chosen": sum(g > tol for g in gaps),
        "replay_false_positives_at_default_1e-3": sum(g > 1e-3 for g in gaps),
        "topk_false_positives": topk_fp, "outside_topk": outside,
        "by_batch_size": by_batch, "alone_vs_batched_tokens": invariance,
    }


def paper_update_memory(arch: dict, device: torch.device, completions: int, prompt_len: int, new_tokens: int,
                        checkpointing: bool) -> dict:
    """Peak GPU memory of one paper-scale update step: float32 weights, AdamW state and one group
    (``completions`` × ``new_tokens`` after a ``prompt_len`` prompt) forward + backward."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.cuda.reset_peak_memory_stats(device)
    model = Qwen2ForCausalLM(Qwen2Config(**arch, attn_implementation="sdpa")).to(device)
    if checkpointing:
        model.gradient_checkpointing_enable()
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6)
    g = torch.Generator().manual_seed(2)
    prompt = torch.randint(3, arch["vocab_size"], (prompt_len,), generator=g).tolist()
    comps = [torch.randint(3, arch["vocab_size"], (new_tokens,), generator=g).tolist() for _ in range(completions)]
    t0 = time.perf_counter()
    for _ in range(2):  # the second step holds AdamW's state too
        opt.zero_grad(set_to_none=True)
        logits = group_logits(model, prompt, comps, EOS)
        (-token_logprobs(logits, pad_right(comps, EOS).to(device)).mean()).backward()
        del logits
        opt.step()
    sync(device)
    out = {"peak_gib": round(torch.cuda.max_memory_allocated(device) / 2**30, 2), "gradient_checkpointing": checkpointing,
           "seconds_two_steps": round(time.perf_counter() - t0, 2),
           "parameters": sum(p.numel() for p in model.parameters())}
    del model, opt
    torch.cuda.empty_cache()
    return out


def profile_generation(model, device, prompts, completions, params) -> list[dict]:
    """Top operators by device (CUDA) or CPU time for one generation call."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    rows = [p for p in prompts for _ in range(completions)]
    seeds = list(range(len(rows)))
    with profile(activities=acts) as prof:
        sample(model, rows, seeds, params, EOS + 10**9, EOS)
        sync(device)
    key = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    events = sorted(prof.key_averages(), key=lambda e: getattr(e, key, 0), reverse=True)[:12]
    total = sum(getattr(e, key, 0) for e in prof.key_averages()) or 1
    return [{"op": e.key, "share": round(getattr(e, key, 0) / total, 4), "calls": e.count} for e in events]


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="auto")
    ap.add_argument("--out", default="benchmarks/results/gpu_check.json")
    ap.add_argument("--tiny", action="store_true", help="a 2-layer model and small counts (smoke run, CPU)")
    ap.add_argument("--budget-s", type=float, default=150.0, help="time cap of the exactness part")
    args = ap.parse_args(argv)
    device = resolve_device(args.device)
    if device.type != "cuda" and not args.tiny:  # (review u36f: `auto` without a GPU ran the full GPU workload quietly)
        print(f"gpu_check: no GPU here (--device {args.device} -> {device}): the full check on {device} takes hours; "
              "--tiny is the smoke run", file=sys.stderr)
    exact_float32(device)
    arch = TINY if args.tiny else SMOLLM2_135M
    report: dict = {"device": str(device), "torch": torch.__version__, "python": platform.python_version(),
                    "model": "tiny" if args.tiny else "SmolLM2-135M architecture, untrained"}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        report["gpu"] = {"name": props.name, "memory_gib": round(props.total_memory / 2**30, 1),
                         "capability": f"{props.major}.{props.minor}"}
    params = SamplingParams(top_k=10, temperature=1.0, max_new_tokens=32 if not args.tiny else 8)
    per_batch = ({1: 2, 8: 8, 32: 32} if args.tiny else
                 {1: 64, 2: 128, 4: 256, 8: 512, 16: 1024, 32: 2048, 64: 6208})
    model = build_model(arch, device, torch.float32)
    report["exactness_float32"] = exactness(model, device, params, per_batch, arch["vocab_size"], args.budget_s)
    if device.type == "cuda":  # why TF32 stays off: the same measurement on a small sample with it on
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        report["exactness_tf32_on"] = exactness(model, device, params, {64: 512}, arch["vocab_size"], 30.0)
        exact_float32(device)
    n = 512 if args.tiny else 8192
    peak = {"float32": matmul_peak(device, torch.float32, n, 3 if args.tiny else 20)}
    peak["bfloat16"] = matmul_peak(device, torch.bfloat16, n, 3 if args.tiny else 50)
    report["matmul_peak_tflops"] = {k: v / 1e12 for k, v in peak.items()}
    b, g, new = (2, 4, 8) if args.tiny else (32, 12, 128)
    prompts = random_prompts(b, arch["vocab_size"], 100, 200, seed=7) if not args.tiny else random_prompts(b, 512, 8, 16, 7)
    speed_params = SamplingParams(10, 1.0, new)
    speed = {}
    for dtype_name, dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16)):
        m = build_model(arch, device, dtype)
        fpt = flops_per_token(m)
        gen = generation_speed(m, device, prompts, g, speed_params)
        upd = update_speed(m, device, prompts[: max(1, b // 4)], g, new)
        gen["fraction_of_matmul_peak"] = gen["tokens_per_s"] * fpt / peak[dtype_name]
        upd["fraction_of_matmul_peak"] = upd["tokens_per_s"] * 3 * fpt / peak[dtype_name]  # fwd + bwd ≈ 3× fwd
        speed[dtype_name] = {"generation": gen, "update": upd, "forward_flops_per_token": fpt}
        if device.type == "cuda":
            speed[dtype_name]["peak_memory_gib"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 2)
        del m
    report["speed_paper_batch"] = {"prompts": b, "completions_per_prompt": g, "new_tokens": new, **speed}
    report["profile_generation_float32"] = profile_generation(model, device, prompts[:4], g, SamplingParams(10, 1.0, 16))
    if device.type == "cuda" and not args.tiny:  # what configs/paper_*.yaml need per node process
        report["paper_update_memory_qwen2.5-1.5b"] = [
            paper_update_memory(QWEN25_15B, device, 12, 256, 512, ckpt) for ckpt in (False, True)]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    print(json.dumps({k: report[k] for k in ("device", "matmul_peak_tflops")}, indent=1))
    print(f"wrote {out}")
    return report


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
