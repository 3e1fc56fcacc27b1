"""How many leading tokens each validation prompt's sampled completion (the drift reference of run_after/) shares with
its greedy one, untrained SmolLM2 (README defaults, threads=1).

    PYTHONPATH=src nice -n 10 python benchmarks/results/issue38_eval_profile/sampled_greedy_agree.py

Output (2026-12-05, after tree): sampled_greedy_agree.json.
"""
import json, tempfile, statistics
from dgrpo.config import load_config
from dgrpo.training.build import build_run
from dgrpo.training.evaluate import EVAL_ROUND
from dgrpo.policy.sampling import completion_seed
ref = json.load(open(__import__("os").path.join(__import__("os").path.dirname(__file__), "run_after/eval_reference/node0.json")))
with tempfile.TemporaryDirectory() as tmp:
    cfg = load_config(None, [f"out_dir={tmp}", "name=a", "threads=1"])
    run = build_run(cfg)
    policy = run.swarm.honest_policies[0]
    problems = list(run.task.val[:128])
    seeds = [completion_seed(cfg.seed, EVAL_ROUND, 0, p.prompt_id, 0) for p in problems]
    greedy = policy.generate(run.task, problems, seeds, temperatures=[0.0] * 128)
by_id = {r["prompt_id"]: r["completion_ids"] for r in ref}
agree = []
for p, (g, _) in zip(problems, greedy):
    s = by_id[p.prompt_id]
    k = 0
    while k < min(len(s), len(g)) and s[k] == g[k]:
        k += 1
    agree.append(k)
print(json.dumps({"mean_agree": statistics.fmean(agree), "median": statistics.median(agree),
                  "sum_agree": sum(agree), "greedy_tokens": sum(len(g) for g, _ in greedy),
                  "sampled_tokens": sum(len(v) for v in by_id.values()),
                  "whole_equal": sum(1 for p, (g, _) in zip(problems, greedy) if by_id[p.prompt_id] == g)}))
