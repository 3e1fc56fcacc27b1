"""What a program's writes cost the host: the host reads stdout, stderr and the library channel in its
own process, so a program that writes one byte at a time (or floods) must not buy host CPU with it.

Measured as the CPU time of the thread that runs the program (``time.thread_time()``: the supervising
loop runs in it; ``RUSAGE_SELF`` would add every other thread of a test worker, tests/rewards/host_cpu.py),
against ``print(7)`` run the same way. Before the read rests (supervise.py) these
programs cost the host 0.3-0.6 s each, and a pipe in packet mode (``O_DIRECT``, now refused) 4 s.
"""

import signal
import time

import pytest

from dgrpo.rewards import supervise
from dgrpo.rewards.sandbox import SandboxLimits, run_python

LIMITS = SandboxLimits(timeout_s=2, cpu_s=10)  # the wall clock ends each flood (a CPU limit would race it)
# Worst case of the bound in supervise.py's docstring for LIMITS: 3 pipes x (64 + 2 s / 5 ms) short reads,
# 2 x 1 MiB / 4 KiB long ones, 1,000 request lines: ~2,900 reads at ~20 µs. The bound below is 4x that (on a loaded
# 2-core machine the same reads cost 0.19 s: 0.15 failed there), under the 0.3-0.6 s these cost before the rests; the
# count of reads (max_reads) is the bound that does not depend on the machine's load.
HOST_CPU_S = 0.25
EVERY_FD = "import os\nwhile True:\n    for fd in range(1, 64):\n        try:\n            os.write(fd, B)\n" \
           "        except OSError:\n            pass"
FLOODS = {
    "a_byte_at_a_time_on_stdout_and_stderr": "import os\nwhile True:\n    os.write(1, b'x')\n    os.write(2, b'x')",
    "a_paced_byte_on_stderr": "import os, time\nwhile True:\n    os.write(2, b'x')\n    time.sleep(0.0001)",
    "a_byte_on_every_descriptor": EVERY_FD.replace("B", "b'x'"),
    "empty_lines_on_every_descriptor": EVERY_FD.replace("B", "b'\\n'"),
    "partial_request_lines": "import os\nwhile True:\n    for fd in range(3, 64):\n        try:\n"
                             "            os.write(fd, b'1 thief_math add i')\n"
                             "        except OSError:\n            pass",
}


def _cost(program: str):
    before = time.thread_time()
    result = run_python(program, LIMITS, ("thief_math",), audit_hook=False)
    return time.thread_time() - before, result


@pytest.mark.parametrize("name", sorted(FLOODS))
def test_tiny_writes_cost_the_host_little(name):
    _cost("print(7)")  # warm-up: the probe, the layout, the filters
    base, honest = _cost("print(7)")
    cost, result = _cost(FLOODS[name])
    assert honest.ok and honest.stdout == "7\n"
    assert result.exit_status == -signal.SIGKILL  # at the output cap or the time limit, never run to the end
    assert cost - base < HOST_CPU_S, f"{name} cost the host {cost:.3f} s of CPU ({base:.3f} s for print(7))"
    assert result.host_reads <= max_reads(LIMITS), result.host_reads
    assert honest.host_reads <= 4  # "7\n", and the end of stdout and stderr


def max_reads(limits: SandboxLimits) -> int:
    """The bound of supervise.py's docstring on the host's reads of one run (the wall limit plus the
    sandbox's start-up and teardown, 1 s at most here, as the time the rests may go on)."""
    short = 3 * (supervise.FREE_READS + (limits.timeout_s + 1) / supervise.REST_S)
    return int(short + 2 * limits.max_file_bytes / supervise.SHORT_READ + 1000 + 16)  # 16: EOFs, stand-ins


def test_past_the_output_cap_the_program_is_killed():
    start = time.perf_counter()
    result = run_python("import sys\nwhile True:\n    sys.stderr.write('x' * 1000)\n",
                        SandboxLimits(timeout_s=30, max_file_bytes=100_000))
    assert result.exit_status == -signal.SIGKILL and not result.timed_out
    assert time.perf_counter() - start < 20  # killed at 100 kB, long before the 30 s limit
    assert len(result.stderr) <= supervise.STDERR_KEPT


def test_many_short_writes_of_an_honest_program_arrive_whole_and_on_time():
    """300 flushed lines (more short reads than FREE_READS, so the rests start) and 500 library calls
    (whole request lines never rest): every byte arrives, and the rests end with the program."""
    program = ("import sys, thief_math\nfor i in range(300):\n    print(i, flush=True)\n"
               "    print(i, file=sys.stderr, flush=True)\ns = 0\nfor i in range(500):\n    s = thief_math.add(s, i)\n"
               "print('sum', s)")
    result = run_python(program, SandboxLimits(timeout_s=20), ("thief_math",))
    assert result.ok, result.stderr[-300:]
    assert result.stdout.splitlines()[:300] == [str(i) for i in range(300)] and result.stdout.endswith("sum 124750\n")
    assert len(result.calls) == 500
    assert result.stderr.splitlines()[-1] == "299"
