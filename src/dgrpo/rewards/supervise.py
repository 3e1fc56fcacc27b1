"""Wait for one sandboxed run while reading its pipes, and kill it (its whole PID namespace) at the time limit.

Everything the program can send the host arrives on a pipe that this loop reads with a byte cap:
stdout (the first :data:`STDOUT_KEPT` bytes kept), stderr (its tail kept), and the stand-in
libraries' requests (answered by :class:`dgrpo.rewards.stand_in.LibraryService`). Past
``max_output_bytes`` on stdout or stderr the host kills the program. Nothing here parses or logs
program bytes.

What the host spends reading is bounded by the number of reads, not only the bytes: a program that
writes one byte at a time would otherwise cost the host a ``select`` and a ``read`` (some 10 µs of
Python) per byte. So after :data:`FREE_READS` short reads of a pipe (under :data:`SHORT_READ`
bytes; on the library channel, a read that ends inside a line), each further short read rests that
pipe for :data:`REST_S` while what the program writes piles up in it (it blocks once the pipe's
64 KiB are full). A run costs the host at most ``3 x (FREE_READS + timeout_s / REST_S) +
2 x max_output_bytes / SHORT_READ + 1,000`` reads (the last term: complete request lines,
:data:`dgrpo.rewards.stand_in.MAX_CALLS`); the rests end as soon as the sandbox exits, so an honest
program's output is never waited for (``test_tiny_writes_cost_the_host_little``).
"""

from __future__ import annotations

import json
import os
import resource
import select
import signal
import subprocess
import time
from dataclasses import dataclass, field

from dgrpo.rewards.stand_in import LibraryService

IDENTITY_FAILURE = "cannot set the sandbox's identity or limits"
STDOUT_KEPT = 4096  # bytes of stdout the host keeps: a printed answer is short
STDERR_KEPT = 16384  # bytes of the end of stderr the host keeps (tracebacks)
INFO_CAP = 4096  # bytes of bwrap's --info-fd JSON read
SHORT_READ = 4096  # a read of fewer bytes than this (a page) is short
FREE_READS = 64  # short reads of each pipe before the rests start (an honest program makes a few)
REST_S = 0.005  # seconds a pipe is left unread after a short read, past FREE_READS


def memfd(name: str, data: bytes) -> int:
    """An anonymous in-memory file holding ``data``, positioned at its start."""
    fd = os.memfd_create(name)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


@dataclass
class Pipes:
    """The host's ends of one run's pipes (None where the run has no such pipe)."""

    started: int  # the runner writes "S" right before the program's first line
    stdout: int
    stderr: int
    requests: int  # stand-in library calls, from the program
    replies: int  # answers to them (the host writes; non-blocking)
    info: int | None = None  # bwrap's --info-fd (None without bwrap)
    userns_block: int | None = None  # bwrap waits on it until the host has written the uid/gid maps


@dataclass
class Outcome:
    """What :func:`supervise` saw: whether the program started, was killed at the limit, and its output."""

    started: bool = False
    timed_out: bool = False
    stdout: bytearray = field(default_factory=bytearray)
    stdout_bytes: int = 0  # written in all (the host kept the first STDOUT_KEPT)
    stderr: bytearray = field(default_factory=bytearray)
    stderr_bytes: int = 0
    setup_error: str = ""
    flooded: bool = False  # killed for writing more than max_output_bytes to stdout or stderr
    reads: int = 0  # reads of the program's pipes the host made (its cost, bounded: see the module docstring)


def write_id_maps(pid: int, sandbox_id: int, host_id: int) -> None:
    """Map ``sandbox_id`` to ``host_id`` (uid and gid) in the user namespace of ``pid``, and 0 to 0 for
    bubblewrap's own set-up (its mounts run as the caller, root), before it continues.

    Raises:
        OSError: the maps cannot be written (the caller is not root, or the process is gone).
    """
    lines = f"0 0 1\n{sandbox_id} {host_id} 1\n"
    for name in ("uid_map", "gid_map"):
        with open(f"/proc/{pid}/{name}", "w") as fh:
            fh.write(lines)


def set_limits(pid: int, limits: list[tuple[int, int, int]]) -> None:
    """Set ``(resource, soft, hard)`` limits of process ``pid`` from outside (root), before it forks the program.

    Raises:
        OSError: a limit cannot be set.
    """
    for limit, soft, hard in limits:
        resource.prlimit(pid, limit, (soft, hard))


