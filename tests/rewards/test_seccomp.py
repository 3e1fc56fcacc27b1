"""The seccomp filters: a default-deny allow-list, other ABIs killed, newer system calls refused.

Programs here make raw system calls through the real ctypes (tests/rewards/hostile_programs.py's
CTYPES preamble gets past the audit hook, which these runs leave out anyway): what answers is the
filter, or the kernel where the filter lets a call through.
"""

import errno
import platform
import signal
from pathlib import Path

import pytest

from dgrpo.rewards import sandbox, seccomp
from dgrpo.rewards.sandbox import SandboxLimits, run_python
from hostile_programs import CTYPES

LIMITS = SandboxLimits(timeout_s=20)
RAW = CTYPES + """def errno_of(nr, *args):
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    return 0 if r != -1 else ctypes.get_errno()
"""


def raw_errnos(calls: dict[str, tuple]) -> dict[str, int]:
    """errno of each raw system call ``name: (number, args...)`` made inside the sandbox (0: it succeeded)."""
    program = RAW + f"calls = {calls!r}\nprint({{k: errno_of(*v) for k, v in calls.items()}})"
    result = run_python(program, LIMITS, audit_hook=False)
    assert result.ok, result.stderr[-500:]
    return eval(result.stdout)  # noqa: S307 - a dict of ints printed by our own program


def test_the_allow_list_is_one_readable_place():
    import pyseccomp

    names = [*seccomp.ALLOWED, *seccomp.ALLOWED_IF, *seccomp.ALLOWED_MASKED]
    assert len(names) == len(set(names)), "each call is allowed in one place"
    assert all(pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, n) >= 0 for n in names)
    assert all(why.strip() for why, _ in seccomp.ALLOWED_GROUPS)
    assert all(entry[-1].strip() for entry in [*seccomp.ALLOWED_IF.values(), *seccomp.ALLOWED_MASKED.values()])
    page = (Path(__file__).resolve().parents[2] / "docs" / "sandbox.md").read_text()
    assert [n for n in names if f"`{n}`" not in page] == [], "docs/sandbox.md lists every allowed call"
    assert [n for n in seccomp.ALLOWED_NUMBERS if f"`{n}`" not in page] == []
    assert [n for n in seccomp.DONE_WITHOUT_RUNNING if f"`{n}`" not in page or n in names] == []
    assert all(pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, n) < 0 for n in seccomp.ALLOWED_NUMBERS)  # by number
    for refused in ("clone", "clone3", "fork", "vfork", "socket", "shmget", "msgget", "semget", "mq_open",
                    "inotify_init1", "fanotify_init", "memfd_create", "pipe2", "fallocate", "flock", "ptrace",
                    "io_uring_setup", "bpf", "userfaultfd", "personality", "unshare", "setns", "mknodat",
                    *seccomp.SIDE_CHANNELS_REFUSED):
        assert refused not in names


@pytest.mark.parametrize("abi, code", [
    # x32: the x86-64 number of write with bit 30 set, writing the marker to stdout
    ("x32", "buf = ctypes.create_string_buffer(b'MARKER\\n')\n"
            "libc.syscall(ctypes.c_long(0x40000000 | 1), 1, ctypes.addressof(buf), 7)\nprint('after')"),
    # i386 through int 0x80: mov eax, 20 (getpid); int 0x80; ret
    ("i386", "import mmap\nm = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)\n"
             "m.write(bytes([0xb8, 20, 0, 0, 0, 0xcd, 0x80, 0xc3]))\n"
             "f = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(m)))\n"
             "print('MARKER', f())"),
])
@pytest.mark.parametrize("hook", [True, False])
def test_a_system_call_of_another_abi_kills_the_process(abi, code, hook):
    result = run_python(CTYPES + code, LIMITS, audit_hook=hook)
    assert result.exit_status == -31, (abi, result.exit_status, result.stderr[-300:])  # SIGSYS
    assert "MARKER" not in result.stdout and "after" not in result.stdout


# Numbers the kernel here (6.x) knows and libseccomp 2.5 does not (or that nothing knows yet).
NEWER = {"futex_waitv": (449, 0, 0, 0, 0, 0), "cachestat": (451, 0, 0, 0, 0), "statmount": (457, 0, 0, 0, 0),
         "listmount": (458, 0, 0, 0, 0), "mseal": (462, 0, 0, 0), "open_tree_attr": (467, -1, 0, 0, 0, 0),
         "number_999": (999,)}


