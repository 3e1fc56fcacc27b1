"""Tolerant replay's room for an adaptive edit (issue 36 item 1, review u36 I), per (tie, threshold).

    python benchmarks/tolerant_capacity.py --prompts 32 --group 8 --max-new-tokens 32 --threads 2 \
        --out results/tolerant_capacity/capacity.json

Samples ``--prompts`` × ``--group`` honest completions of the embedded arithmetic task with SmolLM2-135M-Instruct
(float32, the run's top-k and temperature, seeds as a run binds them) and scores each on the same weights. At every
position it counts the other top-k tokens a sender holding the weights and its bound seed could claim there and still
pass tolerant replay (:func:`dgrpo.verify.tolerant.free_alternatives`): a one-token edit there, with the rest sampled
from the seed, is accepted (the review's ``9 - 2 = 5`` → ``9 * 2 = 18``). Reported per setting: positions and
completions with such a choice (Wilson 95 %), and the choices that put a digit or an arithmetic operator in place of
another token. Exact fast replay's gap test (tie 0, ``atol`` 1e-3) is the last setting, for comparison.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

SETTINGS = [(1e-2, 2e-2), (1e-3, 2e-3), (1e-4, 2e-4), (0.0, 1e-3)]
ARITHMETIC = set("0123456789+-*/=×÷")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    for name in ("prompts", "group", "max_new_tokens", "threads"):
        if getattr(args, name) < 1:
            sys.exit(f"tolerant_capacity: --{name.replace('_', '-')}={getattr(args, name)}; use a whole number ≥ 1")
    torch.set_num_threads(args.threads)
    from dgrpo.config import load_config
    from dgrpo.metrics.intervals import wilson
    from dgrpo.policy.loading import load_policy
    from dgrpo.policy.policy import Policy
    from dgrpo.policy.sampling import SamplingParams, completion_seed, sample
    from dgrpo.policy.scoring import group_logits
    from dgrpo.tasks.arithmetic import ArithmeticTask
    from dgrpo.verify.tolerant import free_alternatives, token_divergence

    started, load0 = time.perf_counter(), os.getloadavg()[0]
    cfg = load_config(overrides=[f"sampling.max_new_tokens={args.max_new_tokens}"])
    params = SamplingParams(cfg.sampling.top_k, cfg.sampling.temperature, args.max_new_tokens)
    model, tok = load_policy(args.model, "float32", trainable=False)
    policy = Policy(args.model, model, tok, params)
    task = ArithmeticTask(seed=0)
    if args.prompts > len(task.train):
        sys.exit(f"tolerant_capacity: --prompts={args.prompts} but the task has {len(task.train)} training prompts")
    reqs = [task.train[i] for i in range(args.prompts) for _ in range(args.group)]
    prompts = [policy.prompt_ids(task, p) for p in reqs]
    seeds = [completion_seed(36, 0, 0, p.prompt_id, i) for i, p in enumerate(reqs)]
    eos, pad = tok.eos_token_id, tok.pad_token_id
    with torch.no_grad():
        comps = sample(model, prompts, seeds, params, eos, pad)
    counts = {s: {"positions": 0, "completions": 0, "arithmetic": []} for s in SETTINGS}
    positions = 0
    with torch.no_grad():
        for start in range(0, len(comps), args.group):
            logits = group_logits(model, prompts[start], comps[start:start + args.group], pad)
            for g in range(min(args.group, len(comps) - start)):
                i, ids = start + g, comps[start + g]
                positions += len(ids)
                top_i = logits[g, :len(ids)].float().topk(params.top_k, dim=-1).indices
                for tie, thr in SETTINGS:
                    free = free_alternatives(logits[g], ids, seeds[i], params, tie, thr)
                    c = counts[(tie, thr)]
                    c["positions"] += int((free > 0).sum())
                    c["completions"] += bool((free > 0).any())
                    for t in (free > 0).nonzero().flatten().tolist():  # which edits: a digit or operator in or out
                        was = tok.decode([ids[t]]).strip()
                        for j in top_i[t].tolist():  # (the top-k tokens that pass there in place of ids[t])
                            if j == ids[t] or float(token_divergence(logits[g], ids[:t] + [j], seeds[i], params, tie,
                                                                     positions=[t])[0]) > thr:
                                continue
                            now = tok.decode([j]).strip()
                            if (set(was) | set(now)) & ARITHMETIC and len(c["arithmetic"]) < 20:
                                c["arithmetic"].append({"completion": i, "position": t, "claimed": was, "could_be": now})
    n = len(comps)
    rows = []
    for (tie, thr), c in counts.items():
        rows.append({"tie": tie, "threshold": thr, "positions_with_choice": c["positions"], "positions": positions,
                     "positions_wilson95": [round(x, 6) for x in wilson(c["positions"], positions)],
                     "completions_with_choice": c["completions"], "completions": n,
                     "completions_wilson95": [round(x, 6) for x in wilson(c["completions"], n)],
                     "arithmetic_examples": c["arithmetic"]})
        print(f"tie {tie:g} threshold {thr:g}: {c['positions']} of {positions} positions, {c['completions']} of {n} "
              f"completions offer another token", flush=True)
    report = {"model": args.model, "torch": torch.__version__, "prompts": args.prompts, "group": args.group,
              "max_new_tokens": args.max_new_tokens, "top_k": params.top_k, "temperature": params.temperature,
              "threads": args.threads, "command": "python benchmarks/tolerant_capacity.py " + " ".join(argv or sys.argv[1:]),
              "load_average_1min_at_start": load0, "load_average_1min_at_end": os.getloadavg()[0],
              "seconds": round(time.perf_counter() - started, 1), "settings": rows}
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    return report


if __name__ == "__main__":
    main()
