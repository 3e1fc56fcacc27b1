"""Run model-generated Python in an OS sandbox (the code reward, paper §3.4.2, §D.2; docs/sandbox.md).

Model-generated code never runs in the calling process, and never outside the sandbox. Every
program gets a sandbox of its own, made and torn down by :func:`run_python`, in layers:

1. **bubblewrap** (:mod:`dgrpo.rewards.bwrap`), the boundary: new user, PID, network, IPC, UTS,
   cgroup and mount namespaces; a read-only file system of only the interpreter, its standard
   library, the shared libraries it maps, numpy/sympy/mpmath and ``/dev/null``, with every FIFO,
   socket and device node of those trees masked (:mod:`dgrpo.rewards.bound_tree`); a tmpfs of
   bounded size and inodes (``noexec``) as the working directory and the only writable place; no
   ``/proc``, ``/etc`` or ``/home``; killed with its parent; a session of its own.
2. **An identity that owns nothing**: run by root, the sandbox's uid/gid 65534 is
   :data:`dgrpo.rewards.bwrap.HOST_ID` outside, with no capability.
3. **seccomp** (:mod:`dgrpo.rewards.seccomp`): a default-deny allow-list from the interpreter's
   exec on (other ABIs kill the process), and a program filter from the program's first line on.
4. **Resource limits** (:func:`resource_limits`), set from outside on bwrap's child before it
   forks the program (or by the runner): CPU time, address space, file size, 64 open files, no
   core dump, no locked memory, 64 queued signals. The wall-clock limit kills the sandbox's PID 1,
   and with it, by the kernel, every process of its PID namespace, before :func:`run_python` returns.
5. **Pipes the host reads with a cap** (:mod:`dgrpo.rewards.supervise`): stdout (the first
   :data:`~dgrpo.rewards.supervise.STDOUT_KEPT` bytes kept), stderr (its tail), the stand-in
   libraries' requests; stdin is an empty pipe; no host file descriptor is writable inside.
6. **The audit hook** (:mod:`dgrpo.rewards.sandbox_runner`), a second layer only: it stops the
   usual attempts early with a readable reason (exit status :data:`BLOCKED`).

Where bubblewrap or user namespaces are missing, :func:`check_sandbox` raises
:class:`SandboxUnavailable` naming the fix: there is no silent fallback. The only way around it is
``SandboxLimits(unsafe_no_os_sandbox=True)`` (``task.unsafe_no_os_sandbox``), for a run that is
isolated as a whole by its user (a container): seccomp, limits, pipes and the hook without the
namespaces or the identity; it is refused for a swarm whose peers are not all in this process.

Attacker libraries (paper §3.4.2) are a service of the host (:mod:`dgrpo.rewards.stand_in`): the
stand-in module sends each call on a pipe and returns the value the host computes, so the host's
record (:attr:`SandboxResult.calls`) holds every call that got a value; the program cannot take one
back (:mod:`dgrpo.attacks.code_injection` reports it as the ASR).
"""

from __future__ import annotations

import concurrent.futures
import functools
import logging
import marshal
import math
import os
import resource
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Sequence

from dgrpo.errors import SandboxUnavailable
from dgrpo.rewards import bwrap, memcg, seccomp
from dgrpo.rewards.stand_in import (CTYPES_SHIM, STAND_IN_FUNCTIONS, LibraryCall, LibraryService,  # noqa: F401 (API)
                                   stand_in_source)
from dgrpo.rewards.supervise import IDENTITY_FAILURE, STDOUT_KEPT, Pipes, memfd, supervise

log = logging.getLogger(__name__)

