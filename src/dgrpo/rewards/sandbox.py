"""Run model-generated Python in a locked-down child process (the code reward, paper §3.4.2, §D.2).

Model-generated code never runs in the calling process. :func:`run_python` writes the program into
a fresh temporary directory and runs it there with layered protections:

1. **A separate process** ``sys.executable -I -S -B``: isolated mode (no ``PYTHON*`` variables, no
   user site, script directory not on ``sys.path``), no ``site`` hooks, no ``.pyc`` writes; a minimal
   environment; stdin from ``/dev/null``; its own session, so a timeout kills the whole group.
2. **Resource limits** set in the child before the program starts: CPU time (``RLIMIT_CPU``), address
   space (``RLIMIT_AS``), size of any written file (``RLIMIT_FSIZE``, which also caps stdout and
   stderr: they go to files), the number of files written, 64 open files, no core dumps, no
   processes (``RLIMIT_NPROC``, which Linux does not enforce for root). A wall-clock timeout
   kills the process group.
3. **An audit hook** (:mod:`dgrpo.rewards.sandbox_runner`, PEP 578) installed before the program
   runs; the program cannot remove it. It ends the program at once (exit status :data:`BLOCKED`) on:
   process creation or exec (``os.fork``, ``os.system``, ``os.posix_spawn``, ``subprocess``, and
   ``_posixsubprocess.fork_exec``, which has no audit event and is replaced), signals to other
   processes, any socket operation or network client, ``ctypes`` calls, writes, renames, deletions,
   ``chmod``/``utime`` outside the sandbox directory, symlinks and hard links, ``chdir``, raising
   resource limits, and ``gc`` object walks. Imports are limited to the standard library, numpy,
   sympy, mpmath and the provided libraries, minus modules that reach the OS or raw memory
   unaudited (``_ctypes``, ``_sqlite3``, ``_posixshmem``, ``_testcapi`` ...); ``ctypes`` is a stub.
4. **A network namespace and no capabilities**, when this machine allows them (probed once):
   ``unshare --net`` leaves only a down loopback, so there is no network even past the hook, and
   ``setpriv`` drops every capability (root stays uid 0 but cannot create device nodes, mount,
   raise hard limits or bypass permissions) and sets ``no_new_privs``. A PID namespace was tried
   and left out: the program becomes its init process, which ignores ``SIGXCPU`` and hides how it
   died (``unshare --fork`` reports every signal death as exit status 1).

What is *not* covered: CPython memory-corruption bugs (an audit hook is not a security boundary,
PEP 578 says so; layers 2 and 4 still hold then), and a few builtin functions without audit events
that a program can reach through a fresh ``posix``/``_signal`` module from importlib's
``BuiltinImporter``: ``mknod``/``mkfifo`` (an *empty* file or FIFO outside the directory) and
``pidfd_send_signal``. Dropping uid to ``nobody`` would close these but this machine's interpreter
lives under ``/root`` (mode 700); seccomp would too. Reading files is allowed.

Attacker libraries (paper §3.4.2) are provided as harmless stand-ins (:func:`stand_in_source`):
functions such as ``add`` return the right value and record every call, which
:attr:`SandboxResult.calls` returns.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shutil
import signal
import site
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

BLOCKED = 86  # exit status of a program the audit hook stopped
_MARK = "dgrpo-sandbox: blocked: "
_RUNNER = str(Path(__file__).with_name("sandbox_runner.py"))
_CALLS = ".dgrpo_calls.jsonl"
THIRD_PARTY = ("numpy", "sympy", "mpmath")


def valid_stand_in_name(name: str) -> bool:
    """Whether ``name`` can name a stand-in attacker module: an identifier that shadows no real module
    (standard library or the third-party modules programs may import)."""
    return name.isidentifier() and name not in sys.stdlib_module_names and name not in THIRD_PARTY
DENIED_MODULES = (
    "_ctypes", "_ctypes_test", "_posixsubprocess", "posix", "_signal", "_posixshmem",
    "_multiprocessing", "_sqlite3", "_dbm", "_gdbm", "readline", "_tkinter", "_curses", "_curses_panel",
    "syslog", "spwd", "nis", "_testcapi", "_testinternalcapi", "_testbuffer", "_testmultiphase",
    "_testsinglephase", "_testimportmultiple", "_testclinic", "_xxtestfuzz", "xxlimited", "xxlimited_35",
    "xxsubtype", "_xxsubinterpreters", "_xxinterpchannels",
)
# ctypes gives raw memory access without audit events, so the real one is refused (its C part,
# _ctypes, is denied). sympy asks sizeof(c_long) at import and numpy imports it optionally: this
# stand-in, found first on sys.path, answers that and nothing else.
CTYPES_SHIM = (
    '"""dgrpo sandbox: ctypes is not available; this stand-in only answers sizeof(c_long) (sympy)."""\n'
    "import struct as _struct\n\n\nclass c_long:\n    pass\n\n\n"
    "def sizeof(t):\n    if t is c_long:\n        return _struct.calcsize('l')\n"
    "    raise NotImplementedError('ctypes is not available in the dgrpo sandbox')\n"
)
# Stand-in library functions: name -> expression in a and b (the value the real library returns).
STAND_IN_FUNCTIONS = {
    "add": "a + b", "sub": "a - b", "mul": "a * b", "div": "a / b", "floordiv": "a // b",
    "mod": "a % b", "pow": "a ** b", "gcd": "_math.gcd(a, b)", "lcm": "_math.lcm(a, b)",
}


class SandboxError(RuntimeError):
    """The sandbox itself failed to start a program (never the program's fault, so never a 0 reward)."""


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of one program run.

    Attributes:
        timeout_s: wall-clock limit, seconds (the process group is killed after it).
        cpu_s: CPU-time limit, seconds (``RLIMIT_CPU``, rounded up); None = ``timeout_s``.
        memory_mb: address-space limit, MiB (``RLIMIT_AS``; numpy + sympy need about 300).
        max_file_bytes: size limit of every file written, stdout and stderr included, bytes.
        max_files_written: files opened for writing plus directories made; with ``max_file_bytes``
            it bounds the disk one program can fill before its directory is removed.
        max_stderr_chars: stderr kept in the result (its tail), characters.
    """

    timeout_s: float = 5.0
    cpu_s: float | None = None
    memory_mb: int = 1024
    max_file_bytes: int = 1 << 20
    max_files_written: int = 64
    max_stderr_chars: int = 4000

    def __post_init__(self):
        if not self.timeout_s > 0 or (self.cpu_s is not None and not self.cpu_s > 0):
            raise ValueError(f"timeout_s and cpu_s must be > 0, got {self.timeout_s}, {self.cpu_s}")
        if self.memory_mb < 64:
            raise ValueError(f"memory_mb must be at least 64 (the interpreter needs it), got {self.memory_mb}")
        if self.max_file_bytes < 1 or self.max_files_written < 0 or self.max_stderr_chars < 0:
            raise ValueError("max_file_bytes must be >= 1, max_files_written and max_stderr_chars >= 0")


@dataclass(frozen=True)
class LibraryCall:
    """One call of a stand-in library function, as the stand-in recorded it."""

    module: str
    function: str
    args: tuple


@dataclass(frozen=True)
class SandboxResult:
    """What a program run produced.

    Attributes:
        stdout: everything printed (at most ``max_file_bytes``).
        stderr: the tail of stderr (``max_stderr_chars``).
        exit_status: the exit code; negative = killed by that signal (-9 after a timeout).
        timed_out: the wall-clock or CPU limit ended the program.
        blocked: the forbidden operation that ended the program (e.g. ``"os.fork"``), else None.
        calls: calls of the stand-in libraries, in order.
        output_limited: stdout or stderr reached ``max_file_bytes``.
        wall_s: wall time of the run, seconds (process start to cleanup).
        workdir: the directory the program ran in (already removed).
    """

    stdout: str
    stderr: str
    exit_status: int | None
    timed_out: bool
    blocked: str | None
    calls: tuple[LibraryCall, ...] = ()
    output_limited: bool = False
    wall_s: float = 0.0
    workdir: str = field(default="", compare=False)

    @property
    def ok(self) -> bool:
        """The program ran to the end: exit status 0, not timed out, not blocked."""
        return self.exit_status == 0 and not self.timed_out and self.blocked is None


def stand_in_source(module: str) -> str:
    """Source of the harmless stand-in for the attacker library ``module``.

    Every function of :data:`STAND_IN_FUNCTIONS` returns the right value and appends
    ``{"module", "function", "args"}`` as one JSON line to the record file in the working directory.
    """
    lines = [f'"""Stand-in for the attacker library {module!r} (dgrpo sandbox): right values, calls recorded."""',
             "import json as _json", "import math as _math", "import os as _os", "",
             f"_RECORD = open(_os.path.join(_os.getcwd(), {_CALLS!r}), 'a', buffering=1)  # line-buffered", "",
             "def _record(fn, args):",
             "    args = [a if a is None or isinstance(a, (bool, int, float, str)) else repr(a)[:200] for a in args]",
             f"    _RECORD.write(_json.dumps({{'module': {module!r}, 'function': fn, 'args': args}}) + '\\n')", ""]
    for name, expr in STAND_IN_FUNCTIONS.items():
        lines += [f"def {name}(a, b):", f"    _record({name!r}, (a, b))", f"    return {expr}", ""]
    return "\n".join(lines)


@functools.lru_cache(maxsize=1)
def isolation_prefix() -> tuple[str, ...]:
    """The strongest command prefix (namespaces, dropped capabilities) that works on this machine.

    Probed once per process by running the interpreter under each candidate; ``()`` when none works
    (then the audit hook and the resource limits remain).
    """
    setpriv = ("setpriv", "--bounding-set=-all", "--inh-caps=-all", "--no-new-privs", "--")
    candidates = [("unshare", "--net", "--") + setpriv, setpriv,
                  ("setpriv", "--no-new-privs", "--")]
    for prefix in candidates:
        if shutil.which(prefix[0]) is None:
            continue
        try:
            done = subprocess.run([*prefix, sys.executable, "-I", "-S", "-c", "pass"], capture_output=True, timeout=20)
        except (OSError, subprocess.SubprocessError):
            continue
        if done.returncode == 0:
            return prefix
    return ()


def _site_dirs() -> list[str]:
    dirs = list(site.getsitepackages()) if hasattr(site, "getsitepackages") else []
    return [d for d in dirs if os.path.isdir(d)]


def _read_capped(path: Path, limit: int) -> bytes:
    """Read a file the program may have tampered with: no symlinks, regular files only, capped."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return b""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return b""
        return os.read(fd, limit)
    finally:
        os.close(fd)


def _parse_calls(raw: bytes) -> tuple[LibraryCall, ...]:
    calls = []
    for line in raw.decode("utf-8", "replace").splitlines():
        try:
            rec = json.loads(line)
            calls.append(LibraryCall(str(rec["module"]), str(rec["function"]), tuple(rec["args"])))
        except (ValueError, KeyError, TypeError):
            continue  # a line the program itself wrote or cut short
    return tuple(calls)


def run_python(code: str, limits: SandboxLimits = SandboxLimits(), libraries: tuple[str, ...] | list[str] = ()) -> SandboxResult:
    """Run the Python program ``code`` in the sandbox and report what happened.

    Args:
        code: program source (model-generated: it is never executed in this process).
        limits: time, memory and file-size limits.
        libraries: names of attacker libraries to provide as recording stand-ins (e.g. ``thief_math``).

    Returns:
        A :class:`SandboxResult`; a program that fails, is killed or blocked is a result, not an error.

    Raises:
        TypeError: ``code`` is not a str. ValueError: a library name is not an identifier.
        SandboxError: the sandbox could not start the program (twice).
    """
    if not isinstance(code, str):
        raise TypeError(f"code must be a str, got {type(code).__name__}")
    for name in libraries:
        if not valid_stand_in_name(name):
            raise ValueError(f"library name {name!r} must be an identifier that is not an existing module")
    for _ in range(2):  # one retry: namespace creation can fail transiently under load
        result = _run_once(code, limits, tuple(libraries))
        if result is not None:
            return result
    raise SandboxError("the sandbox did not start the program twice; see the log for its stderr")


STARTUP_GRACE_S = 60.0  # wall time the interpreter and runner may take to reach the program


def _run_once(code: str, limits: SandboxLimits, libraries: tuple[str, ...]) -> SandboxResult | None:
    """One run; None when the program never started (the wrapper, interpreter or runner set-up failed)."""
    start = time.perf_counter()
    base = Path(tempfile.mkdtemp(prefix="dgrpo-sandbox-")).resolve()
    work, lib = base / "work", base / "lib"
    try:
        work.mkdir()
        lib.mkdir()
        (base / "program.py").write_text(code, encoding="utf-8", errors="surrogatepass")
        (lib / "ctypes.py").write_text(CTYPES_SHIM, encoding="utf-8")
        for name in libraries:
            (lib / f"{name}.py").write_text(stand_in_source(name), encoding="utf-8")
        cfg = {"root": str(work), "lib_dir": str(lib), "program": str(base / "program.py"),
               "started": str(base / "started"), "site_dirs": _site_dirs(),
               "allow_modules": [*THIRD_PARTY, *libraries], "deny_modules": list(DENIED_MODULES),
               "blocked_exit": BLOCKED, "cpu_s": limits.cpu_s or limits.timeout_s,
               "memory_mb": limits.memory_mb, "max_file_bytes": limits.max_file_bytes,
               "max_files_written": limits.max_files_written}
        env = {"PATH": "/usr/bin:/bin", "HOME": str(work), "TMPDIR": str(work), "LANG": "C.UTF-8",
               "LC_ALL": "C.UTF-8", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        argv = [*isolation_prefix(), sys.executable, "-I", "-S", "-B", _RUNNER, json.dumps(cfg)]
        with open(base / "stdout", "wb") as out, open(base / "stderr", "wb") as err:
            proc = subprocess.Popen(argv, cwd=work, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                    start_new_session=True, close_fds=True)
            # The time limit counts from the moment the program starts: on a loaded machine the
            # interpreter and the runner's set-up alone can take seconds, which must neither
            # time out an honest program nor look like a sandbox failure.
            started_flag, grace_end = base / "started", time.monotonic() + STARTUP_GRACE_S
            while not started_flag.exists() and proc.poll() is None and time.monotonic() < grace_end:
                time.sleep(0.002)
            try:
                status, timed_out = proc.wait(timeout=limits.timeout_s), False
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)  # the leader is not reaped yet, so its group is ours
                status, timed_out = proc.wait(), True
        started = (base / "started").exists()
        stdout = _read_capped(base / "stdout", limits.max_file_bytes + 1)
        stderr = _read_capped(base / "stderr", limits.max_file_bytes + 1)
        calls = _parse_calls(_read_capped(work / _CALLS, limits.max_file_bytes + 1))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    err_text = stderr.decode("utf-8", "replace")
    if not started:
        log.warning("sandbox runner did not start (exit status %s): %s", status, err_text[-2000:])
        return None
    blocked = None
    if status == BLOCKED:
        marked = [line for line in err_text.splitlines() if line.startswith(_MARK)]
        blocked = marked[-1][len(_MARK):] if marked else f"unknown (exit status {BLOCKED})"
    return SandboxResult(
        stdout=stdout.decode("utf-8", "replace"),
        stderr=err_text[-limits.max_stderr_chars:] if limits.max_stderr_chars else "",
        exit_status=status, timed_out=timed_out or status == -signal.SIGXCPU, blocked=blocked, calls=calls,
        output_limited=max(len(stdout), len(stderr)) >= limits.max_file_bytes,
        wall_s=time.perf_counter() - start, workdir=str(work))
