"""Honest nondeterminism, measured: sample on one kernel path, verify on another (issue 36 item 2).

    python benchmarks/nondeterminism.py --prompts 64 --group 8 --max-new-tokens 32 \\
        --out results/nondeterminism/cpu.json
    python benchmarks/nondeterminism.py --device cuda --prompts 1250 --group 8 --out results/nondeterminism/cuda.json

The sender samples P × G honest completions of SmolLM2-135M-Instruct (float32, the run's top-k and
temperature, the embedded arithmetic task, seeds from :func:`~dgrpo.policy.sampling.completion_seed`)
once, on the *sender path*: 1 thread, oneDNN linears, batches of ``--sender-rows`` (8). Each pairing
then verifies every completion on another path:

* ``threads``: 2 threads instead of 1;
* ``batch``: batches of ``--verifier-rows`` (64) instead of 8 (more left padding per row);
* ``linear``: PyTorch's default float32 linear (MKL) instead of oneDNN (:mod:`dgrpo.policy.onednn`);
* ``cuda`` (``--device cuda``, no CPU pairings): batches of 64 instead of 8 on the GPU, TF32 off.

On the verifier path it runs, per completion:

* exact replay: regenerate from the seed (:func:`dgrpo.policy.sampling.sample`) and compare token for
  token (``replay`` with ``method: regenerate``);
* fast replay: the seeded decisions on one scoring forward (``replay``'s default, atol 1e-3);
* tolerant replay (:mod:`dgrpo.verify.tolerant`, its defaults), on the same logits, with the
  completion's maximum divergence score kept for calibration;
* top-k support (atol 1e-3) on the same logits.

A false positive is an honest completion a check rejects; rates carry Wilson 95 % intervals
(:func:`dgrpo.metrics.intervals.wilson`). bf16/fp16 are refused (``--dtype``): the checks are defined on
float32 logits, and a half-precision side is a configuration error, not nondeterminism. Prints one
JSON object; ``--out`` writes it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from pathlib import Path

import torch


@contextlib.contextmanager
def verifier_path(name: str, threads: int):
    """Switch this process to the verifier side of pairing ``name`` (threads or linear backend)."""
    import dgrpo.policy.sampling as sampling
    import dgrpo.policy.scoring as scoring
    from dgrpo.policy.onednn import onednn_linears

    before = torch.get_num_threads()
    torch.set_num_threads(2 if name == "threads" else threads)
    saved = sampling.onednn_linears, scoring.onednn_linears
    if name == "linear":  # MKL: the sampler and the scorer take their linears from these names
        sampling.onednn_linears = scoring.onednn_linears = lambda model, enabled=True: onednn_linears(model, False)
    try:
        yield
    finally:
        sampling.onednn_linears, scoring.onednn_linears = saved
        torch.set_num_threads(before)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--sender-rows", type=int, default=8)
    parser.add_argument("--verifier-rows", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1, help="threads of the sender (and verifier except 'threads')")
    parser.add_argument("--pairings", default="threads,batch,linear", help="comma-separated (CPU); cuda: batch only")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--out")
    args = parser.parse_args()
    from dgrpo.verify.generation import half_precision_problem

    problem = half_precision_problem(args.dtype, "--dtype")
    if problem or args.dtype != "float32":
        sys.exit(f"nondeterminism: {problem or f'--dtype={args.dtype} is not supported'}; use --dtype float32")
    if args.device == "cuda":
        if not torch.cuda.is_available():
            sys.exit("nondeterminism: --device cuda but torch sees no GPU; run on a GPU machine or use --device cpu")
        torch.backends.cuda.matmul.allow_tf32 = False  # TF32 moves logits by ~1e-3: not float32 (docs/gpu.md)
        torch.backends.cudnn.allow_tf32 = False
        pairings = ["batch"]
    else:
        pairings = args.pairings.split(",")
        unknown = set(pairings) - {"threads", "batch", "linear"}
        if unknown:
            sys.exit(f"nondeterminism: unknown pairing(s) {sorted(unknown)} in --pairings; use threads, batch, linear")
    torch.set_num_threads(args.threads)
    started = time.perf_counter()

    from dgrpo.config import load_config
    from dgrpo.metrics.intervals import wilson
    from dgrpo.policy.loading import load_policy
    from dgrpo.policy.policy import Policy
    from dgrpo.policy.sampling import SamplingParams, completion_seed, sample
    from dgrpo.policy.scoring import group_logits
    from dgrpo.tasks.arithmetic import ArithmeticTask
    from dgrpo.verify.replay import replay_mismatch
    from dgrpo.verify.tolerant import THRESHOLD, token_divergence, tolerant_mismatch
    from dgrpo.verify.topk import first_outside_topk

    cfg = load_config(overrides=[f"sampling.max_new_tokens={args.max_new_tokens}"])
    params = SamplingParams(cfg.sampling.top_k, cfg.sampling.temperature, args.max_new_tokens)
    model, tokenizer = load_policy(device=args.device)
    model.eval()
    weights = next(model.parameters()).dtype
    if weights != torch.float32:  # detected, not assumed
        sys.exit(f"nondeterminism: the loaded weights are {weights}; the checks need float32")
    policy = Policy("smollm2", model, tokenizer, params)
    task = ArithmeticTask(seed=0)
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    problems = [task.train[i] for i in range(args.prompts)]
    reqs = [p for p in problems for _ in range(args.group)]
    prompts = [policy.prompt_ids(task, p) for p in reqs]
    seeds = [completion_seed(36, 0, 0, p.prompt_id, i) for i, p in enumerate(reqs)]

    t0 = time.perf_counter()
    claimed = sample(model, prompts, seeds, params, eos, pad, max_rows=args.sender_rows)
    sender_seconds = time.perf_counter() - t0
    n = len(claimed)
    report = {"model": "SmolLM2-135M-Instruct", "dtype": "float32", "device": args.device,
              "torch": torch.__version__, "completions": n, "tokens": sum(map(len, claimed)),
              "max_new_tokens": args.max_new_tokens, "top_k": params.top_k, "temperature": params.temperature,
              "sender": {"threads": args.threads, "linear": "onednn" if args.device == "cpu" else "cuda",
                         "rows": args.sender_rows, "seconds": round(sender_seconds, 1)},
              "tolerant_threshold": THRESHOLD, "pairings": {}}
    for name in pairings:
        rows = args.verifier_rows if name == "batch" else args.sender_rows
        counts = {"exact_replay": 0, "fast_replay": 0, "tolerant_replay": 0, "topk": 0}
        max_scores: list[float] = []
        t0 = time.perf_counter()
        with verifier_path(name, args.threads):
            again = sample(model, prompts, seeds, params, eos, pad, max_rows=rows)
            regen_seconds = time.perf_counter() - t0
            t1 = time.perf_counter()
            with torch.no_grad():
                for gi in range(args.prompts):
                    members = range(gi * args.group, (gi + 1) * args.group)
                    logits = group_logits(model, prompts[members[0]], [claimed[i] for i in members], pad).cpu()
                    outside = first_outside_topk(logits, [claimed[i] for i in members], eos, params.top_k, 1e-3)
                    for g, i in enumerate(members):
                        counts["exact_replay"] += again[i] != claimed[i]
                        counts["fast_replay"] += replay_mismatch(logits[g], claimed[i], seeds[i], params, eos) is not None
                        counts["tolerant_replay"] += tolerant_mismatch(logits[g], claimed[i], seeds[i], params, eos) is not None
                        counts["topk"] += outside[g] is not None
                        max_scores.append(float(token_divergence(logits[g], claimed[i], seeds[i], params).max()))
            score_seconds = time.perf_counter() - t1
        ordered = sorted(max_scores)
        report["pairings"][name] = {
            "verifier": {"threads": 2 if name == "threads" else args.threads, "rows": rows,
                         "linear": "mkl" if name == "linear" else ("onednn" if args.device == "cpu" else "cuda")},
            "false_positives": {k: {"rejected": v, "of": n, "rate": v / n, "wilson95": [round(x, 6) for x in wilson(v, n)]}
                                for k, v in counts.items()},
            "tolerant_max_score": {"nonzero": sum(s > 0 for s in ordered), "largest": ordered[-1],
                                   "p99": ordered[int(0.99 * (n - 1))], "largest_five": ordered[-5:]},
            "seconds": {"regenerate": round(regen_seconds, 1), "score_and_checks": round(score_seconds, 1)},
        }
        print(json.dumps({name: report["pairings"][name]["false_positives"]}), file=sys.stderr, flush=True)
        if args.out:  # after each pairing: a run cut short keeps what it measured
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    report["command"] = "python " + " ".join(sys.argv)
    report["total_seconds"] = round(time.perf_counter() - started, 1)
    report["load_average_1min_at_end"] = os.getloadavg()[0]
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
