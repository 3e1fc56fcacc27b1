"""The sandbox's two seccomp filters, compiled once with libseccomp into BPF (see docs/sandbox.md).

Both filters allow by default and refuse a list of system calls, so that an honest solver (the
interpreter, numpy, sympy) never meets them. Refused calls fail with an errno; they never kill the
process, so a program sees an ordinary ``OSError``/``RuntimeError`` and the reward is 0 through its
exit status. A system call of another ABI (i386, x32) kills the process (libseccomp's bad-arch action).

* :func:`base_filter`, loaded by ``bwrap --seccomp`` just before it executes the interpreter: process
  creation other than threads (``fork``, ``vfork``, ``clone`` without ``CLONE_THREAD``; ``clone3``
  answers ``ENOSYS`` so that the C library falls back to ``clone``, whose flags a filter can read),
  debugging, reading or changing other processes (``ptrace``, ``process_vm_*``, ``pidfd_*``, ``kcmp``,
  ``prlimit64`` on another pid: the sandbox's pid 1 is bubblewrap's, outside the filter),
  mounts and namespaces, device and FIFO creation (``mknod``), ``bpf``, ``perf_event_open``,
  ``userfaultfd``, ``io_uring`` (its operations would bypass this filter), ``kexec``, kernel
  modules, the key rings, sockets, clocks, swap, reboot and other administration calls.
* :func:`program_filter`, loaded by the sandbox runner after its own set-up and right before the
  untrusted program starts (a filter that refused ``execve`` could not be applied before the
  interpreter itself is executed): ``execve``/``execveat`` and every ``clone`` (threads too). With
  no thread and no process possible, the process count is one, which also holds where
  ``RLIMIT_NPROC`` does not (it is not enforced for uid 0 in the initial user namespace, and a
  sandbox started by root runs as root's uid mapped into its user namespace).
"""

from __future__ import annotations

import errno
import functools
import tempfile

from dgrpo.errors import SandboxUnavailable

CLONE_THREAD = 0x00010000

# Refused by the base filter with EPERM (names this kernel's libseccomp does not know are skipped).
REFUSED = (
    # processes other than threads (clone is handled by its flags, clone3 below)
    "fork", "vfork",
    # other processes: debugging, memory, process file descriptors
    "ptrace", "process_vm_readv", "process_vm_writev", "process_madvise", "kcmp",
    "pidfd_open", "pidfd_getfd", "pidfd_send_signal",
    # mounts, namespaces, root directory
    "mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen", "fsconfig",
    "fsmount", "fspick", "mount_setattr", "unshare", "setns",
    # device nodes and FIFOs
    "mknod", "mknodat",
    # kernel attack surface a solver never needs
    "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "keyctl", "add_key", "request_key", "name_to_handle_at", "open_by_handle_at", "fanotify_init",
    "lookup_dcookie", "memfd_secret", "uselib", "personality", "modify_ldt", "iopl", "ioperm",
    # network
    "socket", "socketpair",
    # administration
    "reboot", "swapon", "swapoff", "syslog", "acct", "quotactl", "quotactl_fd", "vhangup",
    "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "sethostname", "setdomainname",
)
# Refused by the program filter, on top of the base filter.
PROGRAM_REFUSED = ("execve", "execveat", "clone")


def _seccomp():
    """The libseccomp bindings, or a one-line error naming the fix."""
    try:
        import pyseccomp
    except (ImportError, OSError) as err:  # pyseccomp raises when libseccomp.so.2 is missing
        raise SandboxUnavailable(
            f"the sandbox needs libseccomp ({err}): install it with `apt-get install libseccomp2` "
            "and `pip install pyseccomp` (both are in the README's setup)") from None
    return pyseccomp


def _compile(rules) -> bytes:
    """BPF program (``struct sock_filter`` array, 8 bytes per instruction) of an allow-by-default filter."""
    sc = _seccomp()
    flt = sc.SyscallFilter(sc.ALLOW)
    for action, name, args in rules:
        try:
            number = sc.resolve_syscall(sc.Arch.NATIVE, name)
        except (OSError, ValueError):
            continue
        if number < 0:  # not a system call of this architecture
            continue
        flt.add_rule(action, name, *args)
    with tempfile.TemporaryFile() as fh:
        flt.export_bpf(fh)
        fh.seek(0)
        return fh.read()


@functools.lru_cache(maxsize=1)
def base_filter() -> bytes:
    """BPF of the filter ``bwrap --seccomp`` applies before executing the interpreter (module docstring).

    Raises:
        SandboxUnavailable: libseccomp or its Python bindings are missing.
    """
    sc = _seccomp()
    eperm = sc.ERRNO(errno.EPERM)
    rules = [(eperm, name, ()) for name in REFUSED]
    rules.append((eperm, "clone", (sc.Arg(0, sc.MASKED_EQ, CLONE_THREAD, 0),)))  # clone without CLONE_THREAD
    rules.append((sc.ERRNO(errno.ENOSYS), "clone3", ()))  # its flags sit in memory: make glibc use clone
    rules.append((eperm, "prlimit64", (sc.Arg(0, sc.NE, 0),)))  # limits of another process (bwrap's pid 1)
    return _compile(rules)


@functools.lru_cache(maxsize=1)
def program_filter() -> bytes:
    """BPF of the filter the runner loads right before the program: no exec, no thread, no process.

    Raises:
        SandboxUnavailable: libseccomp or its Python bindings are missing.
    """
    sc = _seccomp()
    rules = [(sc.ERRNO(errno.EPERM), name, ()) for name in PROGRAM_REFUSED]
    rules.append((sc.ERRNO(errno.ENOSYS), "clone3", ()))
    return _compile(rules)
