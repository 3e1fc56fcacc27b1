"""False positives of the top-k and fast-replay checks on honest completions, and batch invariance.

    python benchmarks/exactness.py --prompts 128 --group 8 --max-new-tokens 64 --threads 2 \\
        --out benchmarks/results/exactness.json

Samples P × G honest completions of SmolLM2-135M-Instruct (float32, top-k 10, temperature 1) on
the embedded arithmetic task with the sampler (batches of ``--max-rows``), then scores every group
the way the update does (:func:`dgrpo.policy.scoring.group_logits`, one packed forward per group)
and runs on those logits

* the top-k support check (:class:`dgrpo.defenses.topk.TopKDefense`, its default atol), and
* the fast replay check (:func:`dgrpo.verify.replay.replay_mismatch`, its default atol).

A false positive is an honest completion either check rejects. The rate comes with its exact
two-sided 95 % Clopper-Pearson interval. It also records the smallest margins: the largest replay
score gap of an honest token and the smallest (token logit − largest logit outside the top-k) of
an honest token, next to the tolerance 1e-3 the checks allow, and the closest call of any sampling decision (best minus
runner-up perturbed score: a decision closer than the logit noise could flip between batches).

Invariance: the first ``--invariance`` completions are sampled again alone (batch 1), and all of
them again in reverse order and other batch splits (``--no-reverse`` skips this second sampling of
every completion, half the run's time); every completion must come out token-for-token the same.
Prints one JSON object; ``--out`` writes it.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch
from bench_setup import arithmetic_bench, group_requests


def clopper_pearson(k: int, n: int, alpha: float = 0.05) -> tuple[float, float]:
    """Exact two-sided binomial interval for k events in n trials (scipy's Clopper-Pearson)."""
    from scipy.stats import binomtest

    ci = binomtest(k, n).proportion_ci(1 - alpha, method="exact")
    return ci.low, ci.high


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=128)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--max-rows", type=int, default=64)
    parser.add_argument("--invariance", type=int, default=48, help="completions re-sampled alone")
    parser.add_argument("--no-reverse", action="store_true", help="skip sampling everything again in reverse order")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    started = time.perf_counter()

    from dgrpo.config import load_config
    from dgrpo.defenses.replay import ReplayDefenseConfig
    from dgrpo.defenses.topk import TopKDefense, TopKDefenseConfig
    from dgrpo.policy.sampling import gumbel_table, sample
    from dgrpo.policy.scoring import group_logits
    from dgrpo.types import Rollout
    from dgrpo.verify.replay import replay_mismatch

    cfg = load_config(overrides=[f"sampling.max_new_tokens={args.max_new_tokens}"])
    model, tokenizer, policy, task, params = arithmetic_bench(args.max_new_tokens, cfg.sampling.top_k, cfg.sampling.temperature)
    model.eval()
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    problems = [task.train[i] for i in range(args.prompts)]
    reqs, seeds = group_requests(problems, args.group)
    prompts = [policy.prompt_ids(task, p) for p in reqs]

    t0 = time.perf_counter()
    outs = sample(model, prompts, seeds, params, eos, pad, max_rows=args.max_rows)
    gen_seconds = time.perf_counter() - t0

    topk = TopKDefense(TopKDefenseConfig(), cfg, policy)
    replay_atol = ReplayDefenseConfig().atol
    fp_topk = fp_replay = 0
    flagged: set[int] = set()
    worst_gap, min_margin, min_decision, reasons = 0.0, float("inf"), float("inf"), []
    t0 = time.perf_counter()
    with torch.no_grad():
        for gi, problem in enumerate(problems):
            members = range(gi * args.group, (gi + 1) * args.group)
            group = [Rollout(problem.prompt_id, prompts[i], outs[i], "", 0, seed=seeds[i]) for i in members]
            logits = group_logits(model, prompts[members[0]], [outs[i] for i in members], pad)
            for i, v in zip(members, topk.inspect(group, logits)):
                if not v.accepted:
                    fp_topk += 1
                    flagged.add(i)
                    reasons.append(("topk", v.reason))
            for g, i in enumerate(members):
                miss = replay_mismatch(logits[g], outs[i], seeds[i], params, eos, replay_atol)
                if miss is not None:
                    fp_replay += 1
                    flagged.add(i)
                    reasons.append(("replay", miss[1]))
                n = len(outs[i])
                top_v, top_i = logits[g, :n].topk(params.top_k + 1, dim=-1)
                claimed = torch.tensor(outs[i])
                token = logits[g, torch.arange(n), claimed]
                min_margin = min(min_margin, float((token - top_v[:, -1]).min()))  # above the best token outside
                top_v, top_i = top_v[:, :-1], top_i[:, :-1]
                score = top_v / params.temperature + gumbel_table(seeds[i], params.max_new_tokens, params.top_k)[:n]
                hit = top_i == claimed[:, None]
                chosen = torch.where(hit, score, torch.full_like(score, float("-inf"))).max(-1).values
                worst_gap = max(worst_gap, float((score.max(-1).values - chosen).max()))
                best2 = score.topk(2, dim=-1).values
                min_decision = min(min_decision, float((best2[:, 0] - best2[:, 1]).min()))
    score_seconds = time.perf_counter() - t0

    n = len(outs)
    k_inv = min(args.invariance, n)
    alone_diff = sum(sample(model, [prompts[i]], [seeds[i]], params, eos, pad)[0] != outs[i] for i in range(k_inv))
    rev_checked, rev_diff = 0, 0
    if not args.no_reverse:
        rev = sample(model, prompts[::-1], seeds[::-1], params, eos, pad, max_rows=max(1, args.max_rows // 2))[::-1]
        rev_checked, rev_diff = n, sum(a != b for a, b in zip(rev, outs))
    report = {
        "model": "SmolLM2-135M-Instruct", "dtype": "float32", "completions": n, "tokens": sum(map(len, outs)),
        "sampling": {"top_k": params.top_k, "temperature": params.temperature, "max_new_tokens": params.max_new_tokens},
        "generate_seconds": gen_seconds, "score_seconds": score_seconds,
        "topk": {"false_positives": fp_topk, "rate": fp_topk / n, "ci95": clopper_pearson(fp_topk, n),
                 "atol": topk.atol, "min_token_minus_first_outside_logit": min_margin},
        "replay_fast": {"false_positives": fp_replay, "rate": fp_replay / n, "ci95": clopper_pearson(fp_replay, n),
                        "atol": replay_atol, "max_honest_score_gap": worst_gap,
                        "min_best_minus_runner_up_score": min_decision},
        "either_check": {"false_positives": len(flagged), "rate": len(flagged) / n, "ci95": clopper_pearson(len(flagged), n)},
        "rejections": reasons[:20],
        "invariance": {"alone_checked": k_inv, "alone_different": alone_diff,
                       "reverse_order_half_batches_checked": rev_checked, "reverse_order_half_batches_different": rev_diff},
        "shared_machine": True, "load_average_1min_at_end": os.getloadavg()[0],
        "total_seconds": time.perf_counter() - started,
    }
    print(json.dumps(report))
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
