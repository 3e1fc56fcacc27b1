"""The sandbox's two seccomp filters, compiled once with libseccomp into BPF (see docs/sandbox.md).

* :func:`base_filter` is **default-deny**: an allow-list (:data:`ALLOWED_GROUPS`, :data:`ALLOWED_IF`,
  :data:`ALLOWED_MASKED`: the one place that says which system calls a program may make, and why,
  listed again in docs/sandbox.md) measured from honest solver
  programs (``benchmarks/sandbox_syscalls.py`` traces tests/rewards/honest_programs.py and the
  sampled solutions); every other call fails with ``EPERM`` — among them every call newer than this
  libseccomp knows, whatever the kernel adds next. Flushes to disk (:data:`DONE_WITHOUT_RUNNING`: ``fsync``
  and its kin) return 0 without reaching the kernel. A call of another ABI (i386 through ``int 0x80``,
  x32 through a number with bit 30 set) kills the process. ``bwrap --seccomp`` loads it right before
  it executes the interpreter, so it also holds what the runner needs before the program starts
  (``execve`` of the interpreter, dropping to the sandbox identity, loading the second filter).
* :func:`program_filter`, loaded by the runner right before the program's first line, refuses those
  set-up calls again (:data:`PROGRAM_REFUSED`): no exec, no identity change, no ``prctl``.

Refused calls fail with ``EPERM`` and never kill (only another ABI does), so a program sees an
ordinary ``OSError`` and scores 0 through its exit status. Nothing creates a process or a thread:
``clone``, ``clone3``, ``fork`` and ``vfork`` are not on the list. Arguments are compared as the
64-bit registers the kernel receives, so a value with stray high bits matches no allowed one.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import os
import platform
import tempfile

from dgrpo.errors import SandboxUnavailable

# System calls allowed whatever their arguments, in groups: why a solver (or the runner) needs them.
ALLOWED_GROUPS = (
    ("memory: the allocator, the loader, numpy/OpenBLAS (all of it counted by RLIMIT_AS; mmap: ALLOWED_MASKED)",
     "brk munmap mremap mprotect madvise mbind"),
    ("reading the bound read-only tree (openat: ALLOWED_MASKED)", "read pread64 close lseek fstat newfstatat access getdents64 "
     "getcwd readlink listxattr"),
    ("files of the work tmpfs (its size and inode count bound what is written); stdout and stderr are pipes",
     "write mkdir rmdir unlink unlinkat rename ftruncate chmod utimensat sendfile"),
    ("sympy imports selectors", "epoll_create1"),
    ("time: the vDSO answers most clock reads without a system call; these are its fallbacks, sleep, and "
     "timeouts a program sets itself", "clock_gettime clock_getres gettimeofday time clock_nanosleep alarm "
     "setitimer"),
    ("signals of this process", "rt_sigaction rt_sigprocmask rt_sigreturn"),
    ("who and where am I (read only), and random bytes", "getpid getppid gettid getuid geteuid getgid getegid "
     "getgroups getresuid getresgid uname sched_getaffinity getrandom"),
    ("process start-up and exit; bwrap's PID 1 waits for the program under this filter too (a program has no "
     "child to wait for)", "arch_prctl set_tid_address set_robust_list rseq restart_syscall exit_group wait4"),
    ("the runner's set-up, refused again by the program filter: bwrap executes the interpreter, the runner "
     "closes inherited descriptors, moves into the work directory and drops to the sandbox identity",
     "execve close_range chdir setresuid setresgid setgroups"),
)
ALLOWED = tuple(name for _, names in ALLOWED_GROUPS for name in names.split())

# Allowed only with these arguments: name -> (index of the argument, values allowed, why).
_MAP_REFUSED = 0x40000 | 0x2000  # MAP_HUGETLB (the host's huge-page pool), MAP_LOCKED (pinned memory)
ALLOWED_IF = {
    "ioctl": (1, (0x5401, 0x5413, 0x5450, 0x5451, 0x5421, 0x541B),
              "TCGETS (isatty), TIOCGWINSZ, FIONCLEX, FIOCLEX, FIONBIO, FIONREAD; never TIOCSTI and the like"),
    "fcntl": (1, (0, 1, 2, 3, 1030),
              "F_DUPFD, F_GETFD, F_SETFD, F_GETFL, F_DUPFD_CLOEXEC, and F_SETFL without O_DIRECT or O_ASYNC "
              "(SETFL_REFUSED); no locks, leases, F_NOTIFY, F_SETOWN/SIGIO or pipe resizing"),
    "prctl": (0, (38, 22), "PR_SET_NO_NEW_PRIVS and PR_SET_SECCOMP: the runner loads the program filter"),
    "prlimit64": (0, (0,), "limits of this process only (pid 0)"),
    "mount": (3, (2 | 4 | 8,), "the runner's work tmpfs (MS_NOSUID | MS_NODEV | MS_NOEXEC); needs a capability "
                               "only the runner has, and the program filter refuses it"),
    "futex": (1, (0, 1, 9, 10, 128, 129, 137, 138, 265, 393),
              "FUTEX_WAIT/WAKE(_BITSET)(_PRIVATE)(_CLOCK_REALTIME): glibc's locks; no PI or requeue operations"),
}
# F_SETFL (4) is allowed only with none of these flags: O_DIRECT puts a pipe in packet mode, where every
# write of the program, however small, costs the host a read of its own (stdout, stderr and the library
# channel are the host's pipes); O_ASYNC asks for SIGIO, which nothing here needs.
F_SETFL, SETFL_REFUSED = fcntl.F_SETFL, os.O_DIRECT | fcntl.FASYNC  # 0o60000 on x86-64
ALLOWED_MASKED = {"mmap": (3, _MAP_REFUSED, "any mapping but MAP_HUGETLB and MAP_LOCKED"),
                  "openat": (2, os.O_DIRECT, "any flags but O_DIRECT: a read past the page cache reaches the "
                                             "host's disk (libpython read O_DIRECT: 50k uncached disk reads)")}
# Answered 0 by the filter without reaching the kernel (SECCOMP_RET_ERRNO with errno 0): flushing to disk.
# An fsync of a bound host file (or of the directory) flushes the host's disk (~1,300 device flushes in 4 s);
# the program's own files live on a tmpfs, where a flush does nothing anyway, so an honest program that
# calls os.fsync (tempfile, sqlite, careful writers) sees the success it would have had.
DONE_WITHOUT_RUNNING = ("fsync", "fdatasync", "sync_file_range", "syncfs", "sync")
# Allowed by number, on x86-64 only: calls the kernel itself makes a traced process issue, newer than this
# libseccomp (2.5.4 knows neither name). When the host puts a uprobe or uretprobe on the interpreter or a
# library (an eBPF profiler), the kernel runs the probed process through a trampoline page that issues them;
# refused, the probed program would crash. The kernel lets them through every filter itself since early 2025
# (uretprobe, added in 6.11: the exception was backported to stable; uprobe came with its exception); listed
# here for a kernel without the exception. Issued from anywhere
# but the kernel's trampoline they do nothing: uretprobe kills the caller with SIGILL, uprobe fails ENXIO.
ALLOWED_NUMBERS = {"uretprobe": (335, "the kernel's uretprobe trampoline (Linux 6.11+); elsewhere: SIGILL"),
                   "uprobe": (336, "the kernel's uprobe trampoline (2025); elsewhere: ENXIO")}
# Not allowed, though every interpreter calls it: sysinfo tells the host's uptime, load, free memory and task
# count (no /proc inside). Its one caller is glibc 2.36's qsort (get_phys_pages), which only chooses between a
# merge sort with a buffer and an in-place quicksort with it: both sort. os.sysconf("SC_PHYS_PAGES") then
# gives a meaningless number; nothing in the honest programs reads it.
SIDE_CHANNELS_REFUSED = ("sysinfo",)
# Refused by the program filter, on top of the base filter: what only the runner's set-up needs.
PROGRAM_REFUSED = ("execve", "execveat", "prctl", "mount", "chdir", "setresuid", "setresgid", "setgroups")


def _seccomp():
    """The libseccomp bindings, or a one-line error naming the fix."""
    try:
        import pyseccomp
    except (ImportError, OSError) as err:  # pyseccomp raises when libseccomp.so.2 is missing
        raise SandboxUnavailable(
            f"the sandbox needs libseccomp ({err}): install it with `apt-get install libseccomp2` "
            "and `pip install pyseccomp` (both are in the README's setup)") from None
    return pyseccomp


def _number(sc, name: str) -> int:
    try:
        return sc.resolve_syscall(sc.Arch.NATIVE, name)
    except (OSError, ValueError):
        return -1


def _export(flt) -> bytes:
    """BPF program (``struct sock_filter`` array, 8 bytes per instruction) of a filter."""
    with tempfile.TemporaryFile() as fh:
        flt.export_bpf(fh)
        fh.seek(0)
        return fh.read()


@functools.lru_cache(maxsize=1)
def base_filter() -> bytes:
    """BPF of the default-deny filter ``bwrap --seccomp`` applies before executing the interpreter.

    Raises:
        SandboxUnavailable: libseccomp or its Python bindings are missing.
    """
    sc = _seccomp()
    flt = sc.SyscallFilter(sc.ERRNO(errno.EPERM))
    flt.set_attr(sc.Attr.ACT_BADARCH, sc.KILL_PROCESS)  # i386 and x32 system calls kill the process
    for name in ALLOWED:
        if _number(sc, name) >= 0:  # names this architecture lacks (time, alarm on some) are skipped
            flt.add_rule(sc.ALLOW, name)
    for name, (index, values, _) in ALLOWED_IF.items():
        for value in values:
            flt.add_rule(sc.ALLOW, name, sc.Arg(index, sc.EQ, value))
    for name, (index, mask, _) in ALLOWED_MASKED.items():
        flt.add_rule(sc.ALLOW, name, sc.Arg(index, sc.MASKED_EQ, mask, 0))
    for name in DONE_WITHOUT_RUNNING:
        if _number(sc, name) >= 0:
            flt.add_rule(sc.ERRNO(0), name)
    flt.add_rule(sc.ALLOW, "fcntl", sc.Arg(1, sc.EQ, F_SETFL), sc.Arg(2, sc.MASKED_EQ, SETFL_REFUSED, 0))
    if platform.machine() == "x86_64":
        for number, _ in ALLOWED_NUMBERS.values():
            flt.add_rule(sc.ALLOW, number)
    return _export(flt)


@functools.lru_cache(maxsize=1)
def program_filter() -> bytes:
    """BPF of the filter the runner loads right before the program: no exec, no identity change, no prctl.

    Raises:
        SandboxUnavailable: libseccomp or its Python bindings are missing.
    """
    sc = _seccomp()
    flt = sc.SyscallFilter(sc.ALLOW)
    flt.set_attr(sc.Attr.ACT_BADARCH, sc.KILL_PROCESS)
    for name in PROGRAM_REFUSED:
        if _number(sc, name) >= 0:
            flt.add_rule(sc.ERRNO(errno.EPERM), name)
    return _export(flt)


@functools.lru_cache(maxsize=1)
def allow_all_filter() -> bytes:
    """BPF that allows every native call (benchmarks/sandbox_syscalls.py measures with it)."""
    sc = _seccomp()
    flt = sc.SyscallFilter(sc.ALLOW)
    flt.set_attr(sc.Attr.ACT_BADARCH, sc.KILL_PROCESS)
    return _export(flt)
