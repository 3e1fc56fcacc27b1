"""The math-verify answer check of a program's output, under a time limit that works off the main thread.

math-verify's own time limits use ``SIGALRM``, which only the main thread can receive, and some of
its work (sympy evaluating ``2**2**2**40``, a C big-integer power) holds the interpreter without ever
returning: no thread of the host can bound it. So the check (:func:`dgrpo.rewards.math.answers_match`,
the math reward's own, unchanged) runs in one long-lived worker process, started on first use:

* the worker stops a check after :data:`CPU_LIMIT_S` seconds of its own CPU time (``ITIMER_VIRTUAL``,
  CPU not wall time, so a loaded machine never fails an honest check), and keeps at most
  :data:`MEMORY_LIMIT_MB` of address space;
* the host waits at most :data:`WALL_LIMIT_S` for an answer (a check stuck in C code), then kills the
  worker, counts the answer as not matching and starts a new worker for the next check;
* the worker's logging is off and its stderr discarded: math-verify logs the text it could not parse,
  and that text is the program's.

Callers pass only capped text (:data:`dgrpo.rewards.code.MAX_ANSWER_CHARS`).
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import select
import subprocess
import sys
import threading

CPU_LIMIT_S = 1.0  # CPU seconds of one check in the worker
WALL_LIMIT_S = 10.0  # wall seconds the host waits for one check before killing the worker
START_LIMIT_S = 120.0  # wall seconds the worker may take to start (imports math-verify and sympy)
MEMORY_LIMIT_MB = 2048

log = logging.getLogger(__name__)

_WORKER = f"""
import json, logging, resource, signal, sys
resource.setrlimit(resource.RLIMIT_AS, ({MEMORY_LIMIT_MB} << 20, {MEMORY_LIMIT_MB} << 20))
logging.disable(logging.CRITICAL)
from dgrpo.rewards.math import answers_match

def _stop(signum, frame):
    raise TimeoutError("answer check CPU limit")

signal.signal(signal.SIGVTALRM, _stop)
answers_match("1", "1")  # import math-verify's parsers now, not inside the first check
print("ready", flush=True)
for line in sys.stdin:
    predicted, oracle = json.loads(line)
    signal.setitimer(signal.ITIMER_VIRTUAL, {CPU_LIMIT_S})
    try:
        reply = "1" if answers_match(predicted, oracle) else "0"
    except ValueError as err:  # the oracle answer is not a number: a data error, raised by the caller
        reply = "E" + str(err)[:300].replace("\\n", " ")
    except BaseException:  # the CPU limit, a memory error, a parser crash: no match
        reply = "0"
    finally:
        signal.setitimer(signal.ITIMER_VIRTUAL, 0)
    print(reply, flush=True)
"""


class _Worker:
    """One worker process and the lock that serialises checks on it."""

    def __init__(self):
        self.lock = threading.Lock()
        self.proc: subprocess.Popen | None = None
        self.owner = 0  # pid of the process that started it (a forked child starts its own)

    def _start(self) -> subprocess.Popen:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        proc = subprocess.Popen([sys.executable, "-c", _WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, env=env, start_new_session=True, bufsize=0)
        if self._line(proc, START_LIMIT_S) != "ready":
            self._kill(proc)
            raise RuntimeError("the answer-check worker did not start (math-verify import failed?)")
        return proc

    @staticmethod
    def _line(proc: subprocess.Popen, timeout: float) -> str | None:
        ready, _, _ = select.select([proc.stdout], [], [], timeout)
        if not ready:
            return None
        line = proc.stdout.readline()
        return line.decode("utf-8", "replace").rstrip("\n") if line else None

    @staticmethod
    def _kill(proc: subprocess.Popen) -> None:
        proc.kill()
        proc.wait()
        for pipe in (proc.stdin, proc.stdout):
            pipe.close()

    def check(self, predicted: str, oracle: str) -> bool:
        with self.lock:
            if self.proc is not None and self.owner == os.getpid() and self.proc.poll() is not None:
                self._kill(self.proc)  # died (its memory limit, say): reap it and close its pipes
                self.proc = None
            if self.proc is None or self.owner != os.getpid():
                self.proc, self.owner = self._start(), os.getpid()
            proc = self.proc
            try:
                proc.stdin.write(json.dumps([predicted, oracle]).encode() + b"\n")
                proc.stdin.flush()
                reply = self._line(proc, WALL_LIMIT_S)
            except OSError:
                reply = None
            if reply is None:  # stuck past the wall limit, or dead: a new worker next time
                log.warning("answer check gave no verdict within %.0f s; counted as no match", WALL_LIMIT_S)
                self._kill(proc)
                self.proc = None
                return False
        if reply.startswith("E"):
            raise ValueError(reply[1:])
        return reply == "1"

    def close(self) -> None:
        if self.proc is not None and self.owner == os.getpid():
            self._kill(self.proc)
            self.proc = None


_worker = _Worker()
atexit.register(_worker.close)


def bounded_answers_match(predicted: str, oracle: str) -> bool:
    """:func:`dgrpo.rewards.math.answers_match` in the worker process, under its time and memory limits.

    Returns:
        Its verdict; False when the check ran out of time or memory.

    Raises:
        ValueError: the oracle answer is not a number (a data error, as from ``answers_match``).
        RuntimeError: the worker could not start.
    """
    return _worker.check(predicted, oracle)
