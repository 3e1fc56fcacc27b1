"""Honest nondeterminism, measured: sample on one kernel path, verify on another (issue 36 item 2).

    python benchmarks/nondeterminism.py --pairings linear --prompts 125 --sender-rows 64 \\
        --out results/nondeterminism/linear.json                      # CPU, one pairing
    python benchmarks/nondeterminism.py --device cuda --out results/nondeterminism/cuda.json   # a lent GPU, one run
    python benchmarks/nondeterminism.py --model /tmp/tiny --prompts 2 --group 2 --max-new-tokens 6   # smoke run

(``/tmp/tiny``: any local model folder, e.g. a tiny random one saved with ``save_pretrained``; without ``--model``
the smoke run takes SmolLM2-135M-Instruct: ``--prompts 1 --group 2 --max-new-tokens 6 --small-prompts 1``.)

The sender samples P × G honest completions (``--prompts`` × ``--group``) of SmolLM2-135M-Instruct (or
``--model``) with the run's top-k and temperature, the embedded arithmetic task and seeds from
:func:`~dgrpo.policy.sampling.completion_seed`, once per sender path. A *path* is a device, thread
count, float32 linear backend, batch size (``max_rows``) and dtype. Each pairing verifies the completions
on another path (``--device cpu``, the sender path 1 thread, oneDNN, batches of ``--sender-rows``):

* ``threads``: 2 threads; ``batch``: batches of ``--verifier-rows`` (more left padding per row);
* ``linear``: PyTorch's default float32 linear (MKL) instead of oneDNN (:mod:`dgrpo.policy.onednn`);
* ``bf16_sender``: sampled in bfloat16, verified in float32 (every rejection is a *detection*);
* ``bf16_verifier``: verified in bfloat16 (the checks must refuse it: :class:`~dgrpo.errors.SettingError`).

``--device cuda`` (TF32 off): ``cuda_batch`` (batches of ``--sender-rows`` vs ``--verifier-rows`` on the
GPU), ``cuda_cpu`` and ``cpu_cuda`` (sampled on one, verified on the other; the CPU side oneDNN, 1 thread),
``bf16_sender``, ``bf16_verifier`` on the GPU. Pairings with a bf16 or a second-device side use only the
first ``--small-prompts`` prompts (a CPU regenerates slowly; a detection needs few).

On the verifier path, per completion: exact replay (regenerate from the seed, token for token: ``replay``
with ``method: regenerate``), fast replay (the seeded decisions on one scoring forward, atol 1e-3),
tolerant replay (:mod:`dgrpo.verify.tolerant`'s defaults) and top-k support (atol 1e-3) on the same
logits, and for calibration the completion's largest tolerant score, largest exact gap (tie 0) and
required tie (:func:`~dgrpo.verify.tolerant.required_tie`). Rates carry Wilson 95 % intervals. Prints
one markdown table (the same in the JSON's ``table``); ``--out`` writes the JSON after every pairing.
Runs in parts (``--start``) join with ``--combine PART.json ... --out ALL.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

CHECKS = ("exact_replay", "fast_replay", "tolerant_replay", "topk")
CPU_PAIRINGS = ("threads", "batch", "linear", "bf16_sender", "bf16_verifier")
CUDA_PAIRINGS = ("cuda_batch", "cuda_cpu", "cpu_cuda", "bf16_sender", "bf16_verifier")
SMALL = {"cuda_cpu", "cpu_cuda", "bf16_sender", "bf16_verifier"}


@dataclass(frozen=True)
class KernelPath:
    """Where a side runs: device, threads, float32 linear backend (cpu: onednn | mkl), batch rows, dtype."""

    device: str = "cpu"
    threads: int = 1
    linear: str = "onednn"
    rows: int = 8
    dtype: str = "float32"

    def describe(self) -> str:
        if self.device == "cuda":
            return f"cuda {self.dtype} ×{self.rows}"
        return f"cpu {self.dtype} {self.threads}t {self.linear} ×{self.rows}"


def pairings(args) -> dict[str, tuple[KernelPath, KernelPath]]:
    """name → (sender path, verifier path) for ``args.device`` (module docstring)."""
    cpu = KernelPath(threads=args.threads, rows=args.sender_rows)
    if args.device == "cpu":
        return {"threads": (cpu, replace(cpu, threads=2)), "batch": (cpu, replace(cpu, rows=args.verifier_rows)),
                "linear": (cpu, replace(cpu, linear="mkl")), "bf16_sender": (replace(cpu, dtype="bfloat16"), cpu),
                "bf16_verifier": (cpu, replace(cpu, dtype="bfloat16"))}
    gpu = KernelPath("cuda", args.threads, "cuda", args.sender_rows)
    return {"cuda_batch": (gpu, replace(gpu, rows=args.verifier_rows)), "cuda_cpu": (gpu, cpu), "cpu_cuda": (cpu, gpu),
            "bf16_sender": (replace(gpu, dtype="bfloat16"), gpu), "bf16_verifier": (gpu, replace(gpu, dtype="bfloat16"))}


def parse(argv: list[str] | None):
    """The arguments, or SystemExit with one line naming the bad one and its fix."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct", help="a model name or folder (load_policy)")
    for name, default in (("prompts", 64), ("group", 8), ("max-new-tokens", 32), ("sender-rows", 8),
                          ("verifier-rows", 64), ("threads", 1), ("small-prompts", 16)):
        parser.add_argument(f"--{name}", type=int, default=default)
    parser.add_argument("--start", type=int, default=0, help="index of the first training prompt (runs in parts)")
    parser.add_argument("--pairings", help="comma-separated; default: every pairing of --device (module docstring)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--out")
    parser.add_argument("--combine", nargs="+", metavar="PART.json",
                        help="join runs made in parts (--start): --combine a.json b.json ... --out all.json, first on the line")
    args = parser.parse_args(argv)
    if args.combine:
        sys.exit("nondeterminism: --combine goes first on the line: --combine a.json b.json ... --out all.json")
    for name in ("prompts", "group", "max_new_tokens", "sender_rows", "verifier_rows", "threads", "small_prompts"):
        if getattr(args, name) < 1:
            sys.exit(f"nondeterminism: --{name.replace('_', '-')}={getattr(args, name)}; use a whole number ≥ 1")
    if args.start < 0:
        sys.exit(f"nondeterminism: --start={args.start}; use a prompt index ≥ 0")
    known = CPU_PAIRINGS if args.device == "cpu" else CUDA_PAIRINGS
    args.pairings = list(known) if not args.pairings else [p.strip() for p in args.pairings.split(",") if p.strip()]
    unknown = [p for p in args.pairings if p not in known]
    if unknown or not args.pairings:
        sys.exit(f"nondeterminism: --pairings {','.join(unknown) or '(empty)'} is no pairing of --device "
                 f"{args.device}; use some of {', '.join(known)}")
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("nondeterminism: --device cuda but torch sees no GPU; run it on a GPU machine or use --device cpu")
    return args


