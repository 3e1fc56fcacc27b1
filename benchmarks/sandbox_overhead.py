"""Cost of the program sandbox: per-program overhead over a bare interpreter start, and the reward stage.

    chrt -f 20 python benchmarks/sandbox_overhead.py --repeats 60 --out results/sandbox/overhead.json

Per program (``print(7)``), interleaved A/B/C/D so that the machine's load hits each alike:

* ``bare``: ``python -I -S -c 'print(7)'`` in a subprocess, the interpreter's own start-up (the goal
  is a sandboxed program in under 2x this);
* ``bwrap_only``: the same interpreter under bubblewrap with this sandbox's namespaces and binds, no
  runner, no filter, no identity mapping: what bubblewrap alone costs;
* ``sandbox``: :func:`dgrpo.rewards.sandbox.run_python`, the product path (bubblewrap, identity
  mapping, seccomp, limits, runner, audit hook, library service, capped pipes);
* ``before``: the sandbox of git ``--before-ref`` (default ``main``), run from a worker process
  that imports that revision's ``src`` (``sandbox`` runs from a worker of this revision the same
  way, so both pay the same round trip).

Then the reward stage of a python_math round (32 completions: 8 prompts x oracle, wrong, code
injection, no program), one program at a time and ``--jobs`` at a time; the host CPU time one
program printing a 1 MiB line adds over ``print(7)``; the sampled honest programs of
tests/tasks/test_python_math.py whose reward differs from the hand-worked one. How quiet the
machine was: the 1-minute load average before and after, the share of CPU time other processes
the CPUs were busy (all processes, these runs included) and the mean number of runnable
processes during the per-program runs (/proc/stat), and the scheduling policy the measurement ran under (``chrt -f``
gives it priority over the other users of a shared machine). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORKER = """
import sys
sys.path.insert(0, sys.argv[1])
from dgrpo.rewards.sandbox import run_python
run_python("print(1)")
print("ready", flush=True)
for line in sys.stdin:
    run_python(line.strip().replace("\\\\n", "\\n"))
    print("ok", flush=True)
