"""Where a README round's CPU seconds go, measured so that other processes' load does not count (issue 38).

    PYTHONPATH=src nice -n 10 python benchmarks/round_profile.py --rounds 3 --threads 1 \\
        --out benchmarks/results/issue38_round_profile/new_t1.json [override ...]

Runs ``dgrpo run`` in this process on the README main job's embedded defaults, except: ``--rounds``
rounds (default 3), ``threads=--threads`` and a final evaluation of 4 sampled prompts only
(``eval.every`` past the last round, ``eval.n_prompts=4``, no greedy answers, no drift metrics), in a
temporary run directory; extra ``key=value`` overrides go last. The run is profiled by
:mod:`cProfile` with :func:`time.process_time` as its clock, so each part is **CPU seconds of this
process** (all its threads), not wall seconds: on a machine shared with other sessions the wall time
of a round is mostly the others' load, while its CPU seconds at ``--threads 1`` are the work itself
(with 2 threads on a loaded machine, the OpenMP threads also spin while they wait for each other,
and those seconds count too).

Parts (cumulative CPU seconds of the function, summed over its calls): ``generate`` (the round's
sampling, ``Swarm.write``), ``admit`` (route, signatures and admission rules, ``Swarm.receive``),
``update`` (``Learner.step``: forward, backward, AdamW), ``backward`` (the autograd engine, inside
``update``), ``evaluate`` (the two 4-prompt evaluations), ``build`` (model load, run setup, the GGUF
file's sha256), ``checkpoint`` (the final save), ``total`` (the whole ``dgrpo run``). Also reported:
``rounds`` (per round: ``time/*`` wall seconds from ``metrics.jsonl``), the load average before
and after, and the 15 functions with the most CPU seconds of their own.

The script only imports ``dgrpo.cli``, so it also profiles an older checkout
(``PYTHONPATH=/path/to/old/src``); functions that checkout lacks are reported as null.
Prints one JSON object; ``--out`` writes it too.
"""

from __future__ import annotations

import argparse
import cProfile
import contextlib
import json
import os
import pstats
import resource
import sys
import tempfile
import time
from pathlib import Path

PARTS = {  # part: (file name suffix, function name)
    "generate": ("swarm/swarm.py", "write"),
    "admit": ("swarm/swarm.py", "receive"),
    "update": ("grpo/learner.py", "step"),
    "backward": ("torch/autograd/graph.py", "_engine_run_backward"),
    "evaluate": ("training/evaluate.py", "evaluate"),
    "build": ("training/build.py", "build_run"),
    "checkpoint": ("training/checkpoint.py", "save_checkpoint"),
}


def cumulative(stats: pstats.Stats, suffix: str, name: str) -> float | None:
    """CPU seconds inside ``name`` of a file ending in ``suffix`` (summed over same-named definitions), or None."""
    found = [v[3] for (path, _line, func), v in stats.stats.items() if func == name and path.endswith(suffix)]
    return round(sum(found), 3) if found else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out")
    parser.add_argument("overrides", nargs="*", help="config overrides, key=value")
    args = parser.parse_args()

    import dgrpo
    from dgrpo.cli import main as dgrpo_main

    with tempfile.TemporaryDirectory() as tmp:
        argv = ["run", f"rounds={args.rounds}", f"threads={args.threads}", f"eval.every={args.rounds + 1}",
                "eval.n_prompts=4", "eval.greedy=false", "eval.drift=false", f"out_dir={tmp}", "name=profile",
                *args.overrides]
        load_before = os.getloadavg()
        profile = cProfile.Profile(time.process_time)
        wall = time.perf_counter()
        with contextlib.redirect_stdout(sys.stderr):  # stdout: the JSON alone
            profile.enable()
            rc = dgrpo_main(argv)
            profile.disable()
        wall = time.perf_counter() - wall
        if rc != 0:
            sys.exit(f"round_profile: dgrpo run exited {rc}")
        records = [json.loads(line) for line in (Path(tmp) / "profile" / "metrics.jsonl").read_text().splitlines()]
    stats = pstats.Stats(profile)
    parts = {part: cumulative(stats, *where) for part, where in PARTS.items()}
    parts["total"] = round(stats.total_tt, 3)
    own = sorted(((v[2], f"{Path(path).name}:{line}({func})") for (path, line, func), v in stats.stats.items()),
                 reverse=True)[:15]
    usage = resource.getrusage(resource.RUSAGE_SELF)
    out = {
        "command": " ".join(["python", "benchmarks/round_profile.py", *sys.argv[1:]]),
        "dgrpo": str(Path(dgrpo.__file__).parent),
        "argv": argv,
        "threads": args.threads,
        "cpu_seconds": parts,
        "cpu_seconds_per_round": {k: round(parts[k] / args.rounds, 3) for k in ("generate", "admit", "update")
                                  if parts[k] is not None},
        "wall_seconds": round(wall, 3),
        "user_sys_seconds": round(usage.ru_utime + usage.ru_stime, 3),
        "peak_rss_gb": round(usage.ru_maxrss / 2**20, 2),
        "loadavg": {"before": load_before, "after": os.getloadavg()},
        "rounds": [{k: v for k, v in rec.items() if k == "round" or k.startswith("time/")} for rec in records],
        "own_cpu_seconds": [{"function": name, "seconds": round(s, 3)} for s, name in own],
    }
    text = json.dumps(out, indent=1)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
