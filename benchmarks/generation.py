"""Generation and update throughput against this machine's own float32 compute limit.

    python benchmarks/generation.py --prompts 4 --group 8 --max-new-tokens 64 --threads 2 --repeats 5 \\
        --out benchmarks/results/generation.json

SmolLM2-135M-Instruct (float32) on P prompts of the embedded arithmetic task (chat template, two
worked examples, ``<think>`` prefill: about 227 tokens) × G completions, top-k 10, temperature 1.

1. **Peak**: float32 GEMM GFLOP/s measured here with PyTorch's default kernel (MKL) and with
   oneDNN, on a square 2048 GEMM and on the model's own shapes at 32 and 512 rows; the best of each
   kernel over the repeats. FLOPs per generated token = 2 × (weights of every linear layer, LM head
   included) + attention (4 × layers × heads × head_dim × mean context). The **compute limit** is
   peak / FLOPs per token, in tokens/s, for each kernel.
2. **Generation**: the sampler with its speed-ups switched on one by one — ``before`` (transformers'
   DynamicCache, MKL linears, SDPA: the sampler before issue 20, except that its prefill now keeps
   only the last position's logits), ``+cache`` (preallocated KV cache, rows leave by moving),
   ``+onednn`` (linears on oneDNN), ``+attention`` (single-query attention as two matmuls),
   ``after`` (+ the prompts' common prefix prefilled once) — run A/B/C/D/E, A/B/C/D/E, ...
   ``--repeats`` times; medians of tokens/s (generated tokens / wall
   seconds, prefill included). Every variant must produce the same tokens (checked).
3. **Batch size**: ``after`` at n = 8 … 256 completions (n/G prompts × G): tokens/s and the KV
   memory per batch (the curve that sizes ``sample(max_rows=...)``).
4. **Update**: ``Learner.step`` (forward + backward + AdamW at lr 0, so every repeat does the same
   work) on the generated rollouts, ``before`` (padded group, MKL), ``+onednn`` (padded, oneDNN),
   ``+packing`` (packed group, oneDNN), ``+shared`` (+ the prompt prefix the groups share run
   once per step, forward and backward: issue 38) and ``after`` (+ the groups packed into one
   forward and one backward, attention by group: ``dgrpo.policy.packing``), ``after_mkl`` (``after`` with
   the update's linears on MKL: ``grpo.update_kernel=mkl``; every other variant forces ``onednn``, its
   ``+onednn`` flag deciding whether oneDNN is there at all), interleaved; tokens/s
   (each group's prompt once + completion tokens / seconds) and the fraction of each matmul peak
   (6 × linear weights × the tokens the variant runs / seconds); then the seconds of ``+shared``
   ``after`` and ``after_mkl`` by phase (``PHASES``: the prefix's forward, the policy's forward and log-softmax,
   the reference's, the backward, the prefix's backward, clipping, AdamW, the rest).
   ``--only-update`` runs the peak, one sample call for the rollouts and this section.
5. **Continuous batching** (issue 38): ``--stream-requests`` completions (n/G prompts × G) decoded
   through R = ``--stream-rows`` rows, ``refill`` (finished rows take the next request at once:
   ``sample(max_rows=R)``) against ``batches`` (successive calls of R requests, each emptying as
   its completions finish), interleaved ``--stream-repeats`` times; tokens/s and its fraction of
   the compute limit measured in the same run, and whether both gave the same tokens.
   ``--only-stream`` runs the peak and this section only.
6. ``--profile``: torch.profiler's top operators of one ``sample`` call and one update, before and
   after (the update only with ``--only-update``).

The machine is shared: every timing also records the process's CPU seconds, and ``cpu_share`` =
CPU seconds / (wall seconds × threads) says how much of the 2 cores it got (1.0 = all). Prints one
JSON object; ``--out`` writes it.
"""

from __future__ import annotations

import contextlib
import json
import statistics
import time
from pathlib import Path

import torch
from bench_setup import arithmetic_bench, bench_parser, group_requests

