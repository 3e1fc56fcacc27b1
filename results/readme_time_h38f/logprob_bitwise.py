"""The update's loss and every parameter's gradient with the packed log-probs (Learner._backward via
scoring.group_token_logprobs) against the (G, T, V) logits path (Group.logits_for_loss forced to run the forward):
bit for bit, on a README round's 32 rollouts (rewards alternating 0/1: every group learns). CPU s of each.

    PYTHONPATH=src nice -n 10 python results/readme_time_h38f/logprob_bitwise.py --threads 1
"""
import argparse, json, sys, time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from bench_setup import arithmetic_bench, group_requests  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--threads", type=int, default=1)
ap.add_argument("--repeats", type=int, default=2)
args = ap.parse_args()
torch.set_num_threads(args.threads)
from dgrpo.grpo import learner as L  # noqa: E402
from dgrpo.policy.sampling import sample  # noqa: E402
from dgrpo.types import Rollout  # noqa: E402

model, tok, policy, task, params = arithmetic_bench(64)
reqs, seeds = group_requests(task.train[:4], 8)
prompts = [policy.prompt_ids(task, p) for p in reqs]
outs = sample(model, prompts, seeds, params, tok.eos_token_id, tok.pad_token_id)
rollouts = lambda: [Rollout(p.prompt_id, ids, out, "", 0, seed=s, reward=float(i % 2))  # noqa: E731
                    for i, (p, ids, out, s) in enumerate(zip(reqs, prompts, outs, seeds))]
learner = L.Learner(model, L.GRPOParams(lr=0.0), tok.eos_token_id, tok.pad_token_id)
real = L.Group.logits_for_loss


def run(old: bool):
    L.Group.logits_for_loss = (lambda self, reuse_only=False: real(self)) if old else real
    learner.optimizer.zero_grad(set_to_none=True)
    batch = learner.score(rollouts())
    learner.model.train()
    c0 = time.process_time()
    num = den = 0.0
    for g in batch.groups:
        idx, rewards = L.kept(g.rollouts, "drop")
        adv = L.group_advantages(rewards, [0] * len(idx), "group", None)
        n, d = learner._backward(g, idx, adv)
        num, den = num + n, den + d
    batch.prefix.backward()
    cpu = time.process_time() - c0
    grads = {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}
    L.Group.logits_for_loss = real
    return num, grads, cpu


rep = {"threads": args.threads, "loadavg": open("/proc/loadavg").read().split()[:3], "cpu_old": [], "cpu_new": []}
for _ in range(args.repeats):
    n_old, g_old, c_old = run(old=True)
    n_new, g_new, c_new = run(old=False)
    rep["cpu_old"].append(round(c_old, 3)), rep["cpu_new"].append(round(c_new, 3))
    rep["loss_numerator_equal"] = n_old == n_new
    rep["grads"] = len(g_old)
    rep["grads_bitwise_equal"] = sum(torch.equal(g_old[k], g_new[k]) for k in g_old)
    rep["max_abs_grad_diff"] = max(float((g_old[k] - g_new[k]).abs().max()) for k in g_old)
rep["loadavg_end"] = open("/proc/loadavg").read().split()[:3]
print(json.dumps(rep))