def supervise(proc: subprocess.Popen, pipes: Pipes, service: LibraryService, *, timeout_s: float,
              max_output_bytes: int, startup_grace_s: float, identity: tuple[int, int] | None,
              limits: list[tuple[int, int, int]] = (), cgroup=None) -> Outcome:
    """Wait for the run, reading its pipes; kill it at the wall-clock limit. Closes every pipe of ``pipes``.

    The time limit counts from the moment the program starts: on a loaded machine the sandbox and the
    interpreter alone can take seconds, which must neither time out an honest program nor look like a
    sandbox failure.

    Args:
        proc: bwrap (or the runner, unsafe). pipes: the host's ends. service: answers library requests.
        timeout_s: wall-clock limit from the program's start, seconds; startup_grace_s: time the
            sandbox may take to reach the program.
        max_output_bytes: bytes of stdout (and of stderr) the program may write; past it the program is killed.
        identity: ``(sandbox id, host id)`` to map once bwrap reports its child (``--userns-block-fd``),
            or None when bwrap maps the caller's own uid.
        limits: resource limits set on bwrap's child while it waits for the maps; the program, its
            child, inherits them (with ``identity`` only: otherwise the runner sets them).
        cgroup: a :class:`dgrpo.rewards.memcg.Cgroup` bwrap's child is moved into while it waits for the
            maps, before anything of the program runs (with ``identity`` only), or None.
    """
    out = Outcome()
    names = {pipes.started: "started", pipes.stdout: "stdout", pipes.stderr: "stderr", pipes.requests: "requests"}
    if pipes.info is not None:
        names[pipes.info] = "info"
    info = b""
    pidfd = None
    exited, gone = os.pidfd_open(proc.pid), False  # readable once the child exits: no polling
    deadline = time.monotonic() + startup_grace_s
    short = dict.fromkeys((pipes.stdout, pipes.stderr, pipes.requests), 0)  # short reads of each pipe
    resting: dict[int, float] = {}  # pipe -> monotonic time it is read again
    try:
        while True:
            now = time.monotonic()
            left = deadline - now
            if left <= 0:
                out.timed_out = out.started
                _kill(proc, pidfd)
                break
            if gone:
                resting.clear()  # the sandbox has exited: read what is left at once
            for fd in [fd for fd, until in resting.items() if until <= now]:
                del resting[fd]
            watch = [fd for fd in names if fd not in resting] + ([] if gone else [exited])
            if not watch and not resting:
                break
            ready, _, _ = select.select(watch, [], [], min([left, *(u - now for u in resting.values())]))
            for fd in ready:
                if fd == exited:
                    gone = True  # bwrap (or the runner) exited; its pipes reach EOF next
                    continue
                chunk = os.read(fd, 65536)
                out.reads += fd in short
                name = names[fd]
                done = not chunk
                if name == "stdout":
                    out.stdout += chunk[: max(0, STDOUT_KEPT - len(out.stdout))]
                    out.stdout_bytes += len(chunk)
                    out.flooded |= out.stdout_bytes > max_output_bytes
                elif name == "stderr":
                    out.stderr = (out.stderr + chunk)[-STDERR_KEPT:]
                    out.stderr_bytes += len(chunk)
                    out.flooded |= out.stderr_bytes > max_output_bytes
                elif name == "requests":
                    _reply(pipes.replies, service.feed(chunk))
                    done = done or service.full  # the program now waits for an answer until its limit
                if fd in short and chunk and (len(chunk) < SHORT_READ if name != "requests"
                                              else not chunk.endswith(b"\n")):
                    short[fd] += 1
                    if short[fd] > FREE_READS:
                        resting[fd] = time.monotonic() + REST_S
                elif name == "started" and b"S" in chunk:
                    out.started, deadline = True, time.monotonic() + timeout_s
                elif name == "info":
                    info += chunk
                    done = done or len(info) > INFO_CAP
                    child = _child_pid(info) if pidfd is None else None
                    if child is not None:
                        pidfd = _open_pid(child)
                        if identity is not None and pipes.userns_block is not None:
                            try:
                                if cgroup is not None:
                                    cgroup.add(child)
                                set_limits(child, list(limits))
                                write_id_maps(child, *identity)
                            except OSError as err:
                                out.setup_error = f"{IDENTITY_FAILURE}: {err}"
                            os.close(pipes.userns_block)  # EOF: bwrap goes on (and fails without maps)
                            pipes.userns_block = None
                if done:
                    del names[fd]
                    resting.pop(fd, None)
                    os.close(fd)
            if out.flooded:
                _kill(proc, pidfd)
                break
        proc.wait()
        if pidfd is not None:  # pid 1 of the sandbox exits only after the kernel killed the rest
            select.select([pidfd], [], [], 10)
    finally:
        for fd in [*names, exited, pidfd, pipes.replies, pipes.userns_block]:
            if fd is not None:
                os.close(fd)
    return out


def _reply(fd: int, data: bytes) -> None:
    """Write answers to the program without ever blocking (a program that does not read loses them)."""
    try:
        if data:
            os.write(fd, data)
    except (BlockingIOError, BrokenPipeError, OSError):
        pass


def _child_pid(info: bytes) -> int | None:
    """bwrap's child pid from its ``--info-fd`` JSON, once that is complete."""
    try:
        return int(json.loads(info)["child-pid"])
    except (ValueError, KeyError, TypeError):
        return None


def _open_pid(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except OSError:
        return None


def _kill(proc: subprocess.Popen, pidfd: int | None) -> None:
    """Kill the sandbox: its PID 1 (the kernel then kills its whole PID namespace), then bwrap itself."""
    if pidfd is not None:
        try:
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            proc.wait(timeout=5)
            return
        except (OSError, subprocess.TimeoutExpired):
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the leader is not reaped yet, so its group is ours
    except ProcessLookupError:
        pass
