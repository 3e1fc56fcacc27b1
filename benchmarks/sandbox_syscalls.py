"""The system calls honest programs make inside the sandbox: the measurement behind seccomp.ALLOWED.

    python benchmarks/sandbox_syscalls.py --out results/sandbox/syscalls.json

Runs every program of tests/rewards/honest_programs.py (and the sampled solutions of
tests/tasks/test_python_math.py) through :func:`dgrpo.rewards.sandbox.run_python`, with bubblewrap
started under ``strace -f``, and collects the system calls the interpreter makes from its ``execve``
on (the runner's set-up included: it runs under the same filter). Prints, per call, how many
programs made it, and the calls that :data:`dgrpo.rewards.seccomp.ALLOWED` lacks or has beyond the
measurement. ``--filter open`` measures with the allow-list replaced by an allow-everything filter
(what the programs would call if nothing were refused), the default measures under the shipped one.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "rewards"), str(ROOT / "tests" / "tasks")]

from dgrpo.rewards import bwrap, seccomp  # noqa: E402
from dgrpo.rewards.sandbox import SandboxLimits, run_python  # noqa: E402
from honest_programs import HONEST  # noqa: E402
from test_python_math import SAMPLED  # noqa: E402

_LINE = re.compile(r"^(\d+) +(?:<\.\.\. )?([a-z0-9_]+)[( ]")


def interpreter_syscalls(trace: str, interpreter: str) -> set[str]:
    """Names of the calls made by the process that executed ``interpreter``, from that execve on."""
    names: set[str] = set()
    pids: set[str] = set()
    for line in trace.splitlines():
        m = _LINE.match(line)
        if not m:
            continue
        pid, name = m.groups()
        if name == "execve" and f'"{interpreter}"' in line:  # "= 0" may follow on a "resumed" line
            pids.add(pid)
            continue
        if pid in pids and name not in ("exited", "killed"):
            names.add(name)
    return names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--filter", choices=["shipped", "open"], default="shipped")
    parser.add_argument("--out")
    args = parser.parse_args()
    if shutil.which("strace") is None:
        sys.exit("strace is needed: apt-get install strace")
    folder = Path(tempfile.mkdtemp(prefix="dgrpo-strace-"))
    wrapper = folder / "bwrap"
    real = bwrap.find_bwrap()
    current = folder / "current.trace"  # the sandbox's environment is cleared: a fixed path
    wrapper.write_text(f'#!/bin/sh\nexec strace -f -qq -o {current} {real} "$@"\n')
    wrapper.chmod(0o755)
    bwrap.find_bwrap = lambda: str(wrapper)
    if args.filter == "open":
        seccomp.base_filter = seccomp.allow_all_filter  # allow everything: what would the programs call?
    interpreter = bwrap.host_layout(()).interpreter
    programs = {**{k: v[0] for k, v in HONEST.items()}, **{f"sampled_{i}": p for i, (p, _) in enumerate(SAMPLED)}}
    run_python("print(1)")  # the probe, traced too, before the programs
    counts: collections.Counter[str] = collections.Counter()
    failed = []
    for name, program in programs.items():
        result = run_python(program, SandboxLimits(timeout_s=60), ("thief_math",))
        if name in HONEST and (not result.ok or result.stdout != HONEST[name][1]):
            failed.append({"program": name, "exit_status": result.exit_status, "stderr": result.stderr[-300:]})
        counts.update(interpreter_syscalls(current.read_text(), interpreter))
    shutil.rmtree(folder)
    allowed = set(seccomp.ALLOWED) | set(seccomp.ALLOWED_IF) | set(seccomp.ALLOWED_MASKED)
    report = {"filter": args.filter, "programs": len(programs), "honest_failed": failed,
              "syscalls": dict(sorted(counts.items())),
              "measured_not_allowed": sorted(set(counts) - allowed - set(seccomp.DONE_WITHOUT_RUNNING)
                                             - set(seccomp.SIDE_CHANNELS_REFUSED)),
              "measured_answered_0_without_running": sorted(set(counts) & set(seccomp.DONE_WITHOUT_RUNNING)),
              "measured_refused_on_purpose": sorted(set(counts) & set(seccomp.SIDE_CHANNELS_REFUSED)),
              "allowed_not_measured": sorted(allowed - set(counts))}
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
