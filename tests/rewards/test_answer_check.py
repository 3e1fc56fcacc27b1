"""The math-verify check of a program's output runs in a worker under limits, off the main thread too,
and what a program printed costs the host little and is never logged."""

import concurrent.futures
import logging
import resource
import secrets
import time

import pytest

from dgrpo.rewards import answer_check, code
from dgrpo.rewards.answer_check import WALL_LIMIT_S, bounded_answers_match
from dgrpo.rewards.code import MAX_ANSWER_CHARS, output_matches, result_reward
from dgrpo.rewards.sandbox import SandboxLimits, run_python
from dgrpo.rewards.supervise import STDOUT_KEPT

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


def test_a_runaway_check_ends_within_its_limit_as_no_match():
    start = time.perf_counter()
    assert bounded_answers_match("2**2**2**40", "7") is False  # sympy would evaluate a 2^(2^40)-bit number
    assert time.perf_counter() - start < WALL_LIMIT_S + 5
    assert bounded_answers_match("7.0", "7") is True  # and the next check still works


def test_a_power_tower_is_no_match():
    """``2**2**2**40`` (sympy's C big-integer power): no match, whether refused early or cut by a limit."""
    assert bounded_answers_match("2**2**2**40", "7") is False
    assert bounded_answers_match("7.0", "7") is True  # the worker (or its replacement) still answers


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


def _host_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def test_a_megabyte_of_output_costs_the_host_under_50_ms(monkeypatch, caplog, capfd):
    """One printed line of 1 MiB (the first review: 6.2 s of host CPU in math-verify, logged whole)."""
    token = "dgrpo-bytes-" + secrets.token_hex(6)
    megabyte = (f"import sys\nsys.stdout.write('\\x1b]0;{token}\\x07\\x1b[2J' + '1+' * (1 << 19))\nprint()\n"
                f"print('{token}\\x1b[2J', file=sys.stderr)")  # terminal escapes: a title, clear screen
    limits = SandboxLimits(timeout_s=20, max_file_bytes=2 << 20)
    run_python("print(7)", limits)  # warm-up: the probe, the layout, the filters
    with caplog.at_level(logging.DEBUG):
        costs = []
        for program in ("print(7)", megabyte):
            before = _host_cpu()
            result = run_python(program, limits)
            reward = result_reward(result, "7")
            costs.append(_host_cpu() - before)
    assert reward == 0.0 and result.ok and result.output_limited and result.output_bytes > 1 << 20
    assert len(result.stdout.encode()) <= STDOUT_KEPT
    assert costs[1] - costs[0] < 0.050, costs  # what the megabyte added to the host's CPU time
    out, err = capfd.readouterr()
    assert token not in out + err and token not in caplog.text and "\x1b" not in caplog.text
