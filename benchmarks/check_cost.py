"""Cost of the logit-level checks per completion, on logits already computed (the update's own forward).

    python benchmarks/check_cost.py --threads 1 --out results/nondeterminism/check_cost.json

Random float32 logits of SmolLM2-135M's shape (64 completions × 32 positions × 49,152 tokens, N(0, 3²)),
completions sampled from them by the seeded sampler (:func:`dgrpo.policy.sampling.choose_tokens`), then
each check timed on all 64 (best of ``--repeats`` after one warm-up): top-k support
(:func:`dgrpo.verify.topk.first_outside_topk`), fast exact replay (:func:`dgrpo.verify.replay.replay_mismatch`)
and tolerant replay (:func:`dgrpo.verify.tolerant.tolerant_mismatch`). The forward pass that produces
the logits is not included (the update pays it; ``benchmarks/defense_cost.py`` and
``benchmarks/nondeterminism.py`` time it). Prints one JSON object in ms per completion.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from dgrpo.policy.sampling import SamplingParams, choose_tokens, gumbel_table
    from dgrpo.verify.replay import replay_mismatch
    from dgrpo.verify.tolerant import tolerant_mismatch
    from dgrpo.verify.topk import first_outside_topk

    n, t, v = 64, 32, 49152
    params = SamplingParams(10, 1.0, t)
    logits = torch.randn(n, t, v, generator=torch.Generator().manual_seed(0)) * 3
    ids = [choose_tokens(logits[i], gumbel_table(i, t, 10), params).tolist() for i in range(n)]
    eos = v  # no token is eos: every completion runs to max_new_tokens
    checks = {"topk": lambda: first_outside_topk(logits, ids, eos, 10, 1e-3),
              "fast_replay": lambda: [replay_mismatch(logits[i], ids[i], i, params, eos) for i in range(n)],
              "tolerant_replay": lambda: [tolerant_mismatch(logits[i], ids[i], i, params, eos) for i in range(n)]}
    report = {"shape": f"{n} completions × ({t}, {v}) float32", "threads": args.threads, "ms_per_completion": {}}
    for name, fn in checks.items():
        fn()
        best = float("inf")
        for _ in range(args.repeats):
            start = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - start)
        report["ms_per_completion"][name] = round(best / n * 1e3, 2)
    report["command"] = f"python benchmarks/check_cost.py --threads {args.threads} --repeats {args.repeats}"
    print(json.dumps(report))
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