@contextlib.contextmanager
def on_path(path: KernelPath):
    """Run this process's sampler and scorer on ``path``'s threads and linear backend (TF32 off on cuda)."""
    import dgrpo.policy.sampling as sampling
    import dgrpo.policy.scoring as scoring
    from dgrpo.policy.device import exact_float32
    from dgrpo.policy.onednn import onednn_linears

    before, saved = torch.get_num_threads(), (sampling.onednn_linears, scoring.onednn_linears)
    torch.set_num_threads(path.threads)
    exact_float32(torch.device(path.device))
    if path.linear == "mkl":  # the sampler and the scorer take their linears from these names
        sampling.onednn_linears = scoring.onednn_linears = lambda model, enabled=True: onednn_linears(model, False)
    try:
        yield
    finally:
        sampling.onednn_linears, scoring.onednn_linears = saved
        torch.set_num_threads(before)


def sample_on(path: KernelPath, model, prompts, seeds, params, eos: int, pad: int) -> list[list[int]]:
    """The completions ``path`` samples (one stream, ``path.rows`` rows at a time)."""
    from dgrpo.policy.sampling import sample

    with on_path(path):
        return sample(model, prompts, seeds, params, eos, pad, max_rows=path.rows)


def interval(k: int, n: int) -> dict:
    from dgrpo.metrics.intervals import wilson

    return {"rejected": k, "of": n, "rate": k / n, "wilson95": [round(x, 6) for x in wilson(k, n)]}


