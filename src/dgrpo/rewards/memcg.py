"""A memory cgroup per sandboxed program: the kernel memory ``RLIMIT_AS`` does not count (see docs/sandbox.md).

``RLIMIT_AS`` bounds a program's mappings, not what the kernel allocates on its behalf: page tables
(one 4 KiB page mapped every 1 GiB, 65k times, made the host build 524 MiB of them), and dentries and
inodes (``os.stat`` of unique missing names in a bound directory left 181 MB of negative dentries).
A memory cgroup charges both, with the program's pages and its tmpfs, to one limit. The host (root)
makes a child of its own memory cgroup per run (:func:`create`), moves bwrap's child into it while
that child waits for its identity maps, before anything of the program runs (:meth:`Cgroup.add`, from
``supervise``), and removes it after the run (:meth:`Cgroup.remove`). Past the limit the kernel first
reclaims the cgroup's caches (dentries, page cache), then kills the program (``SIGKILL``: reward 0).

Where no cgroup can be made (not root, a read-only or absent cgroupfs, cgroup v2 without the memory
controller delegated) :func:`create` returns None and logs once; programs then run with
``RLIMIT_AS`` alone, and their page tables and dentries are bounded only by the kernel
(``vm.max_map_count`` mappings; the run's time limit).
"""

from __future__ import annotations

import functools
import logging
import os
import secrets
import time

log = logging.getLogger(__name__)
MARGIN_BYTES = 64 << 20  # kernel memory of an honest run (page tables, dentries, inodes) is a few MiB
_V1, _V2 = "/sys/fs/cgroup/memory", ("/sys/fs/cgroup/unified", "/sys/fs/cgroup")
_WARNED: list[str] = []


def _own_cgroups(text: str) -> tuple[str | None, str | None]:
    """``(v1 memory path, v2 path)`` of this process from ``/proc/self/cgroup`` (None where absent)."""
    v1 = v2 = None
    for line in text.splitlines():
        number, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if "memory" in controllers.split(","):
            v1 = path
        elif number == "0" and controllers == "":
            v2 = path
    return v1, v2


@functools.lru_cache(maxsize=1)
def parent() -> tuple[str, str] | str:
    """``(directory, "v1" or "v2")`` under which this process can make memory cgroups, or why it cannot."""
    if os.geteuid() != 0:
        return "the host is not root"
    try:
        with open("/proc/self/cgroup") as fh:
            v1, v2 = _own_cgroups(fh.read())
    except OSError as err:
        return f"/proc/self/cgroup: {err}"
    candidates = [(_V1 + v1, "v1")] if v1 is not None else []
    candidates += [(root + v2.rstrip("/"), "v2") for root in _V2 if v2 is not None]
    for directory, version in candidates:
        limit_file = "memory.limit_in_bytes" if version == "v1" else "memory.max"
        probe = os.path.join(directory, "dgrpo-probe-" + secrets.token_hex(4))
        try:
            os.mkdir(probe)
        except OSError:
            continue
        try:
            if os.path.exists(os.path.join(probe, limit_file)):
                return directory, version
        finally:
            os.rmdir(probe)
    return "no writable memory cgroup (v1 " + (_V1 + v1 if v1 else "absent") + ", v2 " + (v2 or "absent") + ")"


class Cgroup:
    """One run's memory cgroup (a directory of the cgroup file system)."""

    def __init__(self, path: str, version: str):
        self.path, self.version = path, version

    def add(self, pid: int) -> None:
        """Move process ``pid`` (and so everything it starts afterwards) into the cgroup.

        Raises:
            OSError: the process is gone or cannot be moved.
        """
        with open(os.path.join(self.path, "cgroup.procs"), "w") as fh:
            fh.write(str(pid))

    def peak_bytes(self) -> int | None:
        """The most memory the run was charged (kernel memory included), bytes; None where unknown."""
        name = "memory.max_usage_in_bytes" if self.version == "v1" else "memory.peak"
        try:
            with open(os.path.join(self.path, name)) as fh:
                return int(fh.read())
        except (OSError, ValueError):
            return None

    def remove(self, wait_s: float = 2.0) -> None:
        """Remove the cgroup once its processes are gone (its charges go to the parent); never raises."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError as err:  # EBUSY while the killed processes exit
                if time.monotonic() > deadline:
                    log.warning("memory cgroup %s not removed: %s", self.path, err)
                    return
                time.sleep(0.01)


def create(limit_bytes: int, run_id: str) -> Cgroup | None:
    """A new memory cgroup limited to ``limit_bytes`` (memory, kernel memory and swap together), or None
    where none can be made here (logged once per process: see the module docstring)."""
    where = parent()
    if isinstance(where, str):
        if not _WARNED:
            _WARNED.append(where)
            log.warning("no memory cgroup per program (%s): page tables and dentries a program makes are not "
                        "bounded by its memory limit (docs/sandbox.md, Resources)", where)
        return None
    directory, version = where
    path = os.path.join(directory, run_id)
    try:
        os.mkdir(path, 0o700)
    except OSError as err:
        log.warning("memory cgroup %s cannot be made (%s): this program runs without one", path, err)
        return None
    try:
        if version == "v1":
            _write(path, "memory.limit_in_bytes", limit_bytes)
            try:
                _write(path, "memory.memsw.limit_in_bytes", limit_bytes)  # no swap beyond it (where accounted)
            except OSError:
                pass
        else:
            _write(path, "memory.max", limit_bytes)
            try:
                _write(path, "memory.swap.max", 0)
            except OSError:
                pass
    except OSError as err:
        os.rmdir(path)
        log.warning("memory cgroup %s cannot be limited (%s): this program runs without one", path, err)
        return None
    return Cgroup(path, version)


def _write(path: str, name: str, value: int) -> None:
    with open(os.path.join(path, name), "w") as fh:
        fh.write(str(value))
