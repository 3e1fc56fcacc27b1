"""The math-verify answer check of a program's output, under a time limit that works off the main thread.

math-verify's own time limits use ``SIGALRM``, which only the main thread can receive, and some of
its work (sympy evaluating ``2**2**2**40``, a C big-integer power) holds the interpreter without ever
returning: no thread of the host can bound it. So:

* a power tower or a huge exponent (``2**2**2**40``, ``9^9^9^9``, ``10^{10^{10}}``, ``(2**99)**99``,
  ``2**99999999``) is refused before anything parses it (:func:`power_bomb`, pure Python, linear in
  the text): no match, at no cost. Before, each such line cost the worker 1.1-5 s of CPU (math-verify
  catches the worker's own time-limit exception and goes on to its 5 s ``SIGALRM``);
* every other check (:func:`dgrpo.rewards.math.answers_match`, the math reward's own, unchanged) runs
  in one long-lived worker process, started on first use. The worker raises :class:`CheckTimeout` (a
  ``BaseException``, which math-verify's ``except Exception`` does not swallow, raised again every
  0.1 s until it escapes) after :data:`CPU_LIMIT_S` seconds of its own CPU time (``ITIMER_VIRTUAL``:
  CPU, not wall time, so a loaded machine never fails an honest check); and the kernel kills it
  (``RLIMIT_CPU``, ``SIGXCPU``: no handler, so C code that never returns to Python is killed too) after
  :data:`HARD_CPU_S` seconds of CPU in one check; it keeps at most :data:`MEMORY_LIMIT_MB` of address
  space;
* the host waits at most :data:`WALL_LIMIT_S` for an answer, then kills the worker (``SIGKILL``);
  a worker killed either way counts the answer as not matching, and a new worker is started for the
  next check;
* the worker's logging is off and its stderr discarded: math-verify logs the text it could not parse,
  and that text is the program's.

Callers pass only capped text (:data:`dgrpo.rewards.code.MAX_ANSWER_CHARS`).
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import re
import select
import subprocess
import sys
import threading

from dgrpo.text.fold import rendered

CPU_LIMIT_S = 1.0  # CPU seconds of one check in the worker before CheckTimeout is raised in it
HARD_CPU_S = 3  # CPU seconds of one check before the kernel kills the worker (RLIMIT_CPU: whole seconds)
MAX_EXPONENT_DIGITS = 4  # an exponent that may reach 10**4 (digits of its numbers, summed) is refused
WALL_LIMIT_S = 10.0  # wall seconds the host waits for one check before killing the worker
START_LIMIT_S = 120.0  # wall seconds the worker may take to start (imports math-verify and sympy)
MEMORY_LIMIT_MB = 2048

log = logging.getLogger(__name__)

_WORKER = f"""
import json, logging, math, resource, signal, sys
resource.setrlimit(resource.RLIMIT_AS, ({MEMORY_LIMIT_MB} << 20, {MEMORY_LIMIT_MB} << 20))
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
logging.disable(logging.CRITICAL)
from dgrpo.rewards.math import answers_match

class CheckTimeout(BaseException):  # not an Exception: math-verify's "except Exception" lets it through
    pass

def _stop(signum, frame):
    raise CheckTimeout("answer check CPU limit")

def _cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime

signal.signal(signal.SIGVTALRM, _stop)
answers_match("1", "1")  # import math-verify's parsers now, not inside the first check
print("ready", flush=True)
for line in sys.stdin:
    predicted, oracle = json.loads(line)
    soft, hard = math.ceil(_cpu()) + {HARD_CPU_S}, resource.getrlimit(resource.RLIMIT_CPU)[1]
    soft = soft if hard == resource.RLIM_INFINITY else min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))  # SIGXCPU, not handled: the kernel ends the worker
    signal.setitimer(signal.ITIMER_VIRTUAL, {CPU_LIMIT_S}, 0.1)  # raised again until it escapes
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


