"""The update with and without the shared prompt prefix (issue 38) on SmolLM2: how far apart, in float32.

    python benchmarks/shared_prefix_exactness.py --out benchmarks/results/issue38_shared_prefix_exactness.json

One round's rollouts of the README job's shape (P prompts of the embedded arithmetic task × G
completions, top-k 10, ≤ 64 new tokens; rewards alternate 0/1 inside each group so every group
learns), then one ``Learner.step`` each way from the same weights (the prefix off: every group runs
its whole prompt; on: the prefix the prompts share runs once, forward and backward). Reports the
largest difference of the per-token log-probs the update computes, of the loss, and of every
parameter's gradient (the largest absolute difference, relative to that parameter's largest
gradient entry), and the two gradients' cosine. ``--float64`` also runs both ways with float64
weights, to show which float32 result is nearer; those are not fully float64: ``group_logits``
returns float32 logits, so a float64 run's logits are rounded to float32 (its two ways differ by
occasional one-ulp flips of that rounding). Prints one JSON object; ``--out`` writes it.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import torch
from bench_setup import arithmetic_bench, bench_parser, group_requests


def one_update(model, rollouts, eos: int, pad: int, shared: bool) -> dict:
    """(per-group log-probs, loss, grad norm, gradients) of one step at lr 0."""
    from dgrpo.grpo import learner as learner_mod
    from dgrpo.policy.scoring import pad_right, token_logprobs

    saved = learner_mod.common_prefix
    if not shared:
        learner_mod.common_prefix = lambda prompts: 0
    try:
        learner = learner_mod.Learner(model, learner_mod.GRPOParams(lr=0.0, max_grad_norm=1e9), eos, pad)
        batch = learner.score(rollouts)
        logp = {}
        for group in batch.groups:
            ids = pad_right([r.completion_ids for r in group.rollouts], pad)
            mask = torch.arange(ids.shape[1])[None] < torch.tensor([len(r.completion_ids) for r in group.rollouts])[:, None]
            logp[group.rollouts[0].prompt_id] = token_logprobs(group.logits.detach(), ids)[mask]
        grads, original = {}, learner.optimizer.step
        learner.optimizer.step = lambda: (grads.update({n: p.grad.clone() for n, p in model.named_parameters()}),
                                          original())
        stats = learner.step(batch)
    finally:
        learner_mod.common_prefix = saved
    return {"logp": logp, "loss": stats.loss, "grad_norm": stats.grad_norm, "grads": grads,
            "shared_prefix": len(batch.prefix.ids)}


def compare(a: dict, b: dict) -> dict:
    """How far ``b`` (prefix on) is from ``a`` (off)."""
    dlogp = max(float((a["logp"][k] - b["logp"][k]).abs().max()) for k in a["logp"])
    rel = {n: float((a["grads"][n] - b["grads"][n]).abs().max() / a["grads"][n].abs().max().clamp(min=1e-30))
           for n in a["grads"]}
    flat_a = torch.cat([g.flatten().double() for g in a["grads"].values()])
    flat_b = torch.cat([g.flatten().double() for g in b["grads"].values()])
    worst = max(rel, key=rel.get)
    return {"max_abs_logp_diff": dlogp, "loss": [a["loss"], b["loss"]],
            "loss_rel_diff": abs(a["loss"] - b["loss"]) / max(abs(a["loss"]), 1e-30),
            "grad_norm": [a["grad_norm"], b["grad_norm"]],
            "grad_norm_rel_diff": abs(a["grad_norm"] - b["grad_norm"]) / a["grad_norm"],
            "max_grad_rel_diff": rel[worst], "worst_parameter": worst,
            "median_grad_rel_diff": sorted(rel.values())[len(rel) // 2],
            "grad_cosine": float(flat_a @ flat_b / (flat_a.norm() * flat_b.norm()))}


def main() -> None:
    parser = bench_parser(__doc__, prompts=4, group=8, max_new_tokens=64, threads=2)
    parser.add_argument("--float64", action="store_true", help="also both ways in float64")
    parser.add_argument("--out")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    from dgrpo.types import Rollout

    model, tokenizer, policy, task, _ = arithmetic_bench(args.max_new_tokens)
    problems, seeds = group_requests([task.train[i] for i in range(args.prompts)], args.group)
    outs = policy.generate(task, problems, seeds)
    rollouts = [Rollout(p.prompt_id, policy.prompt_ids(task, p), ids, text, 0, seed=s, reward=float(i % 2))
                for i, (p, (ids, text), s) in enumerate(zip(problems, outs, seeds))]
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    report: dict = {"completions": len(rollouts), "completion_tokens": sum(len(r.completion_ids) for r in rollouts),
                    "prompt_tokens": sorted({len(r.prompt_ids) for r in rollouts})}
    runs = {}
    for dtype in [torch.float32] + ([torch.float64] if args.float64 else []):
        for shared in (False, True):
            runs[(dtype, shared)] = one_update(copy.deepcopy(model).to(dtype), rollouts, eos, pad, shared)
    report["shared_prefix"] = runs[(torch.float32, True)]["shared_prefix"]
    report["float32_on_vs_off"] = compare(runs[(torch.float32, False)], runs[(torch.float32, True)])
    if args.float64:
        exact = runs[(torch.float64, False)]
        report["float64_on_vs_off"] = compare(exact, runs[(torch.float64, True)])
        report["float32_off_vs_float64"] = compare(exact, runs[(torch.float32, False)])
        report["float32_on_vs_float64"] = compare(exact, runs[(torch.float32, True)])
    print(json.dumps(report))
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