def test_system_calls_newer_than_the_filter_are_refused_by_it(monkeypatch):
    assert raw_errnos(NEWER) == {name: errno.EPERM for name in NEWER}
    # Control: with a filter that allows everything the kernel answers them itself (not EPERM).
    monkeypatch.setattr(seccomp, "base_filter", seccomp.allow_all_filter)
    sandbox._probe.cache_clear()
    try:
        answers = raw_errnos({k: NEWER[k] for k in ("listmount", "statmount", "number_999")})
    finally:
        sandbox._probe.cache_clear()
    assert errno.EPERM not in answers.values() and answers["number_999"] == errno.ENOSYS


@pytest.mark.skipif(platform.machine() != "x86_64", reason="uretprobe and uprobe are x86-64 system calls")
def test_the_kernels_probe_calls_pass_the_filter_and_do_nothing_elsewhere():
    """uprobe (336) and uretprobe (335), the calls of the kernel's probe trampolines: the filter lets them
    through (a kernel before the seccomp exception would otherwise crash a probed program); issued by a
    program they fail (uprobe: ENXIO) or kill it (uretprobe: SIGILL); a kernel without them says ENOSYS."""
    assert raw_errnos({"uprobe": (336,)})["uprobe"] in (errno.ENXIO, errno.ENOSYS)
    result = run_python(RAW + "print(errno_of(335))", LIMITS, audit_hook=False)
    assert result.exit_status == -signal.SIGILL or result.stdout == f"{errno.ENOSYS}\n", result


def test_the_host_resources_a_program_could_take_are_refused():
    f_setlease, f_notify, f_setpipe_sz, f_setown, f_setlk = 1024, 1026, 1031, 8, 6
    calls = {
        "shmget": (29, 0, 1 << 30, 0o1600), "semget": (64, 0, 1, 0o1600), "msgget": (68, 0, 0o1600),
        "mq_open": (240, 0, 0o100, 0o600, 0), "inotify_init1": (294, 0), "inotify_add_watch": (254, 0, 0, 0xfff),
        "fanotify_init": (300, 0, 0), "memfd_create": (319, 0, 0), "pipe2": (293, 0, 0), "eventfd2": (290, 0, 0),
        "fallocate": (285, 1, 1, 0, 1 << 30), "flock": (73, 0, 2), "fcntl_setlease": (72, 0, f_setlease, 0),
        "fcntl_notify": (72, 0, f_notify, 0x10), "fcntl_setpipe_sz": (72, 1, f_setpipe_sz, 1 << 20),
        "fcntl_setown": (72, 1, f_setown, 1), "fcntl_setlk": (72, 0, f_setlk, 0),
        "mmap_hugetlb": (9, 0, 1 << 21, 3, 0x22 | 0x40000, -1, 0), "mlock": (149, 0, 4096), "mlockall": (151, 3),
        "ioctl_tiocsti": (16, 0, 0x5412, 0), "socket": (41, 2, 1, 0), "clone": (56, 17, 0, 0, 0, 0),
        "fork": (57,), "kill": (62, 1, 0), "rt_sigqueueinfo": (129, 2, 34, 0), "timer_create": (222, 0, 0, 0),
        "setresuid_root": (117, 0, 0, 0), "ptrace": (101, 16, 1, 0, 0), "unshare": (272, 0x10000000),
        "mount": (165, 0, 0, 0, 0, 0), "execve": (59, 0, 0, 0), "prctl_no_new_privs": (157, 38, 1, 0, 0, 0),
        "chdir": (80, 0), "sysinfo": (99, 0), "setresuid_same": (117, 65534, 65534, 65534), "symlink": (88, 0, 0), "link": (86, 0, 0),
    }
    assert raw_errnos(calls) == {name: errno.EPERM for name in calls}


