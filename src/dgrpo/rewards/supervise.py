"""Wait for one sandboxed run while reading its pipes, and kill it (its whole PID namespace) at the time limit."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import time


def memfd(name: str, data: bytes) -> int:
    """An anonymous in-memory file holding ``data``, positioned at its start."""
    fd = os.memfd_create(name)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def supervise(proc: subprocess.Popen, started_r: int, calls_r: int, info_r: int | None, timeout_s: float,
              cap: int, startup_grace_s: float) -> tuple[bool, bool, bytes]:
    """Wait for the run, reading its pipes; kill it at the wall-clock limit. Closes the three pipes.

    The time limit counts from the moment the program starts (the runner writes ``S`` to its pipe):
    on a loaded machine the sandbox and the interpreter alone can take seconds, which must neither
    time out an honest program nor look like a sandbox failure.

    Args:
        proc: bwrap (or the runner, unsafe); started_r / calls_r / info_r: read ends of the runner's
            start signal, the stand-ins' record and bwrap's ``--info-fd`` (None without bwrap).
        timeout_s: wall-clock limit from the program's start; cap: bytes kept of the record;
        startup_grace_s: time the sandbox may take to reach the program.

    Returns:
        (the program started, it was killed at the time limit, the bytes of the calls pipe).
    """
    names = {started_r: "started", calls_r: "calls"}
    if info_r is not None:
        names[info_r] = "info"
    got = {"started": b"", "calls": b"", "info": b""}
    started = timed_out = False
    pidfd = None
    exited, gone = os.pidfd_open(proc.pid), False  # readable once the child exits: no polling
    deadline = time.monotonic() + startup_grace_s
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = started
                _kill(proc, pidfd)
                break
            watch = [*names] if gone else [*names, exited]
            if not watch:
                break
            ready, _, _ = select.select(watch, [], [], left)
            for fd in ready:
                if fd == exited:
                    gone = True  # bwrap (or the runner) exited; its pipes reach EOF next
                    continue
                chunk = os.read(fd, 65536)
                name = names[fd]
                if chunk and len(got[name]) < cap:
                    got[name] += chunk
                if not chunk or len(got[name]) >= cap:  # EOF, or a flood: the writer now gets EPIPE
                    del names[fd]
                    os.close(fd)
                if name == "started" and not started and b"S" in got["started"]:
                    started, deadline = True, time.monotonic() + timeout_s
                if name == "info" and pidfd is None:
                    pidfd = _open_pid1(got["info"])
        proc.wait()
        if pidfd is not None:  # pid 1 of the sandbox exits only after the kernel killed the rest
            select.select([pidfd], [], [], 10)
    finally:
        for fd in names:
            os.close(fd)
        os.close(exited)
        if pidfd is not None:
            os.close(pidfd)
    return started, timed_out, got["calls"]


def _open_pid1(info: bytes) -> int | None:
    """A pidfd of the sandbox's PID 1, from bwrap's ``--info-fd`` JSON, once it is complete."""
    try:
        return os.pidfd_open(int(json.loads(info)["child-pid"]))
    except (ValueError, KeyError, TypeError, OSError):
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