def verify_on(path: KernelPath, model, prompts, seeds, claimed, group: int, params, eos: int, pad: int) -> dict:
    """Every check of every completion on ``path`` (module docstring); a bf16 ``path`` records the refusal."""
    from dgrpo.errors import SettingError
    from dgrpo.policy.scoring import group_logits
    from dgrpo.verify.checks import completion_logits
    from dgrpo.verify.replay import replay_gaps, replay_mismatch
    from dgrpo.verify.tolerant import required_tie, token_divergence, tolerant_mismatch
    from dgrpo.verify.topk import first_outside_topk

    n = len(claimed)
    if path.dtype != "float32":
        try:
            with on_path(path):
                completion_logits(model, prompts[:1], claimed[:1], pad)
        except SettingError as err:
            return {"completions": n, "refused": str(err)}
        return {"completions": n, "refused": False}
    rejected: dict[str, list[int]] = {c: [] for c in CHECKS}
    score, gap, tie = [], [], []
    t0 = time.perf_counter()
    with on_path(path), torch.no_grad():
        again = sample_on(path, model, prompts, seeds, params, eos, pad)
        regen = time.perf_counter() - t0
        for start in range(0, n, group):
            members = range(start, min(n, start + group))
            comps = [claimed[i] for i in members]
            logits = group_logits(model, prompts[start], comps, pad).cpu()
            outside = first_outside_topk(logits, comps, eos, params.top_k, 1e-3)
            for g, i in enumerate(members):
                verdicts = {"exact_replay": again[i] != claimed[i],
                            "fast_replay": replay_mismatch(logits[g], claimed[i], seeds[i], params, eos) is not None,
                            "tolerant_replay": tolerant_mismatch(logits[g], claimed[i], seeds[i], params, eos) is not None,
                            "topk": outside[g] is not None}
                for c, bad in verdicts.items():
                    if bad:
                        rejected[c].append(i)
                score.append(float(token_divergence(logits[g], claimed[i], seeds[i], params).max()))
                finite = replay_gaps(logits[g], claimed[i], seeds[i], params)[0]
                finite = finite[torch.isfinite(finite)]
                gap.append(float(finite.max()) if len(finite) else math.inf)
                tie.append(float(required_tie(logits[g], claimed[i], seeds[i], params).max()))
    return {"completions": n, "rejected": rejected,
            "false_positives": {c: interval(len(v), n) for c, v in rejected.items()},
            "tolerant_max_score": {"nonzero": sum(s > 0 for s in score), "largest": max(score),
                                   "p99": sorted(score)[int(0.99 * (n - 1))], "largest_five": sorted(score)[-5:]},
            "exact_gap_largest": max(gap), "required_tie": {"nonzero": sum(t > 0 for t in tie), "largest": max(tie)},
            "seconds": {"regenerate": round(regen, 1), "score_and_checks": round(time.perf_counter() - t0 - regen, 1)}}


def table(report: dict) -> str:
    """One markdown row per pairing: each check's rejections of honest work (Wilson 95 %) and the calibration."""
    def cell(r: dict) -> str:
        lo, hi = r["wilson95"]
        return f"{r['rejected']}/{r['of']} [{100 * lo:.2g}, {100 * hi:.2g} %]"

    lines = ["| pairing | sender → verifier | exact replay | fast replay | tolerant replay | top-k | largest tolerant "
             "score | largest exact gap | largest required tie |", "|" + "---|" * 9]
    for name, p in report["pairings"].items():
        label = f"{name} (rejections are detections)" if name == "bf16_sender" else name
        route = f"{p['sender']} → {p['verifier']}"
        if "refused" in p:
            what = "refused" if p["refused"] else "NOT refused"
            lines.append(f"| {label} | {route} | " + " | ".join([what] * 4) + " | – | – | – |")
            continue
        fp = p["false_positives"]
        lines.append(f"| {label} | {route} | " + " | ".join(cell(fp[c]) for c in CHECKS)
                     + f" | {p['tolerant_max_score']['largest']:.3g} | {p['exact_gap_largest']:.3g}"
                     f" | {p['required_tie']['largest']:.3g} |")
    return "\n".join(lines)