def test_fd_flag_tricks_on_the_hosts_pipes_are_refused():
    """F_SETFL with O_DIRECT (packet mode: one host read per write, however small) or O_ASYNC (SIGIO) on
    stdout, stderr and every other descriptor is refused; the flags a solver sets (O_NONBLOCK) are not."""
    import fcntl
    import os

    f_setfl, f_getfl = fcntl.F_SETFL, fcntl.F_GETFL
    calls = {f"{what}_{fd}": (72, fd, f_setfl, flag) for fd in (0, 1, 2, 3, 4, 5, 6)
             for what, flag in (("o_direct", os.O_DIRECT), ("o_async", fcntl.FASYNC),
                                ("both", os.O_DIRECT | fcntl.FASYNC | os.O_NONBLOCK),
                                ("high_bits", os.O_DIRECT | (1 << 40)))}
    assert raw_errnos(calls) == {name: errno.EPERM for name in calls}
    allowed = {"o_nonblock": (72, 1, f_setfl, os.O_NONBLOCK), "nothing": (72, 1, f_setfl, 0),
               "o_append": (72, 1, f_setfl, os.O_APPEND), "getfl": (72, 1, f_getfl, 0)}
    answers = raw_errnos(allowed)
    assert {k: v for k, v in answers.items() if k != "getfl"} == {"o_nonblock": 0, "nothing": 0, "o_append": 0}
    assert answers["getfl"] == 0  # F_GETFL returns the flags (not -1)


def test_the_filters_are_bpf_programs():
    base, program = seccomp.base_filter(), seccomp.program_filter()
    assert len(base) % 8 == 0 and len(program) % 8 == 0  # struct sock_filter is 8 bytes
    assert len(base) > len(program) > 0


DISK = """import os, sys
def e(f, *a):
    try:
        f(*a)
        return 0
    except OSError as x:
        return x.errno
fd = os.open(sys.executable, os.O_RDONLY)
print({'fsync_bad_fd': e(os.fsync, 999), 'fdatasync_bad_fd': e(os.fdatasync, 999), 'fsync_bound_file': e(os.fsync, fd),
       'fsync_dir': e(os.fsync, os.open('/', os.O_RDONLY)), 'sync': e(os.sync),
       'o_direct': e(os.open, sys.executable, os.O_RDONLY | os.O_DIRECT),
       'o_direct_high_bits': e(os.open, sys.executable, os.O_RDONLY | os.O_DIRECT | os.O_CLOEXEC | os.O_NOATIME),
       'o_direct_dir': e(os.open, '/', os.O_RDONLY | os.O_DIRECTORY | os.O_DIRECT),
       'plain_open': e(os.open, sys.executable, os.O_RDONLY), 'tmpfs_file': e(os.open, 'f', os.O_CREAT | os.O_WRONLY)})
"""


def _disk(monkeypatch=None) -> dict[str, int]:
    result = run_python(DISK, LIMITS, audit_hook=False)
    assert result.ok, result.stderr[-500:]
    return eval(result.stdout)  # noqa: S307 - a dict of ints printed by our own program


def test_flushes_do_nothing_and_direct_reads_of_the_host_disk_are_refused(monkeypatch):
    """fsync & co. of a bound host file flushed the host's disk (~1,300 device flushes in 4 s): the filter
    answers 0 without running them (so a bad descriptor, which the kernel would refuse with EBADF, also
    gets 0); an open with O_DIRECT (reads past the page cache: 50k uncached disk reads) fails with EPERM."""
    assert raw_errnos({"syncfs": (306, 999), "sync_file_range": (277, 999, 0, 0, 0),
                       "fdatasync": (75, 999), "fsync": (74, 999), "sync": (162,)}) == dict.fromkeys(
        ("syncfs", "sync_file_range", "fdatasync", "fsync", "sync"), 0)
    assert _disk() == {"fsync_bad_fd": 0, "fdatasync_bad_fd": 0, "fsync_bound_file": 0, "fsync_dir": 0, "sync": 0,
                       "o_direct": errno.EPERM, "o_direct_high_bits": errno.EPERM, "o_direct_dir": errno.EPERM,
                       "plain_open": 0, "tmpfs_file": 0}
    # Control: with a filter that allows everything, the kernel runs them (EBADF; O_DIRECT opens).
    monkeypatch.setattr(seccomp, "base_filter", seccomp.allow_all_filter)
    sandbox._probe.cache_clear()
    try:
        answers = raw_errnos({"syncfs": (306, 999), "fsync": (74, 999)})
        control = _disk()
    finally:
        sandbox._probe.cache_clear()
    assert answers == {"syncfs": errno.EBADF, "fsync": errno.EBADF}
    assert control["fsync_bad_fd"] == errno.EBADF and control["o_direct"] in (0, errno.EINVAL)
