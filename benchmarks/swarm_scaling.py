"""Time per round and peak memory of homogeneous and heterogeneous swarms of 1, 2, 4, 8 nodes.

    python benchmarks/swarm_scaling.py --nodes 1 2 4 8 --rounds 2 --threads 2

Every node has the same work: a vertical swarm where each node answers one prompt with G = 4
completions of at most 32 tokens (so the swarm's batch grows with m). Homogeneous swarms keep one
SmolLM2-135M copy for every honest node (batched generation, one update); heterogeneous swarms
give each node its own copy (own generation, own update, own optimizer). Each configuration runs
in a fresh process; the last round's time and the process's peak RSS are recorded. The reward is
a coin flip seeded by the completion text so every group carries signal and every round runs a
full update (a fresh model's real reward is mostly 0 and flat groups skip the update). Prints a
JSON line per configuration and a summary with times relative to one node.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import resource
import subprocess
import sys
import time
from pathlib import Path


def one(mode: str, nodes: int, rounds: int, threads: int, tmp: str) -> dict:
    from dgrpo.config import load_config
    from dgrpo.recipes.vertical import one_round
    from dgrpo.training.build import build_run

    models = [] if mode == "homogeneous" else [f"swarm.models=[{', '.join(['{name: smollm2-135m-instruct}'] * nodes)}]"]
    cfg = load_config(overrides=[
        f"swarm.nodes={nodes}", "swarm.mode=vertical", f"swarm.prompts_per_round={nodes}", "swarm.group_size=4",
        "sampling.max_new_tokens=32", f"threads={threads}", f"out_dir={tmp}", f"name={mode}{nodes}-{time.time_ns()}",
        *models])
    run = build_run(cfg)
    run.task.reward = lambda completion, problem: float(hashlib.sha256(completion.encode()).digest()[0] & 1)
    run.swarm.task = run.task
    times = []
    for r in range(rounds):
        t0 = time.perf_counter()
        one_round(run, r)
        times.append(time.perf_counter() - t0)
    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # ru_maxrss is KiB on Linux
    return {"mode": mode, "nodes": nodes, "round_seconds": times[-1], "all_rounds": times, "peak_rss_gb": peak_gb}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--modes", nargs="+", default=["homogeneous", "heterogeneous"])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tmp", default="/tmp/dgrpo-bench")
    parser.add_argument("--out")
    parser.add_argument("--one", nargs=2, help=argparse.SUPPRESS)  # internal: run one config in this process
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one[0], int(args.one[1]), args.rounds, args.threads, args.tmp)))
        return
    rows = []
    for mode in args.modes:
        for n in args.nodes:
            proc = subprocess.run([sys.executable, __file__, "--one", mode, str(n), "--rounds", str(args.rounds),
                                   "--threads", str(args.threads), "--tmp", args.tmp], capture_output=True, text=True)
            if proc.returncode != 0:
                rows.append({"mode": mode, "nodes": n, "error": proc.stderr.strip().splitlines()[-1:]})
            else:
                rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
            print(json.dumps(rows[-1]), flush=True)
    for mode in args.modes:
        base = next((r["round_seconds"] for r in rows if r["mode"] == mode and r["nodes"] == 1 and "round_seconds" in r), None)
        for r in rows:
            if r["mode"] == mode and base and "round_seconds" in r:
                r["relative_to_one_node"] = r["round_seconds"] / base
    summary = {"rows": rows}
    print(json.dumps(summary))
    if args.out:
        Path(args.out).write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