VARIANTS = {  # which speed-ups are on, added one at a time
    "before": dict(cache=False, onednn=False, attention=False, prefix=False, packing=False, shared=False, groups=False),
    "+cache": dict(cache=True, onednn=False, attention=False, prefix=False, packing=False, shared=False, groups=False),
    "+onednn": dict(cache=True, onednn=True, attention=False, prefix=False, packing=False, shared=False, groups=False),
    "+attention": dict(cache=True, onednn=True, attention=True, prefix=False, packing=False, shared=False, groups=False),
    "+packing": dict(cache=True, onednn=True, attention=True, prefix=True, packing=True, shared=False, groups=False),
    "+shared": dict(cache=True, onednn=True, attention=True, prefix=True, packing=True, shared=True, groups=False),
    "after": dict(cache=True, onednn=True, attention=True, prefix=True, packing=True, shared=True, groups=True),
    "after_mkl": dict(cache=True, onednn=True, attention=True, prefix=True, packing=True, shared=True, groups=True),
}
KERNEL = {"after_mkl": "mkl"}  # the update's linears (Learner.kernel) per variant; the others: onednn
GENERATION = ("before", "+cache", "+onednn", "+attention", "after")  # +packing, +shared, groups: the update only
UPDATE = ("before", "+onednn", "+packing", "+shared", "after", "after_mkl")


@contextlib.contextmanager
def features(cache: bool, onednn: bool, attention: bool, prefix: bool, packing: bool, shared: bool, groups: bool):
    """Switch the sampler's and the scorer's speed-ups off by patching their module functions."""
    from dgrpo.grpo import learner
    from dgrpo.policy import onednn as onednn_mod, sampling, scoring, stream

    saved = (stream.supports, onednn_mod.available, sampling.single_query_attention, sampling._shared_prefix,
             scoring._packable, learner.common_prefix, learner.Learner.pack_rows)
    if not cache:
        stream.supports = lambda *a, **k: False
    if not onednn:
        onednn_mod.available = lambda *a, **k: False
    if not attention:
        sampling.single_query_attention = lambda *a, **k: contextlib.nullcontext()  # (model, shared)
    if not prefix:
        sampling._shared_prefix = lambda *a, **k: 0
    if not packing:
        scoring._packable = lambda *a, **k: False
    if not shared:
        learner.common_prefix = lambda *a, **k: 0
    learner.Learner.pack_rows = learner.PACKED_ROWS if groups else 0
    try:
        yield
    finally:
        (stream.supports, onednn_mod.available, sampling.single_query_attention, sampling._shared_prefix,
         scoring._packable, learner.common_prefix, learner.Learner.pack_rows) = saved


def timed(fn, threads: int):
    """(result, wall seconds, cpu share) of fn()."""
    c0, t0 = time.process_time(), time.perf_counter()
    out = fn()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return out, wall, cpu / (wall * threads)


def gemm_peak(repeats: int) -> dict:
    """Best float32 GFLOP/s of MKL (torch.mm) and oneDNN on square and model-shaped GEMMs."""
    shapes = [(2048, 2048, 2048), (512, 576, 1536), (512, 1536, 576), (512, 576, 49152), (32, 576, 1536),
              (32, 576, 49152)]
    rows = []
    for m, k, n in shapes:
        a, w = torch.randn(m, k), torch.randn(n, k)
        fns = {"mkl": lambda: torch.nn.functional.linear(a, w),
               "onednn": lambda: torch.ops.mkldnn._linear_pointwise(a, w, None, "none", [], "")}
        best = {}
        for name, fn in fns.items():
            fn()
            times = []
            for _ in range(max(3, repeats)):
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
            best[name] = 2 * m * k * n / min(times) / 1e9
        rows.append({"m": m, "k": k, "n": n, **{f"{name}_gflops": v for name, v in best.items()}})
    return {"shapes": rows, "mkl_gflops": max(r["mkl_gflops"] for r in rows),
            "onednn_gflops": max(r["onednn_gflops"] for r in rows)}


def linear_weights(model) -> int:
    return sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))


def top_ops(prof, n: int = 10) -> list[dict]:
    events = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in events)
    return [{"op": e.key, "self_cpu_s": e.self_cpu_time_total / 1e6, "share": e.self_cpu_time_total / total,
             "calls": e.count} for e in events[:n]]


