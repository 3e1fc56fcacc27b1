"""CPU seconds of one README-round update (Learner.step) and torch.profiler's top operators, at --threads.

    PYTHONPATH=src nice -n 10 python results/readme_time_h38f/update_profile.py --threads 1 --repeats 3

The round's 32 rollouts (4 prompts x 8, seeds of round 0) sampled once; rewards alternate 0/1 so every group
learns (the worst case of a README round); lr 0 so each repeat does the same work. Prints JSON.
"""
import argparse, json, sys, time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from bench_setup import arithmetic_bench, group_requests  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--threads", type=int, default=1)
ap.add_argument("--repeats", type=int, default=3)
ap.add_argument("--profile", action="store_true")
ap.add_argument("--lr", type=float, default=0.0)
ap.add_argument("--mallopt", action="store_true", help="keep freed memory in the heap (glibc mallopt)")
args = ap.parse_args()
torch.set_num_threads(args.threads)
if args.mallopt:
    import ctypes
    libc = ctypes.CDLL("libc.so.6")
    assert libc.mallopt(-3, 1 << 30) == 1 and libc.mallopt(-1, 1 << 31) == 1  # M_MMAP_THRESHOLD, M_TRIM_THRESHOLD
from dgrpo.grpo.learner import GRPOParams, Learner  # noqa: E402
from dgrpo.policy.sampling import sample  # noqa: E402
from dgrpo.types import Rollout  # noqa: E402

model, tok, policy, task, params = arithmetic_bench(64)
reqs, seeds = group_requests(task.train[:4], 8)
prompts = [policy.prompt_ids(task, p) for p in reqs]
outs = sample(model, prompts, seeds, params, tok.eos_token_id, tok.pad_token_id)
texts = [tok.decode(o) for o in outs]


def rollouts():
    return [Rollout(p.prompt_id, ids, out, text, 0, seed=s, reward=float(i % 2))
            for i, (p, ids, out, text, s) in enumerate(zip(reqs, prompts, outs, texts, seeds))]


learner = Learner(model, GRPOParams(lr=args.lr), tok.eos_token_id, tok.pad_token_id)
learner.step(rollouts())  # warm-up
rep = {"threads": args.threads, "loadavg": open("/proc/loadavg").read().split()[:3],
       "completion_tokens": sum(map(len, outs)), "cpu_s": [], "wall_s": [], "loss": [], "grad_norm": []}
for _ in range(args.repeats):
    c0, w0 = time.process_time(), time.perf_counter()
    st = learner.step(rollouts())
    rep["cpu_s"].append(round(time.process_time() - c0, 3))
    ru = __import__("resource").getrusage(0)
    rep.setdefault("rusage_user_sys_minflt", []).append((ru.ru_utime, ru.ru_stime, ru.ru_minflt))
    rep["wall_s"].append(round(time.perf_counter() - w0, 3))
    rep["loss"].append(st.loss)
    rep["grad_norm"].append(st.grad_norm)
if args.profile:
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        learner.step(rollouts())
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30), file=sys.stderr)
rep["loadavg_end"] = open("/proc/loadavg").read().split()[:3]
print(json.dumps(rep))
if args.profile:
    ka = prof.key_averages(group_by_input_shape=True)
    rows = sorted([e for e in ka if e.key in ("aten::fill_", "aten::copy_", "aten::add_", "aten::mul", "aten::zero_", "aten::index", "aten::add", "aten::div")],
                  key=lambda e: -e.self_cpu_time_total)[:40]
    for e in rows:
        print(f"{e.key:14s} {e.self_cpu_time_total/1e3:9.1f} ms {e.count:6d} {str(e.input_shapes)[:150]}", file=sys.stderr)
