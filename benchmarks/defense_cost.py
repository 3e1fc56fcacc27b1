"""Each defense's cost as a ratio of the time to generate the same completions.

    python benchmarks/defense_cost.py --prompts 8 --per-prompt 4 --max-new-tokens 64 --threads 2

Generates P×n honest completions with SmolLM2-135M-Instruct (float32), mixes in P "hail to the
thief" poisoned ones, then times on exactly these completions:

* ``forward``: one scoring forward pass per group (what the update already pays);
* ``topk``: the top-k support check on those logits (its cost when fused with the update);
* ``replay_fast``: the seeded-decision check on those logits (fused);
* ``tolerant_replay``: the per-token divergence check on those logits (fused, :mod:`dgrpo.verify.tolerant`);
* ``replay_regenerate``: regenerating every completion from its seed;
* ``judge_logits`` / ``judge_generate``: the LLM judge (policy's base model) in both modes.

Standalone cost of a logit check = forward + check. Prints one JSON line (``--out`` writes it).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from bench_setup import arithmetic_bench


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--per-prompt", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    from dgrpo.attacks.injection import InjectionAttack, InjectionAttackConfig
    from dgrpo.config import load_config
    from dgrpo.defenses.judge import JudgeDefense, JudgeDefenseConfig
    from dgrpo.defenses.replay import ReplayDefense, ReplayDefenseConfig
    from dgrpo.defenses.tolerant_replay import TolerantReplayDefense, TolerantReplayDefenseConfig
    from dgrpo.defenses.topk import TopKDefense, TopKDefenseConfig
    from dgrpo.policy.chat import encode_completion
    from dgrpo.policy.sampling import completion_seed
    from dgrpo.policy.scoring import group_logits
    from dgrpo.types import Rollout

    cfg = load_config(overrides=[f"sampling.max_new_tokens={args.max_new_tokens}"])
    model, tokenizer, policy, task, _ = arithmetic_bench(args.max_new_tokens)
    problems = list(task.train[: args.prompts])
    requests = [p for p in problems for _ in range(args.per_prompt)]
    seeds = [completion_seed(0, 0, i % args.per_prompt, p.prompt_id, i) for i, p in enumerate(requests)]
    t = time.perf_counter()
    outs = policy.generate(task, requests, seeds)
    t_gen = time.perf_counter() - t
    attack = InjectionAttack(InjectionAttackConfig())
    groups = []
    for p in problems:
        members = [Rollout(p.prompt_id, policy.prompt_ids(task, p), ids, text, 0, seed=s, label="honest")
                   for (ids, text), s, q in zip(outs, seeds, requests) if q is p]
        poison = attack.poison(task, p, 0)
        members.append(Rollout(p.prompt_id, policy.prompt_ids(task, p), encode_completion(tokenizer, poison), poison, 3,
                               seed=completion_seed(0, 0, 3, p.prompt_id, 0), label="poisoned"))
        groups.append(members)

    def timed(fn):
        t0 = time.perf_counter()
        out = fn()
        return time.perf_counter() - t0, out

    with torch.no_grad():
        t_fwd, logits = timed(lambda: [group_logits(model, g[0].prompt_ids, [r.completion_ids for r in g], tokenizer.eos_token_id) for g in groups])
    results = {}
    checks = {"topk": TopKDefense(TopKDefenseConfig(), cfg, policy),
              "replay_fast": ReplayDefense(ReplayDefenseConfig(method="fast"), cfg, policy, task),
              "tolerant_replay": TolerantReplayDefense(TolerantReplayDefenseConfig(), cfg, policy, task)}
    for name, d in checks.items():
        secs, verdicts = timed(lambda: [d.inspect(g, lg) for g, lg in zip(groups, logits)])
        results[name] = (secs, verdicts)
    regen = ReplayDefense(ReplayDefenseConfig(method="regenerate"), cfg, policy, task)
    results["replay_regenerate"] = timed(lambda: [regen.inspect(g) for g in groups])
    for mode in ("logits", "generate"):
        judge = JudgeDefense(JudgeDefenseConfig(mode=mode, threshold=0.38), cfg, policy, task)
        results[f"judge_{mode}"] = timed(lambda: [judge.inspect(g) for g in groups])

    n_tokens = sum(len(ids) for ids, _ in outs)
    report = {"completions": len(outs) + len(groups), "honest_tokens": n_tokens, "generate_seconds": t_gen,
              "forward_seconds": t_fwd, "forward_over_generate": t_fwd / t_gen, "defenses": {}}
    for name, (secs, verdicts) in results.items():
        flat = [(r.label, v.accepted) for g, vs in zip(groups, verdicts) for r, v in zip(g, vs)]
        honest = [a for lab, a in flat if lab == "honest"]
        poisoned = [a for lab, a in flat if lab == "poisoned"]
        fused = name in checks
        report["defenses"][name] = {
            "seconds": secs, "over_generate": secs / t_gen,
            "standalone_over_generate": (secs + t_fwd) / t_gen if fused else secs / t_gen,
            "detection_rate": sum(not a for a in poisoned) / len(poisoned),
            "false_positive_rate": sum(not a for a in honest) / len(honest)}
    print(json.dumps(report))
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
