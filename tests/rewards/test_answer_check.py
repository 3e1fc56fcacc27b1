"""The math-verify check of a program's output runs in a worker under limits, off the main thread too,
and what a program printed costs the host little and is never logged."""

import concurrent.futures
import logging
import secrets
import signal
import time

import pytest

from dgrpo.rewards import answer_check, code
from dgrpo.rewards.answer_check import WALL_LIMIT_S, bounded_answers_match
from dgrpo.rewards.code import MAX_ANSWER_CHARS, output_matches, result_reward
from dgrpo.rewards.sandbox import SandboxLimits, run_python
from dgrpo.rewards.supervise import STDOUT_KEPT
from host_cpu import HostCpu

CASES = [("7.0", "7", True), ("The answer is 7", "7", True), ("$1,234.00", "1234", True), ("8", "7", False),
         ("no number", "7", False)]


def test_the_worker_gives_the_math_rewards_verdicts():
    from dgrpo.rewards.math import answers_match

    assert [bounded_answers_match(p, o) for p, o, _ in CASES] == [want for _, _, want in CASES]
    assert [answers_match(p, o) for p, o, _ in CASES] == [want for _, _, want in CASES]  # the same checker


def test_it_works_off_the_main_thread():
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        verdicts = list(pool.map(lambda c: bounded_answers_match(c[0], c[1]), CASES * 2))
    assert verdicts == [want for _, _, want in CASES] * 2


# An oracle that is a number but not one numbers_in reads ("7." ends in a point), so the answer goes
# to math-verify (the "7" oracle is compared in pure Python and never reaches sympy).
MV_ORACLE = "7."
BOMBS = ["2**2**2**40", "9^9^9^9", "10**10**10", "10^{10^{10}}", "$2^{2^{40}}$", "\\boxed{9^{9^{9}}}", "(2**99)**99",
         "(1+10**-30)**(10**30)", "2**(2**40)", "pow(2, 2**40)", "2**99999999", "99999999**99999999", "2**-99999999",
         "2**(99*99*99)", "2^{1e9}", "10^{10000}"]
FINE = ["7", "7.0", "2^{10}", "10^{-6}", "x^2 + y^2", "2^{1/2}", "1.5e23", "The answer is 12", "3*sqrt(2)/2",
        "1.5 \\times 10^{23}", "2**9999", "e^{x}", "$1,234.00$", "exp(2)", "2**"]


def test_power_towers_and_huge_exponents_never_reach_the_worker(monkeypatch):
    """Each of these cost the worker 1.1-5 s of CPU in math-verify (measured before the pre-check)."""
    def refuse(*args):
        raise AssertionError("the worker must not see this")

    monkeypatch.setattr(answer_check._worker, "check", refuse)
    before = time.process_time()
    assert [bounded_answers_match(b, MV_ORACLE) for b in BOMBS] == [False] * len(BOMBS)
    assert time.process_time() - before < 0.05  # all of them together: they cost nothing
    assert [answer_check.power_bomb(b) for b in BOMBS if answer_check.power_bomb(b) is None] == []


def test_ordinary_answers_pass_the_pre_check():
    assert [f for f in FINE if answer_check.power_bomb(f) is not None] == []
    assert bounded_answers_match("2**10", "1024.") is True  # a power math-verify evaluates, as before
    assert bounded_answers_match("$2^{10}$", "1024.") is True
    assert bounded_answers_match("7.0", MV_ORACLE) is True


def _with_check(monkeypatch, body: str) -> None:
    """A fresh worker whose answers_match runs ``body`` for the answer "bomb" (and compares otherwise),
    under the worker's own limits."""
    answer_check._worker.close()
    check = (f"def answers_match(predicted, oracle):\n    if predicted == 'bomb':\n{body}\n"
             "    return predicted == oracle\n")
    monkeypatch.setattr(answer_check, "_WORKER",
                        answer_check._WORKER.replace("from dgrpo.rewards.math import answers_match\n", check))
    monkeypatch.setattr(answer_check, "WALL_LIMIT_S", 300.0)  # so that only the CPU limits can end a check