def combine(paths: list[str]) -> dict:
    """One report from the reports of runs in parts (``--start``): per pairing, completions and rejections
    added (indices offset by the completions before), intervals recomputed, the largest scores kept.

    Raises SystemExit: the parts differ in model, device or sampling, or overlap in prompts."""
    parts = [json.loads(Path(p).read_text()) for p in paths]
    same = ("model", "device", "max_new_tokens", "top_k", "temperature", "tolerant", "group")
    for p, part in zip(paths[1:], parts[1:]):
        if any(part.get(k) != parts[0].get(k) for k in same):
            sys.exit(f"nondeterminism: --combine {p} differs from {paths[0]} in {[k for k in same if part.get(k) != parts[0].get(k)]}")
    spans = sorted(tuple(part["prompts"]) for part in parts)
    if any(a[1] > b[0] for a, b in zip(spans, spans[1:])):
        sys.exit(f"nondeterminism: --combine parts overlap in prompts {spans}; combine parts of distinct --start ranges")
    out = {**{k: parts[0][k] for k in (*same, "torch")}, "parts": [{"command": p["command"], "prompts": p["prompts"],
           "total_seconds": p.get("total_seconds"), "load_average_1min_at_end": p.get("load_average_1min_at_end")}
           for p in parts], "pairings": {}}
    for name in dict.fromkeys(k for part in parts for k in part["pairings"]):
        runs = [part["pairings"][name] for part in parts if name in part["pairings"]]
        if any("refused" in r for r in runs):
            out["pairings"][name] = {**runs[0], "completions": sum(r["completions"] for r in runs)}
            continue
        n, rejected, offset = sum(r["completions"] for r in runs), {c: [] for c in CHECKS}, 0
        for r in runs:
            for c in CHECKS:
                rejected[c] += [offset + i for i in r["rejected"][c]]
            offset += r["completions"]
        scores = sorted(x for r in runs for x in r["tolerant_max_score"]["largest_five"])
        out["pairings"][name] = {
            "sender": runs[0]["sender"], "verifier": runs[0]["verifier"], "paths": runs[0]["paths"], "completions": n,
            "rejected": rejected, "false_positives": {c: interval(len(v), n) for c, v in rejected.items()},
            "tolerant_max_score": {"nonzero": sum(r["tolerant_max_score"]["nonzero"] for r in runs),
                                   "largest": max(r["tolerant_max_score"]["largest"] for r in runs), "largest_five": scores[-5:]},
            "exact_gap_largest": max(r["exact_gap_largest"] for r in runs),
            "required_tie": {"nonzero": sum(r["required_tie"]["nonzero"] for r in runs),
                             "largest": max(r["required_tie"]["largest"] for r in runs)},
            "seconds": {k: round(sum(r["seconds"][k] for r in runs), 1) for k in runs[0]["seconds"]}}
    out["table"] = table(out)
    return out