# Tokens of an answer line: numbers (separators and an exponent included), power operators (a call of
# pow or exp counts as one), brackets, names (LaTeX commands included), and any other character.
_TOKEN = re.compile(r"(?P<num>(?:\d[\d,]*(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)|(?P<pow>\*\*|\^|\\?(?:pow|Pow|exp)\b)"
                    r"|(?P<open>[({\[])|(?P<close>[)}\]])|(?P<name>\\?[^\W\d]+)|(?P<other>\S)")


def _digits(number: str) -> int:
    """Decimal digits of the integer part of a number token, its exponent included: ``"2.5e7"`` → 8."""
    mantissa, _, exponent = number.lower().partition("e")
    whole = mantissa.split(".")[0].replace(",", "").lstrip("0")
    if len(exponent.lstrip("+-")) > 6:
        return 10 ** 6
    return len(whole) + max(0, int(exponent or 0))


def power_bomb(text: str) -> str | None:
    """Why ``text`` must not reach sympy (a power tower or a huge exponent), or None.

    Pure Python, microseconds on a capped line (:data:`dgrpo.rewards.code.MAX_ANSWER_CHARS`).

    Refused: a power whose exponent or base holds another power, or that is followed by one
    (``2**2**2**40``, ``9^9^9^9``, ``10^{10^{10}}``, ``(2**99)**99``, ``2**(2**40)``, ``pow(2, 2**40)``),
    and an exponent whose numbers have more than :data:`MAX_EXPONENT_DIGITS` digits in all (so it may
    reach 10**4: ``2**99999999``, ``10^{10000}``, ``2**(99*99*99)``, ``2^{1e9}``). ``2^{10}``,
    ``10^{-6}``, ``x^2 + y^2``, ``2^{1/2}``, ``1.5e23`` pass. Sympy's other costly functions are not
    matched by math-verify's answer patterns (tested: factorial, binomial, primepi, nextprime).
    """
    tokens = [(m.lastgroup, m[0]) for m in _TOKEN.finditer(text)]
    pair, stack = {}, []
    for i, (kind, _) in enumerate(tokens):
        if kind == "open":
            stack.append(i)
        elif kind == "close" and stack:
            pair[stack[-1]] = i
            pair[i] = stack.pop()
    n = len(tokens)
    for i, (kind, _) in enumerate(tokens):
        if kind != "pow":
            continue
        if i and tokens[i - 1][0] == "close" and i - 1 in pair:  # the base is a bracket group
            if any(k == "pow" for k, _ in tokens[pair[i - 1]:i - 1]):
                return "a power of a power"
        j = i + 1
        while j < n and tokens[j][1] in "+-":
            j += 1
        if j == n:
            continue
        end = pair.get(j, n - 1) if tokens[j][0] == "open" else j
        while tokens[j][0] in ("name", "pow") and end + 1 < n and tokens[end + 1][0] == "open":
            end = pair.get(end + 1, n - 1)  # \frac{1}{2}, pow(2, 3)
        exponent = tokens[j:end + 1]
        if any(k == "pow" for k, _ in exponent) or (end + 1 < n and tokens[end + 1][0] == "pow"):
            return "a power tower"
        if sum(_digits(t) for k, t in exponent if k == "num") > MAX_EXPONENT_DIGITS:
            return f"an exponent that may reach 10**{MAX_EXPONENT_DIGITS}"
    return None


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

    An answer :func:`power_bomb` refuses is read again as rendered (:func:`dgrpo.text.fold.rendered`, as
    the reward reads it: ``**13**`` is 13 in bold, not a power); when that passes, the worker checks the
    rendered text.

    Returns:
        Its verdict; False when the check ran out of time or memory, and at once, without the worker,
        when the answer is a power tower or has a huge exponent (:func:`power_bomb`).

    Raises:
        ValueError: the oracle answer is not a number (a data error, as from ``answers_match``).
        RuntimeError: the worker could not start.
    """
    if power_bomb(predicted) is not None:
        text = rendered(predicted)  # (Markdown bold, "**13**", is no power: the reward reads it rendered too)
        if text == predicted or power_bomb(text) is not None:
            return False
        predicted = text  # (the worker reads what was checked: "10 **9** 9" reaches it as "10 9 9")
    return _worker.check(predicted, oracle)