def test_the_cpu_limit_cannot_be_caught_and_ignored(monkeypatch):
    """math-verify catches Exception (it swallowed the old TimeoutError and ran on to its own 5 s alarm);
    CheckTimeout is not an Exception, and is raised again every 0.1 s of CPU until it escapes."""
    _with_check(monkeypatch, "        while True:\n            try:\n                while True:\n"
                             "                    pass\n            except Exception:\n                pass")
    assert bounded_answers_match("1", "1") is True
    proc = answer_check._worker.proc
    assert bounded_answers_match("bomb", "7") is False
    assert answer_check._worker.proc is proc and proc.poll() is None  # the same worker, alive
    assert bounded_answers_match("1", "1") is True
    answer_check._worker.close()


def test_c_code_that_never_returns_to_python_is_killed_by_the_kernel(monkeypatch):
    """A C loop that checks no signal (summing 10**13 ones) ignores the CPU timer; RLIMIT_CPU's SIGXCPU,
    which has no handler, ends the worker after HARD_CPU_S of CPU, long before the (raised) wall limit."""
    _with_check(monkeypatch, "        sum(__import__('itertools').repeat(1, 10 ** 13))")
    assert bounded_answers_match("1", "1") is True
    proc = answer_check._worker.proc
    start = time.perf_counter()
    assert bounded_answers_match("bomb", "7") is False
    assert proc.returncode == -signal.SIGXCPU  # the kernel's CPU limit, not the host's SIGKILL
    assert answer_check._worker.proc is None and time.perf_counter() - start < answer_check.WALL_LIMIT_S
    monkeypatch.undo()
    assert bounded_answers_match("7.0", MV_ORACLE) is True  # a new (real) worker for the next check


# A worker that says ready and then never answers: a check stuck in C code, made deterministic
# (how fast math-verify gives up on a given text depends on the machine and its version).
_STUCK_WORKER = "import sys, time\nprint('ready', flush=True)\nfor line in sys.stdin:\n    time.sleep(3600)\n"


def test_a_stuck_worker_is_killed_and_replaced(monkeypatch):
    answer_check._worker.close()
    monkeypatch.setattr(answer_check, "_WORKER", _STUCK_WORKER)
    monkeypatch.setattr(answer_check, "WALL_LIMIT_S", 0.3)
    assert bounded_answers_match("7.0", "7") is False  # no verdict within the wall limit: no match
    assert answer_check._worker.proc is None  # killed
    monkeypatch.undo()  # the real worker and wall limit again
    assert bounded_answers_match("7.0", "7") is True  # a new worker started for the next check
    assert answer_check._worker.proc is not None and answer_check._worker.proc.poll() is None


def test_a_bad_oracle_is_an_error_not_a_zero():
    with pytest.raises(ValueError, match="is not a number"):
        bounded_answers_match("7", "seven")


def test_long_output_never_reaches_the_checker(monkeypatch):
    def refuse(*args):
        raise AssertionError("math-verify must not see this")

    monkeypatch.setattr(code, "bounded_answers_match", refuse)
    assert not output_matches("7 " + "x" * MAX_ANSWER_CHARS, "7")
    assert not output_matches("1+" * 500_000 + "6", "7")


def test_a_megabyte_of_output_costs_the_host_under_50_ms(monkeypatch, caplog, capfd):
    """One printed line of 1 MiB (the first review: 6.2 s of host CPU in math-verify, logged whole)."""
    token = "dgrpo-bytes-" + secrets.token_hex(6)
    megabyte = (f"import sys\nsys.stdout.write('\\x1b]0;{token}\\x07\\x1b[2J' + '1+' * (1 << 19))\nprint()\n"
                f"print('{token}\\x1b[2J', file=sys.stderr)")  # terminal escapes: a title, clear screen
    limits = SandboxLimits(timeout_s=20, max_file_bytes=2 << 20)
    run_python("print(7)", limits)  # warm-up: the probe, the layout, the filters
    with caplog.at_level(logging.DEBUG):
        costs = []
        for program in ("print(7)", megabyte):  # (this thread and the answer-check worker: host_cpu.py)
            with HostCpu(monkeypatch) as cost:
                result = run_python(program, limits)
                reward = result_reward(result, "7")
            costs.append(cost.seconds)
    assert reward == 0.0 and result.ok and result.output_limited and result.output_bytes > 1 << 20
    assert len(result.stdout.encode()) <= STDOUT_KEPT
    assert costs[1] - costs[0] < 0.050, costs  # what the megabyte added to the host's CPU time
    out, err = capfd.readouterr()
    assert token not in out + err and token not in caplog.text and "\x1b" not in caplog.text