def main(argv: list[str] | None = None) -> dict:
    if argv is None:
        argv = sys.argv[1:]
    if argv and argv[0] == "--combine":  # --combine PART.json ... [--out FILE]
        files = argv[1:argv.index("--out")] if "--out" in argv else argv[1:]
        if "--out" in argv and argv.index("--out") != len(argv) - 2:
            sys.exit("nondeterminism: --combine ... --out takes one file name, last; e.g. --combine a.json b.json --out all.json")
        if not files:
            sys.exit("nondeterminism: --combine needs the JSON files of the parts (--combine a.json b.json --out all.json)")
        report = combine(files)
        print(report["table"])
        if "--out" in argv:
            Path(argv[argv.index("--out") + 1]).write_text(json.dumps(report, indent=1) + "\n")
        return report
    args = parse(argv)
    started, load0 = time.perf_counter(), os.getloadavg()[0]
    from dgrpo.config import load_config
    from dgrpo.policy.loading import load_policy
    from dgrpo.policy.policy import Policy
    from dgrpo.policy.sampling import SamplingParams, completion_seed
    from dgrpo.tasks.arithmetic import ArithmeticTask
    from dgrpo.verify.tolerant import THRESHOLD, TIE

    cfg = load_config(overrides=[f"sampling.max_new_tokens={args.max_new_tokens}"])
    params = SamplingParams(cfg.sampling.top_k, cfg.sampling.temperature, args.max_new_tokens)
    chosen = {name: pair for name, pair in pairings(args).items() if name in args.pairings}
    models: dict[tuple[str, str], torch.nn.Module] = {}
    tokenizer = None

    def model_of(path: KernelPath):
        nonlocal tokenizer
        key = (path.device, path.dtype)
        if key not in models:
            models[key], tokenizer = load_policy(args.model, path.dtype, trainable=False, device=path.device)
            if next(models[key].parameters()).dtype != getattr(torch, path.dtype):  # detected, not assumed
                sys.exit(f"nondeterminism: {args.model} loaded as {next(models[key].parameters()).dtype}, not {path.dtype}")
        return models[key]

    model_of(next(iter(chosen.values()))[0])
    policy = Policy(args.model, next(iter(models.values())), tokenizer, params)
    task = ArithmeticTask(seed=0)
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    size = {name: args.group * min(args.prompts, args.small_prompts if name in SMALL else args.prompts) for name in chosen}
    if args.start + args.prompts > len(task.train):
        sys.exit(f"nondeterminism: --start + --prompts = {args.start + args.prompts} but the task has {len(task.train)} "
                 "training prompts; lower them")
    reqs = [p for p in (task.train[args.start + i] for i in range(args.prompts)) for _ in range(args.group)]
    prompts = [policy.prompt_ids(task, p) for p in reqs]
    seeds = [completion_seed(36, 0, 0, p.prompt_id, i) for i, p in enumerate(reqs)]
    report = {"model": args.model, "device": args.device, "torch": torch.__version__, "max_new_tokens": args.max_new_tokens,
              "prompts": [args.start, args.start + args.prompts], "group": args.group, "top_k": params.top_k, "temperature": params.temperature, "tolerant": {"tie": TIE, "threshold": THRESHOLD},
              "command": "python benchmarks/nondeterminism.py " + " ".join(argv),
              "load_average_1min_at_start": load0, "senders": {}, "pairings": {}}
    samples: dict[KernelPath, list[list[int]]] = {}
    for name, (sender, verifier) in chosen.items():
        n = size[name]
        if sender not in samples:
            need = max(size[k] for k, (s, _) in chosen.items() if s == sender)
            t0 = time.perf_counter()
            samples[sender] = sample_on(sender, model_of(sender), prompts[:need], seeds[:need], params, eos, pad)
            report["senders"][sender.describe()] = {"completions": need, "seconds": round(time.perf_counter() - t0, 1),
                                                    "tokens": sum(map(len, samples[sender]))}
        result = verify_on(verifier, model_of(verifier), prompts[:n], seeds[:n], samples[sender][:n], args.group,
                           params, eos, pad)
        report["pairings"][name] = {"sender": sender.describe(), "verifier": verifier.describe(),
                                    "paths": {"sender": asdict(sender), "verifier": asdict(verifier)}, **result}
        report["table"] = table(report)
        print(f"{name}: {json.dumps(result.get('false_positives', result.get('refused')))}", file=sys.stderr, flush=True)
        if args.out:  # after each pairing: a run cut short keeps what it measured
            report["total_seconds"], report["load_average_1min_at_end"] = round(time.perf_counter() - started, 1), os.getloadavg()[0]
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    report["total_seconds"], report["load_average_1min_at_end"] = round(time.perf_counter() - started, 1), os.getloadavg()[0]
    print(report["table"])
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    return report


if __name__ == "__main__":
    main()
