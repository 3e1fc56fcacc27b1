"""Cost of the program sandbox: per-program overhead, and the reward stage of a python_math round.

    python benchmarks/sandbox_overhead.py --repeats 40 --rounds 7 --out benchmarks/results/sandbox_overhead.json

Compares three ways to run a program, interleaved A/B/C so that a shared machine's load hits them alike:

* ``bare``: ``python -I -S -c 'print(7)'`` in a subprocess: the interpreter's own start-up;
* ``before``: the previous sandbox (audit hook + resource limits + ``unshare --net``/``setpriv``),
  loaded from the ``main`` branch (``git show main:src/dgrpo/rewards/sandbox*.py``), or ``--before-ref``;
* ``after``: this sandbox (bubblewrap, seccomp, limits, audit hook).

Overhead per program = median(sandbox) - median(bare). Then the reward stage of a python_math round:
32 completions (8 prompts x 4: the oracle program, a wrong program, a code-injection program, a text
with no program) scored by the previous sandbox one at a time, by this one one at a time, and by
this one with the programs run ``--jobs`` at a time (:meth:`PythonMathTask.rewards`); the rewards of
all three must agree. Last, the sampled honest programs of tests/tasks/test_python_math.py under both
sandboxes: the ones whose reward differs are listed. Prints one JSON line (``--out`` writes it).
"""

from __future__ import annotations

import argparse
import atexit
import importlib.util
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_before(ref: str):
    """The sandbox module of git ``ref`` (it needs only the standard library and its runner beside it)."""
    folder = Path(tempfile.mkdtemp(prefix="dgrpo-old-sandbox-"))
    atexit.register(shutil.rmtree, folder, True)
    for name in ("sandbox.py", "sandbox_runner.py"):
        text = subprocess.run(["git", "-C", str(ROOT), "show", f"{ref}:src/dgrpo/rewards/{name}"],
                              check=True, capture_output=True, text=True).stdout
        (folder / name).write_text(text)
    spec = importlib.util.spec_from_file_location("dgrpo_sandbox_before", folder / "sandbox.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def round_completions(task, attack):
    """8 prompts x 4 completions of the kinds a round carries."""
    out = []
    for p in task.train[:8]:
        oracle = task.oracle_completion(p)
        wrong = oracle.replace(f"print({p.answer})", f"print({p.answer} + 1)") if f"print({p.answer})" in oracle \
            else oracle.replace("```\n</answer>", f"print({int(p.answer) + 1})\n```\n</answer>")
        out += [(oracle, p), (wrong, p), (attack.poison(task, p), p), ("I think the answer is 7.</think>", p)]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=40, help="program runs per method (interleaved)")
    parser.add_argument("--rounds", type=int, default=7, help="reward stages per method (interleaved)")
    parser.add_argument("--jobs", type=int, default=2, help="programs at once in the parallel reward stage")
    parser.add_argument("--before-ref", default="main")
    parser.add_argument("--out")
    args = parser.parse_args()

    from dgrpo.attacks.code_injection import CodeInjectionAttack
    from dgrpo.rewards import bwrap
    from dgrpo.rewards.code import completion_program, output_matches
    from dgrpo.rewards.sandbox import SandboxLimits, run_python
    from dgrpo.tasks.python_math import PythonMathTask

    before = load_before(args.before_ref)
    interp = bwrap.host_layout(()).interpreter
    program = "print(7)"
    methods = {
        "bare": lambda: subprocess.run([interp, "-I", "-S", "-c", program], check=True, capture_output=True),
        "before": lambda: before.run_python(program, before.SandboxLimits()),
        "after": lambda: run_python(program, SandboxLimits()),
    }
    for fn in methods.values():  # warm-up: probes, layout, seccomp compilation
        fn()
    times = {name: [] for name in methods}
    for _ in range(args.repeats):
        for name, fn in methods.items():
            times[name].append(timed(fn))
    median = {name: statistics.median(t) for name, t in times.items()}

    task = PythonMathTask(seed=0, difficulty=2, n_train=16, n_val=4)
    items = round_completions(task, CodeInjectionAttack("thief_math"))
    texts, problems = [t for t, _ in items], [p for _, p in items]
    limits = task.limits

    def before_reward(text, p):
        prog = completion_program(task.completion_prefix + text)
        if prog is None:
            return 0.0
        r = before.run_python(prog, before.SandboxLimits(timeout_s=limits.timeout_s, memory_mb=limits.memory_mb),
                              task.libraries)
        return float(r.ok and output_matches(r.stdout, p.answer))

    stages = {
        "before_serial": lambda: [before_reward(t, p) for t, p in items],
        "after_serial": lambda: [task.reward(t, p) for t, p in items],
        "after_parallel": lambda: task.rewards(texts, problems, jobs=args.jobs),
    }
    rewards = {name: fn() for name, fn in stages.items()}
    assert len({tuple(r) for r in rewards.values()}) == 1, f"the methods disagree: {rewards}"
    stage_times = {name: [] for name in stages}
    for _ in range(args.rounds):
        for name, fn in stages.items():
            stage_times[name].append(timed(fn))
    stage_median = {name: statistics.median(t) for name, t in stage_times.items()}
    sys.path.insert(0, str(ROOT / "tests" / "tasks"))
    from test_python_math import SAMPLED

    def reward_of(run, prog):
        r = run(prog)
        return float(r.ok and output_matches(r.stdout, "12"))

    differ = [{"program": prog, "before": reward_of(lambda c: before.run_python(c, before.SandboxLimits()), prog),
               "after": reward_of(run_python, prog)} for prog, _ in SAMPLED]
    differ = [d for d in differ if d["before"] != d["after"]]
    result = {
        "program": program, "repeats": args.repeats,
        "per_program_ms": {k: round(v * 1000, 1) for k, v in median.items()},
        "overhead_ms": {"before": round((median["before"] - median["bare"]) * 1000, 1),
                        "after": round((median["after"] - median["bare"]) * 1000, 1)},
        "per_program_ms_p90": {k: round(sorted(t)[int(0.9 * len(t))] * 1000, 1) for k, t in times.items()},
        "reward_stage": {"completions": len(items), "programs": sum(completion_program(task.completion_prefix + t)
                                                                    is not None for t in texts),
                         "rounds": args.rounds, "jobs": args.jobs,
                         "seconds": {k: round(v, 3) for k, v in stage_median.items()},
                         "rewards": rewards["after_serial"]},
        "sampled_programs": len(SAMPLED), "sampled_rewards_that_differ": differ,
        "python": sys.version.split()[0],
    }
    line = json.dumps(result)
    print(line)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(line + "\n")


if __name__ == "__main__":
    main()