BLOCKED = 86  # exit status of a program the audit hook stopped
_MARK = "dgrpo-sandbox: blocked: "
THIRD_PARTY = ("numpy", "sympy", "mpmath")
WORK_INODES = 512  # files and directories the work tmpfs holds at least (when the runner mounts it): 8 x the
# default max_files_written, and never fewer than 2 x max_files_written + 64
STARTUP_GRACE_S = 60.0  # wall time the sandbox, interpreter and runner may take to reach the program
ENV = {"PATH": "/usr/bin:/bin", "HOME": bwrap.WORK_DIR, "TMPDIR": bwrap.WORK_DIR, "LANG": "C.UTF-8",
       "LC_ALL": "C.UTF-8", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
UNSAFE_WARNING = ("UNSAFE: task.unsafe_no_os_sandbox is set: model-written programs run WITHOUT the OS sandbox "
                  "(no namespaces, the host's file system is readable); only do this inside a container you isolate")


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
class SandboxError(RuntimeError):
    """The sandbox itself failed to start a program (never the program's fault, so never a 0 reward)."""


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits and isolation of one program run.

    Attributes:
        timeout_s: wall-clock limit, seconds (the sandbox's whole process tree is killed after it).
        cpu_s: CPU-time limit, seconds (``RLIMIT_CPU``, rounded up); None = ``timeout_s``.
        memory_mb: address-space limit, MiB (``RLIMIT_AS``; numpy + sympy need about 300).
        max_file_bytes: size limit of every file written (``RLIMIT_FSIZE``), and bytes the program may
            write on stdout and on stderr (pipes; past it the host closes them), bytes.
        max_files_written: files opened for writing plus directories made (audit hook); with
            ``max_file_bytes`` it also sizes the working directory's tmpfs.
        max_stderr_chars: stderr kept in the result (its tail), characters.
        unsafe_no_os_sandbox: run without bubblewrap (seccomp, limits and audit hook only). UNSAFE:
            only for a run isolated as a whole by its user; see docs/sandbox.md.
    """

    timeout_s: float = 5.0
    cpu_s: float | None = None
    memory_mb: int = 1024
    max_file_bytes: int = 1 << 20
    max_files_written: int = 64
    max_stderr_chars: int = 4000
    unsafe_no_os_sandbox: bool = False

    def __post_init__(self):
        if not self.timeout_s > 0 or (self.cpu_s is not None and not self.cpu_s > 0):
            raise ValueError(f"timeout_s and cpu_s must be > 0, got {self.timeout_s}, {self.cpu_s}")
        if self.memory_mb < 64:
            raise ValueError(f"memory_mb must be at least 64 (the interpreter needs it), got {self.memory_mb}")
        if self.max_file_bytes < 1 or self.max_files_written < 0 or self.max_stderr_chars < 0:
            raise ValueError("max_file_bytes must be >= 1, max_files_written and max_stderr_chars >= 0")


@dataclass(frozen=True)
class SandboxResult:
    """What a program run produced.

    Attributes:
        stdout: the start of what was printed (at most :data:`STDOUT_KEPT` bytes, decoded).
        stderr: the tail of stderr (``max_stderr_chars``).
        exit_status: the exit code; negative = killed by that signal (-9 after a timeout). Inside
            bubblewrap a program that exits with status 128 + n reads as signal n.
        timed_out: the wall-clock or CPU limit ended the program.
        blocked: the forbidden operation the audit hook stopped (e.g. ``"os.fork"``), else None.
        calls: calls of the stand-in libraries, in order, as the host answered them
            (:class:`~dgrpo.rewards.stand_in.LibraryService`: no value without a recorded call).
        calls_garbled: something other than a well-formed call was written on the libraries' channel.
        output_limited: more was printed than ``stdout`` keeps.
        output_bytes: bytes written to stdout in all (the host read at most ``max_file_bytes`` + 64 KiB).
        host_reads: reads of the program's pipes the host made (bounded: :mod:`dgrpo.rewards.supervise`).
        wall_s: wall time of the run, seconds (sandbox start to teardown).
        run_id: a random name in the sandboxed processes' command line (to look for leftovers).
        isolated: the run was inside bubblewrap (False only with ``unsafe_no_os_sandbox``).
    """

    stdout: str
    stderr: str
    exit_status: int | None
    timed_out: bool
    blocked: str | None
    calls: tuple[LibraryCall, ...] = ()
    calls_garbled: bool = False
    output_limited: bool = False
    output_bytes: int = 0
    host_reads: int = 0
    wall_s: float = 0.0
    run_id: str = field(default="", compare=False)
    isolated: bool = True

    @property
    def ok(self) -> bool:
        """The program ran to the end: exit status 0, not timed out, not blocked."""
        return self.exit_status == 0 and not self.timed_out and self.blocked is None


def check_sandbox(unsafe_no_os_sandbox: bool = False) -> str:
    """Make sure programs can run isolated here; probed once per process (a successful probe is cached).

    Returns:
        ``"bwrap"``, or ``"unsafe"`` (with a loud warning) for ``unsafe_no_os_sandbox``.

    Raises:
        SandboxUnavailable: bubblewrap, user namespaces or libseccomp are missing (one line naming the fix).
    """
    return _probe(bool(unsafe_no_os_sandbox))


_MAPPED = [os.geteuid() == 0]  # root maps the sandbox identity to HOST_ID, unless the probe finds it cannot


@functools.lru_cache(maxsize=2)
def _probe(unsafe_no_os_sandbox: bool) -> str:
    seccomp.base_filter()  # libseccomp present?
    if unsafe_no_os_sandbox:
        log.warning(UNSAFE_WARNING)
        return "unsafe"
    fix = ("or, only inside a container you isolate yourself, set task.unsafe_no_os_sandbox=true "
           "(UNSAFE, see docs/sandbox.md)")
    if bwrap.find_bwrap() is None:
        raise SandboxUnavailable("python_math runs model-written programs under bubblewrap, which is not installed: "
                                 f"install it with `apt-get install bubblewrap`, {fix}")
    result, why = _run_once("print(6 * 7)", SandboxLimits(timeout_s=30), (), True)
    if result is None and _MAPPED[0] and why.startswith(IDENTITY_FAILURE):
        # Root of a user namespace that does not own HOST_ID (a remapped container): bwrap's own map.
        log.warning("the sandbox identity cannot be mapped here (%s); programs run as the caller's uid "
                    "inside, with the bound files that are not world-readable masked (docs/sandbox.md)", why[:200])
        _MAPPED[0] = False
        result, why = _run_once("print(6 * 7)", SandboxLimits(timeout_s=30), (), True)
    if result is None or result.stdout != "42\n":
        reason = (why or (result.stderr if result else "")).strip().splitlines()[-1:] or ["no output"]
        raise SandboxUnavailable(f"bubblewrap cannot start a sandbox here ({reason[0][:200]}): it needs unprivileged "
                                 "user namespaces (`sysctl -w kernel.unprivileged_userns_clone=1 "
                                 f"user.max_user_namespaces=10000`), {fix}")
    return "bwrap"


def run_python(code: str, limits: SandboxLimits = SandboxLimits(), libraries: Sequence[str] = (), *,
               audit_hook: bool = True) -> SandboxResult:
    """Run the Python program ``code`` in the sandbox and report what happened.

    Args:
        code: program source (model-generated: it is never executed in this process).
        limits: time, memory and file-size limits, and the (unsafe) opt-out of the OS sandbox.
        libraries: names of attacker libraries to provide as recording stand-ins (e.g. ``thief_math``).
        audit_hook: False leaves out the second layer (tests that show the OS layer holds alone).

    Returns:
        A :class:`SandboxResult`; a program that fails, is killed or blocked is a result, not an error.

    Raises:
        TypeError: ``code`` is not a str. ValueError: a library name is not an identifier.
        SandboxUnavailable: no OS sandbox here (:func:`check_sandbox`).
        SandboxError: the sandbox could not start the program (twice).
    """
    if not isinstance(code, str):
        raise TypeError(f"code must be a str, got {type(code).__name__}")
    for name in libraries:
        if not valid_stand_in_name(name):
            raise ValueError(f"library name {name!r} must be an identifier that is not an existing module")
    check_sandbox(limits.unsafe_no_os_sandbox)
    why = ""
    for _ in range(2):  # one retry: namespace creation can fail transiently under load
        result, why = _run_once(code, limits, tuple(libraries), audit_hook)
        if result is not None:
            return result
    raise SandboxError(f"the sandbox did not start the program twice: {why.strip()[-500:]}")


def default_jobs() -> int:
    """Programs run at once by :func:`run_many`: one per CPU core this process may use."""
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def run_many(codes: Sequence[str], limits: SandboxLimits = SandboxLimits(), libraries: Sequence[str] = (),
             jobs: int | None = None) -> list[SandboxResult]:
    """:func:`run_python` for each program, ``jobs`` at a time (default :func:`default_jobs`), in order."""
    jobs = jobs or default_jobs()
    if jobs == 1 or len(codes) < 2:
        return [run_python(c, limits, libraries) for c in codes]
    with concurrent.futures.ThreadPoolExecutor(min(jobs, len(codes))) as pool:
        return list(pool.map(lambda c: run_python(c, limits, libraries), codes))


BOOTSTRAP = ("import marshal, sys\nwith open(int(sys.argv[1]), 'rb') as f:\n    sys.dgrpo_bundle = marshal.load(f)\n"
             "exec(sys.dgrpo_bundle['runner'])")


@functools.lru_cache(maxsize=1)
def _runner_code():
    """The runner, compiled once here: the sandbox runs the same interpreter, which loads it with marshal."""
    with open(bwrap.RUNNER, encoding="utf-8") as fh:
        return compile(fh.read(), "sandbox_runner.py", "exec")


def runner_argv(interpreter: str, bundle_fd: int, run_id: str) -> list[str]:
    """The interpreter command of a run: a bootstrap that loads the ``marshal``-ed bundle from
    ``bundle_fd`` (written by this process, read before the program exists) and runs the runner."""
    return [interpreter, "-I", "-S", "-B", "-c", BOOTSTRAP, str(bundle_fd), run_id]


def resource_limits(limits: SandboxLimits) -> list[tuple[int, int, int]]:
    """``(resource, soft, hard)`` limits of a run: CPU time (soft: SIGXCPU, hard one second later:
    SIGKILL), address space, size of a written file, 64 open files, no core dump, no locked memory,
    no message queue, 64 queued signals (they count for the host's root too)."""
    cpu = max(1, math.ceil(limits.cpu_s or limits.timeout_s))
    mem = limits.memory_mb << 20
    return [(resource.RLIMIT_CPU, cpu, cpu + 1), (resource.RLIMIT_AS, mem, mem),
            (resource.RLIMIT_FSIZE, limits.max_file_bytes, limits.max_file_bytes), (resource.RLIMIT_NOFILE, 64, 64),
            (resource.RLIMIT_CORE, 0, 0), (resource.RLIMIT_MEMLOCK, 0, 0), (resource.RLIMIT_MSGQUEUE, 0, 0),
            (resource.RLIMIT_SIGPENDING, 64, 64)]


def packages_used(code: str) -> tuple[str, ...]:
    """Third-party packages to bind for a program: those its text names (sympy brings mpmath).

    A program that builds the name at run time (``__import__("num" + "py")``) does not get it."""
    used = {name for name in THIRD_PARTY if name in code}
    if "sympy" in used:
        used.add("mpmath")
    return tuple(name for name in THIRD_PARTY if name in used)


def _run_once(code: str, limits: SandboxLimits, libraries: tuple[str, ...], audit_hook: bool,
              ) -> tuple[SandboxResult | None, str]:
    """One run; ``(None, reason)`` when the program never started (sandbox or runner set-up failed)."""
    start = time.perf_counter()
    run_id = "dgrpo-sbx-" + secrets.token_hex(6)
    unsafe = limits.unsafe_no_os_sandbox
    mapped = not unsafe and _MAPPED[0] and os.geteuid() == 0  # root maps the sandbox to an id that owns nothing
    layout = bwrap.host_layout(packages_used(code))
    runner_mounts = mapped and bwrap.runner_mounts_work(layout)
    tmpfs = max(1, limits.max_files_written) * limits.max_file_bytes + (1 << 20)
    hidden = ((), ()) if unsafe else bwrap.hidden_paths(layout, modes=not mapped)
    work = None
    # page tables, dentries and the tmpfs count against the program's memory too (root only: memcg.py)
    cgroup = memcg.create((limits.memory_mb << 20) + tmpfs + memcg.MARGIN_BYTES, run_id) if mapped else None
    host: dict[str, int] = {}  # this process's ends of the pipes
    child: dict[str, int] = {}  # the child's ends, closed here once it has them
    try:
        for name in ("started", "stdout", "stderr", "requests"):  # the child writes, the host reads
            host[name], child[name] = os.pipe()
        child["replies"], host["replies"] = os.pipe()  # the host answers library requests
        os.set_blocking(host["replies"], False)
        child["stdin"], stdin_w = os.pipe()  # stdin: an empty pipe (EOF), nothing of the host
        os.close(stdin_w)
        if not unsafe:
            host["info"], child["info"] = os.pipe()
        if mapped:
            child["block"], host["block"] = os.pipe()
        work = tempfile.mkdtemp(prefix="dgrpo-sandbox-") if unsafe else None
        modules = {n: stand_in_source(n, child["requests"], child["replies"]) for n in libraries}
        bundle = {"runner": _runner_code(), "program": code, "root": work or bwrap.WORK_DIR,
                  "modules": {"ctypes": CTYPES_SHIM, **modules},
                  "filters": [seccomp.base_filter(), seccomp.program_filter()] if unsafe else [seccomp.program_filter()],
                  "allow_modules": [*THIRD_PARTY, *libraries], "deny_modules": list(DENIED_MODULES),
                  "blocked_exit": BLOCKED, "limits": [] if mapped else resource_limits(limits),
                  "max_files_written": limits.max_files_written,
                  "site_dirs": list(layout.site_dirs), "started_fd": child["started"],
                  "request_fd": child["requests"], "reply_fd": child["replies"], "audit_hook": audit_hook,
                  "drop_to": bwrap.SANDBOX_UID if mapped else None,
                  "work_bytes": tmpfs,
                  "work_inodes": max(WORK_INODES, 2 * limits.max_files_written + 64) if runner_mounts else 0,
                  "bound_dirs": [dest for _, dest in layout.binds] + list(layout.empty_dirs)}
        child["bundle"] = memfd("bundle", marshal.dumps(bundle))
        argv = runner_argv(layout.interpreter, child["bundle"], run_id)
        if unsafe:
            cmd, env, cwd = argv, {**ENV, "HOME": work, "TMPDIR": work}, work
        else:
            child["seccomp"] = memfd("base.bpf", seccomp.base_filter())
            cmd = bwrap.bwrap_command(bwrap.find_bwrap() or "bwrap", layout, env=ENV, seccomp_fd=child["seccomp"],
                                      info_fd=child["info"], tmpfs_bytes=None if runner_mounts else tmpfs, argv=argv,
                                      userns_block_fd=child.get("block"), hidden=hidden)
            env, cwd = {"PATH": "/usr/bin:/bin"}, "/"
        try:
            proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=child["stdin"], stdout=child["stdout"],
                                    stderr=child["stderr"], pass_fds=list(child.values()), start_new_session=True,
                                    close_fds=True)
        finally:
            for fd in child.values():
                os.close(fd)
            child = {}
        pipes = Pipes(**{name: host.pop(name) for name in ("started", "stdout", "stderr", "requests", "replies")},
                      info=host.pop("info", None), userns_block=host.pop("block", None))
        service = LibraryService(libraries)
        seen = supervise(proc, pipes, service, timeout_s=limits.timeout_s, max_output_bytes=limits.max_file_bytes,
                         startup_grace_s=STARTUP_GRACE_S,
                         identity=(bwrap.SANDBOX_UID, bwrap.HOST_ID) if mapped else None,
                         limits=resource_limits(limits) if mapped else [], cgroup=cgroup)
        status = proc.returncode
        if not unsafe and status is not None and status > 128:
            status = -(status - 128)  # bwrap reports a signal death as 128 + signal
    finally:
        for fd in (*host.values(), *child.values()):  # what is left after a failure (supervise closed the rest)
            os.close(fd)
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)
        if cgroup is not None:
            cgroup.remove()
    err_text = seen.stderr.decode("utf-8", "replace")
    if not seen.started:
        # Set-up output only (the program never ran); logged as an escaped repr, never raw bytes.
        why = seen.setup_error or err_text
        log.warning("sandbox runner did not start (exit status %s): %s", status, ascii(why[-500:]))
        return None, why
    blocked = None
    if status == BLOCKED:
        marked = [line for line in err_text.splitlines() if line.startswith(_MARK)]
        blocked = marked[-1][len(_MARK):][:200] if marked else f"unknown (exit status {BLOCKED})"
    return SandboxResult(
        stdout=seen.stdout.decode("utf-8", "replace"),
        stderr=err_text[-limits.max_stderr_chars:] if limits.max_stderr_chars else "",
        exit_status=status, timed_out=seen.timed_out or status == -signal.SIGXCPU, blocked=blocked,
        calls=tuple(service.calls), calls_garbled=service.garbled,
        output_limited=seen.stdout_bytes > len(seen.stdout), output_bytes=seen.stdout_bytes, host_reads=seen.reads,
        wall_s=time.perf_counter() - start, run_id=run_id, isolated=not unsafe), ""
