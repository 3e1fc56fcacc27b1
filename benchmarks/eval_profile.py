"""Where an evaluation of the README main job spends its seconds (issue 38).

    python benchmarks/eval_profile.py --out benchmarks/results/issue38_eval_profile.json [override ...]

Builds the README main job (``dgrpo run`` with its defaults, or the given ``key=value`` overrides)
in a temporary run directory and times two evaluations of the untrained policy: the first writes
the drift reference (as round 0 does), the second scores it again (as rounds 6 and 12 do). Each is
split by wrapping the functions it calls: the stream of sampled and greedy completions
(``Policy.generate``), the drift scoring (``completion_stats``) and the rest (rewards, intervals,
files). Reports seconds, generated tokens, scored positions and the process's CPU share
(CPU seconds / (wall × threads)) of each part. Prints one JSON object; ``--out`` writes it.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out")
    parser.add_argument("overrides", nargs="*", help="config overrides, key=value")
    args = parser.parse_args()

    from dgrpo.config import load_config
    from dgrpo.policy.policy import Policy
    from dgrpo.training import evaluate as evaluate_mod
    from dgrpo.training.build import build_run

    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_config(None, [f"out_dir={tmp}", "name=eval_profile", *args.overrides])
        run = build_run(cfg)
        threads = torch.get_num_threads()
        parts: dict = {}

        def timed(key, fn, count):
            def wrapped(*a, **k):
                c0, t0 = time.process_time(), time.perf_counter()
                out = fn(*a, **k)
                part = parts.setdefault(key, {"seconds": 0.0, "cpu_seconds": 0.0, "calls": 0, "positions": 0})
                part["seconds"] += time.perf_counter() - t0
                part["cpu_seconds"] += time.process_time() - c0
                part["calls"] += 1
                part["positions"] += count(a, k, out)
                return out
            return wrapped

        generate, stats = Policy.generate, evaluate_mod.completion_stats
        Policy.generate = timed("stream (sampled + greedy)", generate,
                                lambda a, k, out: sum(len(ids) for ids, _ in out))  # generated tokens
        evaluate_mod.completion_stats = timed("drift scoring", stats,
                                              lambda a, k, out: sum(len(p) + len(c) for p, c in zip(a[1], a[2])))
        report: dict = {"config": [f"{k}" for k in args.overrides], "threads": threads, "evaluations": []}
        try:
            for label in ("first (writes the reference)", "later (scores the reference)"):
                parts.clear()
                c0, t0 = time.process_time(), time.perf_counter()
                rec = evaluate_mod.evaluate(run, 0)
                wall, cpu = time.perf_counter() - t0, time.process_time() - c0
                rest = wall - sum(p["seconds"] for p in parts.values())
                for p in parts.values():
                    p["cpu_share"] = p["cpu_seconds"] / max(p["seconds"], 1e-9) / threads
                report["evaluations"].append({"label": label, "wall": wall, "cpu_share": cpu / wall / threads,
                                              "parts": dict(parts), "rest_seconds": rest,
                                              "metrics": {k: v for k, v in rec.items() if not k.startswith("time/")}})
        finally:
            Policy.generate, evaluate_mod.completion_stats = generate, stats
    print(json.dumps(report))
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
