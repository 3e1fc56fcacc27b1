"""CPU seconds the host spends on sandboxed runs and their scoring, counted on the threads and processes
that do that work only.

The host's work for a run is done in the calling thread (:func:`dgrpo.rewards.sandbox.run_python`
reads the pipes and answers library calls there, :func:`dgrpo.rewards.code.result_reward` scores
there) and in the answer-check worker (:mod:`dgrpo.rewards.answer_check`), a child process.
``getrusage`` measures something else under a test runner: ``RUSAGE_SELF`` counts every thread of
the process (a pytest-xdist worker keeps threads of earlier tests), and ``RUSAGE_CHILDREN`` every
child reaped while the run goes on, whoever started it: ``subprocess.Popen`` reaps, before it starts
a child, the children of earlier tests whose ``Popen`` objects were dropped while they ran
(``subprocess._cleanup``), so a dropped process of some earlier test brought its whole CPU time
(an answer-check worker's start-up is ~2 s) into the run that happened to start the next sandbox
(CI, ``-n 2``: "cost the host 2.02 s" for a CPU loop whose own cost is some milliseconds). The
sandboxed program's own CPU time is bounded by its limits, not counted here.
"""

from __future__ import annotations

import os
import time

from dgrpo.rewards import answer_check

_TICK = os.sysconf("SC_CLK_TCK")
_KILL = answer_check._Worker._kill  # (the product's, before any HostCpu wraps it)


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used; it may be a zombie, not yet reaped."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime (fields 14 and 15 of proc(5))


class HostCpu:
    """Counts, between ``__enter__`` and ``__exit__``, the CPU time of the calling thread, of threads that
    report their own (:meth:`add`), and of every answer-check worker that ran meanwhile (one killed and
    replaced included: read before it is reaped). ``seconds`` holds the sum after ``__exit__``.

    The answer-check worker is started on entry when there is none (its start-up, imports of
    math-verify and sympy, is not what a program costs); ``monkeypatch`` wraps the worker's kill.
    """

    def __init__(self, monkeypatch):
        self.seconds, self.others, self.workers = 0.0, 0.0, {}

        def counted_kill(proc):
            proc.kill()
            os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)  # a zombie: its CPU time is final
            self._note(proc.pid)
            _KILL(proc)

        monkeypatch.setattr(answer_check._Worker, "_kill", staticmethod(counted_kill))

    def _note(self, pid: int) -> None:
        self.workers.setdefault(pid, [0.0, 0.0])[1] = process_cpu(pid)

    def add(self, seconds: float) -> None:
        """Count ``seconds`` of CPU another thread spent on the run (its own ``time.thread_time()``)."""
        self.others += seconds

    def __enter__(self):
        if answer_check._worker.proc is None or answer_check._worker.proc.poll() is not None:
            answer_check.bounded_answers_match("1", "1")  # a worker, started now
        pid = answer_check._worker.proc.pid
        self.workers = {pid: [process_cpu(pid), process_cpu(pid)]}
        self.start = time.thread_time()
        return self

    def __exit__(self, *exc):
        own = time.thread_time() - self.start
        proc = answer_check._worker.proc
        if proc is not None and proc.returncode is None:  # alive, or a zombie: /proc still has its times
            self._note(proc.pid)  # (a worker started during the run counts from 0)
        self.seconds = own + self.others + sum(end - begin for begin, end in self.workers.values())