"""


class Worker:
    """A process that runs programs with the sandbox of one source tree, one request at a time."""

    def __init__(self, src: Path):
        self.proc = subprocess.Popen([sys.executable, "-c", WORKER, str(src)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, bufsize=1)
        assert self.proc.stdout.readline().strip() == "ready"
        atexit.register(self.proc.kill)

    def run(self, program: str) -> None:
        self.proc.stdin.write(program.replace("\n", "\\n") + "\n")
        assert self.proc.stdout.readline().strip() == "ok"


def source_of(ref: str) -> Path:
    """The ``src`` tree of git ``ref`` in a temporary directory."""
    folder = Path(tempfile.mkdtemp(prefix="dgrpo-sandbox-ref-"))
    atexit.register(shutil.rmtree, folder, True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "src"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    return folder / "src"


def cpu_busy() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs so far (/proc/stat)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


def runnable() -> int:
    """Processes running or ready to run right now, this one included (/proc/stat procs_running)."""
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("procs_running"):
            return int(line.split()[1])
    return 0


def own_cpu() -> float:
    return sum(getattr(resource.getrusage(who), f) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
               for f in ("ru_utime", "ru_stime"))


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def summary(times: list[float]) -> dict[str, float]:
    ordered = sorted(times)
    return {"median_ms": round(statistics.median(times) * 1000, 2), "p10_ms": round(ordered[len(ordered) // 10] * 1000, 2),
            "p90_ms": round(ordered[int(0.9 * len(ordered))] * 1000, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=60, help="program runs per method (interleaved)")
    parser.add_argument("--rounds", type=int, default=5, help="reward stages per way (interleaved)")
    parser.add_argument("--jobs", type=int, default=2, help="programs at once in the parallel reward stage")
    parser.add_argument("--before-ref", default="main", help="git revision whose sandbox to compare with ('' to skip)")
    parser.add_argument("--out")
    args = parser.parse_args()

    from dgrpo.attacks.code_injection import CodeInjectionAttack
    from dgrpo.rewards import bwrap, sandbox
    from dgrpo.rewards.code import result_reward
    from dgrpo.rewards.sandbox import SandboxLimits, run_python
    from dgrpo.tasks.python_math import PythonMathTask

    load_before = os.getloadavg()[0]
    busy0, total0 = cpu_busy()
    interp = bwrap.host_layout(()).interpreter
    layout = bwrap.host_layout(())
    bare_cmd = [interp, "-I", "-S", "-c", "print(7)"]
    bwrap_cmd = bwrap.bwrap_command(bwrap.find_bwrap(), layout, env=sandbox.ENV, seccomp_fd=0, info_fd=0,
                                    tmpfs_bytes=1 << 20, argv=bare_cmd, userns_block_fd=None)
    for opt in ("--seccomp", "--info-fd"):  # bubblewrap alone: no filter, no information pipe
        i = bwrap_cmd.index(opt)
        del bwrap_cmd[i:i + 2]
    this = Worker(ROOT / "src")
    methods = {
        "bare": lambda: subprocess.run(bare_cmd, check=True, capture_output=True),
        "bwrap_only": lambda: subprocess.run(bwrap_cmd, check=True, capture_output=True),
        "sandbox": lambda: this.run("print(7)"),
    }
    if args.before_ref:
        before = Worker(source_of(args.before_ref))
        methods["before"] = lambda: before.run("print(7)")
    times = {name: [] for name in methods}
    queue = []
    for _ in range(args.repeats):
        queue.append(runnable())
        for name, fn in methods.items():
            times[name].append(timed(fn))
    busy1, total1 = cpu_busy()
    per_program = {name: summary(t) for name, t in times.items()}
    bare = per_program["bare"]["median_ms"]

    task = PythonMathTask(seed=0, difficulty=2, n_train=16, n_val=4)
    attack = CodeInjectionAttack("thief_math")
    items = []
    for p in task.train[:8]:
        oracle = task.oracle_completion(p)
        wrong = oracle.replace("```\n</answer>", f"print({int(p.answer) + 1})\n```\n</answer>")
        items += [(oracle, p, 1.0), (wrong, p, 0.0), (attack.poison(task, p), p, 1.0), ("I think it is 7.</think>", p, 0.0)]
    texts, problems, expected = [t for t, _, _ in items], [p for _, p, _ in items], [r for _, _, r in items]
    stages = {"one_at_a_time": lambda: task.rewards(texts, problems, jobs=1),
              f"{args.jobs}_at_a_time": lambda: task.rewards(texts, problems, jobs=args.jobs)}
    rewards_ok = all(fn() == expected for fn in stages.values())
    stage_times = {name: [] for name in stages}
    for _ in range(args.rounds):
        for name, fn in stages.items():
            stage_times[name].append(timed(fn))

    limits = SandboxLimits(timeout_s=20, max_file_bytes=2 << 20)
    megabyte = "import sys\nsys.stdout.write('1+' * (1 << 19) + '7\\n')"
    cpu = {}
    for name, program in (("print(7)", "print(7)"), ("1 MiB line", megabyte)):
        samples = []
        for _ in range(5):
            start = own_cpu()
            result_reward(run_python(program, limits), "7")
            samples.append(own_cpu() - start)
        cpu[name] = statistics.median(samples)

    sys.path.insert(0, str(ROOT / "tests" / "tasks"))
    from test_python_math import SAMPLED

    sampled = [result_reward(r, "12") for r in sandbox.run_many([p for p, _ in SAMPLED])]
    differ = [p for (p, want), got in zip(SAMPLED, sampled) if got != want]
    report = {
        "program": "print(7)", "repeats": args.repeats, "per_program": per_program,
        "ratio_to_bare": {k: round(v["median_ms"] / bare, 2) for k, v in per_program.items()},
        "overhead_ms": {k: round(v["median_ms"] - bare, 2) for k, v in per_program.items() if k != "bare"},
        "reward_stage": {"completions": len(items), "rounds": args.rounds, "rewards_as_expected": rewards_ok,
                         "seconds": {k: round(statistics.median(v), 3) for k, v in stage_times.items()}},
        "host_cpu_ms": {k: round(v * 1000, 1) for k, v in cpu.items()},
        "sampled_programs": len(SAMPLED), "sampled_rewards_that_differ": differ,
        "quiet": {"load_1min_before": round(load_before, 2), "load_1min_after": round(os.getloadavg()[0], 2),
                  "cpu_busy_share_during_per_program_runs": round((busy1 - busy0) / max(1, total1 - total0), 3),
                  "runnable_processes_mean": round(statistics.mean(queue), 2), "cpus": os.cpu_count(),
                  "scheduler": {0: "SCHED_OTHER", 1: "SCHED_FIFO", 2: "SCHED_RR"}.get(os.sched_getscheduler(0), "?")},
        "python": sys.version.split()[0],
    }
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