def main() -> None:
    parser = bench_parser(__doc__, prompts=4, group=8, max_new_tokens=64, threads=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batches", type=int, nargs="*", default=[8, 16, 32, 64, 128, 256])
    parser.add_argument("--update-repeats", type=int, default=3)
    parser.add_argument("--stream-requests", type=int, default=256)
    parser.add_argument("--stream-rows", type=int, nargs="*", default=[32, 64, 128])
    parser.add_argument("--stream-repeats", type=int, default=2)
    parser.add_argument("--only-stream", action="store_true", help="measure the peak and section 5 only")
    parser.add_argument("--only-update", action="store_true",
                        help="measure the peak, one sample call (the rollouts) and section 4 (and its profile)")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--out")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    from dgrpo.grpo.learner import GRPOParams, Learner
    from dgrpo.policy.kv_cache import bytes_per_row
    from dgrpo.policy.sampling import sample
    from dgrpo.types import Rollout

    model, tokenizer, policy, task, params = arithmetic_bench(args.max_new_tokens)
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id

    def requests(prompts: int):
        reqs, seeds = group_requests([task.train[i % len(task.train)] for i in range(prompts)], args.group)
        return reqs, [policy.prompt_ids(task, p) for p in reqs], seeds

    report: dict = {"batch": {"prompts": args.prompts, "group": args.group, "max_new_tokens": args.max_new_tokens,
                              "threads": args.threads, "repeats": args.repeats},
                    "torch": torch.__version__, "shared_machine": True}
    peak = gemm_peak(args.repeats)
    reqs, prompts, seeds = requests(args.prompts)
    width = max(map(len, prompts))
    cfg = model.config
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    weights = linear_weights(model)
    attn_per_token = 4 * cfg.num_hidden_layers * cfg.num_attention_heads * head_dim * (width + args.max_new_tokens / 2)
    flops_per_token = 2 * weights + attn_per_token
    report["compute"] = {"peak": peak, "linear_weights": weights, "flops_per_token": flops_per_token,
                         "limit_tokens_per_s": {k: peak[f"{k}_gflops"] * 1e9 / flops_per_token for k in ("mkl", "onednn")}}

    sample(model, prompts[:2], seeds[:2], params, eos, pad)  # warm-up
    if not args.only_update:
        report["stream"] = stream_section(args, model, requests, sample, params, eos, pad, report["compute"])
    if args.only_stream:
        return finish(report, args.out)

    # --- generation, variants interleaved
    gen = {name: {"tokens_per_s": [], "seconds": [], "cpu_share": []} for name in GENERATION}
    outputs = {}
    for _ in range(args.repeats if not args.only_update else 0):
        for name in GENERATION:
            with features(**VARIANTS[name]):
                outs, wall, share = timed(lambda: sample(model, prompts, seeds, params, eos, pad), args.threads)
            n_tok = sum(map(len, outs))
            gen[name]["tokens_per_s"].append(n_tok / wall)
            gen[name]["seconds"].append(wall)
            gen[name]["cpu_share"].append(share)
            outputs[name] = outs
    if args.only_update:  # the rollouts of the update: one sample call
        outputs["after"] = sample(model, prompts, seeds, params, eos, pad)
        gen = {}
    tokens = sum(map(len, outputs["after"]))
    for name, g in gen.items():
        g["median_tokens_per_s"] = statistics.median(g["tokens_per_s"])
        g["fraction_of_limit"] = {k: g["median_tokens_per_s"] / v for k, v in report["compute"]["limit_tokens_per_s"].items()}
        g["same_tokens_as_before"] = outputs[name] == outputs["before"]
    report["generation"] = {"completions": len(prompts), "prompt_tokens": [len(p) for p in dict.fromkeys(map(tuple, prompts))],
                            "generated_tokens": tokens, "variants": gen}

    # --- batch-size curve (after)
    curve = []
    for n in args.batches if not args.only_update else []:
        _, ps, ss = requests(max(1, n // args.group))
        outs, wall, share = timed(lambda: sample(model, ps, ss, params, eos, pad), args.threads)
        curve.append({"completions": len(ps), "tokens": sum(map(len, outs)), "seconds": wall,
                      "tokens_per_s": sum(map(len, outs)) / wall, "cpu_share": share,
                      "kv_cache_gb": len(ps) * bytes_per_row(cfg, max(map(len, ps)) + args.max_new_tokens) / 2**30})
    report["batch_size_curve"] = curve

    # --- update (forward + backward + AdamW), before vs after
    texts = [tokenizer.decode(o) for o in outputs["after"]]

    def rollouts():  # rewards alternate 0/1 inside each group, so no group is skipped for lack of signal
        return [Rollout(p.prompt_id, ids, out, text, 0, seed=s, reward=float(i % 2))
                for i, (p, ids, out, text, s) in enumerate(zip(reqs, prompts, outputs["after"], texts, seeds))]

    learner = Learner(model, GRPOParams(lr=0.0), eos, pad)
    report["update"] = update_section(args, learner, rollouts, prompts, tokens, weights, peak)

    if args.profile:
        from torch.profiler import profile

        report["profile"] = {}
        for name in ("before", "after"):
            learner.kernel = "onednn"
            with features(**VARIANTS[name]):
                if not args.only_update:
                    with profile() as prof:
                        sample(model, prompts, seeds, params, eos, pad)
                    report["profile"][f"sample_{name}"] = top_ops(prof)
                with profile() as prof:
                    learner.step(rollouts())
                report["profile"][f"update_{name}"] = top_ops(prof)
    finish(report, args.out)


def update_section(args, learner, rollouts, prompts: list, tokens: int, weights: int, peak: dict) -> dict:
    """Section 4: the update's variants interleaved, and where the seconds of +shared and after go."""
    from dgrpo.policy import prefix as prefix_mod

    distinct = list(dict.fromkeys(map(tuple, prompts)))
    scored = sum(map(len, distinct)) + tokens  # prompt once per group + completions
    shared = prefix_mod.common_prefix(distinct)
    executed = scored - (len(distinct) - 1) * shared  # the shared prefix once for the whole batch
    upd = {name: {"seconds": [], "cpu_share": []} for name in UPDATE}
    for kernel in ("onednn", "mkl"):  # warm-up, each kernel
        learner.kernel = kernel
        learner.step(rollouts())
    for _ in range(args.update_repeats):
        for name in upd:
            learner.kernel = KERNEL.get(name, "onednn")
            with features(**VARIANTS[name]):
                _, wall, share = timed(lambda: learner.step(rollouts()), args.threads)
            upd[name]["seconds"].append(wall)
            upd[name]["cpu_share"].append(share)
    stats = learner.step(rollouts())
    assert stats.used == len(prompts), f"the update used {stats.used} of {len(prompts)} rollouts"
    for name, u in upd.items():
        s = statistics.median(u["seconds"])
        run = executed if VARIANTS[name]["shared"] else scored
        u.update(median_seconds=s, tokens_per_s=scored / s, executed_tokens=run,
                 fraction_of_peak={k: 6 * weights * run / s / 1e9 / peak[f"{k}_gflops"] for k in ("mkl", "onednn")})
    phases = {"keys": PHASES}
    for name in ("+shared", "after", "after_mkl"):
        learner.kernel = KERNEL.get(name, "onednn")
        with features(**VARIANTS[name]):
            phases[name] = [update_phases(learner, rollouts, args.threads) for _ in range(args.update_repeats)]
    from dgrpo.policy.onednn import cpu_vendor, update_kernel

    return {"scored_tokens": scored, "cpu_vendor": cpu_vendor(), "auto_update_kernel": update_kernel("auto"), "shared_prefix": shared, "executed_tokens_with_shared_prefix": executed,
            "variants": upd, "phases": phases,
            "note": "fraction_of_peak: 6 x linear weights x the tokens the variant runs (LM head counted on every "
                    "position) / seconds / the same-run GEMM peak"}


PHASES = {  # update_phases's keys: what each times
    "prefix_forward": "the shared prefix's forward (SharedPrefix: the policy's with grad, the reference's without)",
    "forward": "the policy's forward with grad and the log-softmax of the taken tokens: groups packed together "
               "(packing.groups_token_logprobs) or one group (scoring.group_token_logprobs)",
    "reference_forward": "the reference model's log-probs, no grad (beta > 0 only)",
    "backward": "backward of the loss numerators: log-softmax, the model, down to the shared prefix's keys and values",
    "prefix_backward": "the one backward through the shared prefix's forward",
    "clip": "gradient clipping",
    "adamw": "the optimizer step",
    "other": "the rest: advantages, masks, the loss terms, grouping",
}


def update_phases(learner, rollouts, threads: int) -> dict:
    """Seconds of one update by phase (``PHASES``), by wrapping the functions the update calls; a phase
    that runs inside another (the prefix's forward inside a defense's read) counts only in the inner one."""
    import torch.nn.utils as nn_utils

    from dgrpo.grpo import learner as learner_mod
    from dgrpo.policy import prefix as prefix_mod

    seconds = dict.fromkeys(PHASES, 0.0)
    stack: list[float] = []  # per open phase, the seconds of the phases nested in it

    def timer(key, fn):
        def wrapped(*a, **k):
            name = key if key != "forward" or torch.is_grad_enabled() else "reference_forward"
            t0 = time.perf_counter()
            stack.append(0.0)
            try:
                return fn(*a, **k)
            finally:
                took, inner = time.perf_counter() - t0, stack.pop()
                seconds[name] += took - inner
                if stack:
                    stack[-1] += took
        return wrapped

    targets = [(learner_mod, "groups_token_logprobs", "forward"), (learner_mod, "group_token_logprobs", "forward"),
               (learner_mod, "group_logits", "forward"), (learner, "forward", "forward"),
               (prefix_mod.SharedPrefix, "__init__", "prefix_forward"), (torch.Tensor, "backward", "backward"),
               (prefix_mod.SharedPrefix, "backward", "prefix_backward"), (nn_utils, "clip_grad_norm_", "clip"),
               (learner.optimizer, "step", "adamw")]
    saved = [(obj, attr, getattr(obj, attr), attr in vars(obj)) for obj, attr, _ in targets]
    for (obj, attr, key), (_, _, fn, _) in zip(targets, saved):
        setattr(obj, attr, timer(key, fn))
    try:
        _, wall, share = timed(lambda: learner.step(rollouts()), threads)
    finally:
        for obj, attr, fn, own in saved:
            if own:
                setattr(obj, attr, fn)
            else:
                delattr(obj, attr)  # an instance's method: back to its class's
    seconds["other"] = wall - sum(seconds.values())
    return {"wall": wall, "cpu_share": share, **seconds}


def finish(report: dict, out: str | None) -> None:
    print(json.dumps(report))
    if out:
        Path(out).write_text(json.dumps(report, indent=1))


def stream_section(args, model, requests, sample, params, eos: int, pad: int, compute: dict) -> list[dict]:
    """Section 5: the same requests through R rows, refilled vs in successive batches, interleaved."""
    _, ps, ss = requests(max(1, args.stream_requests // args.group))
    modes = {"refill": lambda rows: sample(model, ps, ss, params, eos, pad, max_rows=rows),
             "batches": lambda rows: [o for i in range(0, len(ps), rows)
                                      for o in sample(model, ps[i : i + rows], ss[i : i + rows], params, eos, pad)]}
    rows_out = []
    for rows in args.stream_rows:
        runs = {mode: {"tokens_per_s": [], "seconds": [], "cpu_share": []} for mode in modes}
        outs = {}
        for _ in range(args.stream_repeats):
            for mode, fn in modes.items():
                outs[mode], wall, share = timed(lambda: fn(rows), args.threads)
                runs[mode]["tokens_per_s"].append(sum(map(len, outs[mode])) / wall)
                runs[mode]["seconds"].append(wall)
                runs[mode]["cpu_share"].append(share)
        for r in runs.values():
            r["median_tokens_per_s"] = statistics.median(r["tokens_per_s"])
            r["fraction_of_limit"] = {k: r["median_tokens_per_s"] / v for k, v in compute["limit_tokens_per_s"].items()}
        rows_out.append({"rows": rows, "requests": len(ps), "generated_tokens": sum(map(len, outs["refill"])),
                         "same_tokens": outs["refill"] == outs["batches"], **runs})
    return rows_out


if __name__ == "__main__":
    main()
