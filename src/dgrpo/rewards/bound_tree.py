"""What to mask in the host trees bound into the sandbox, current at every run (docs/sandbox.md, "Binds").

A read-only bind does not stop a FIFO write, and a device node or socket has no business inside, so
:func:`hidden_paths` lists every FIFO, socket and device node under a bound directory (and, for a
sandbox whose identity owns the bound files, every file that is not world-readable and every
directory that is not world-searchable) for bwrap to mask, before every program.

Reading the trees (about 1,100 directories for the interpreter, numpy and sympy) would cost the
host a millisecond or two per program, so each directory is read once and then watched with
inotify (``IN_CREATE``, ``IN_MOVED_TO``, ``IN_ATTRIB`` for the directory and what it holds, and its
own removal or move). Before each program the host drains the inotify descriptor (one
non-blocking ``read``) and re-reads only the directories that changed; a queue overflow re-reads
all. The watch is added before the directory is read, so a change between the two is seen next
time. Where a directory cannot be watched (inotify missing, the watch budget spent) its ``ctime``
is compared instead on every run, and a directory changed within the last second is always
re-read (the kernel stamps times with a coarse clock).
"""

from __future__ import annotations

import ctypes
import os
import stat
import struct
import threading
import time
from dataclasses import dataclass

_IN_MASK = 0x100 | 0x080 | 0x004 | 0x400 | 0x800 | 0x01000000  # CREATE MOVED_TO ATTRIB DELETE_SELF MOVE_SELF ONLYDIR
_IN_Q_OVERFLOW = 0x4000
_IN_NONBLOCK_CLOEXEC = 0o4000 | 0o2000000
_RECENT_NS = 1_000_000_000


@dataclass(frozen=True)
class _Dir:
    ctime_ns: int
    read_at_ns: int
    subdirs: tuple[str, ...]
    files: tuple[str, ...]  # to mask: special files (and, with modes, files that are not world-readable)
    dirs: tuple[str, ...]  # to mask (with modes): directories that are not world-searchable


class _Watcher:
    """One inotify instance of this process; ``dirty()`` drains it. Every method is safe to call from threads."""

    def __init__(self):
        self.lock = threading.Lock()
        self.fd, self.paths, self.owner = -1, {}, 0
        self.cache: dict[tuple[str, bool], _Dir] = {}
        self.watched: set[str] = set()
        self.results: dict[tuple, tuple[tuple[str, ...], tuple[str, ...]]] = {}  # whole answers, all watched

    def _open(self) -> None:
        if self.owner == os.getpid():
            return
        self.fd, self.paths, self.owner = -1, {}, os.getpid()  # a forked child starts over
        self.cache.clear()
        self.watched.clear()
        self.results.clear()
        try:
            self.libc = ctypes.CDLL(None, use_errno=True)
            self.fd = self.libc.inotify_init1(_IN_NONBLOCK_CLOEXEC)
        except (OSError, AttributeError):
            self.fd = -1

    def watch(self, path: str) -> None:
        if self.fd >= 0 and path not in self.watched:
            wd = self.libc.inotify_add_watch(self.fd, os.fsencode(path), _IN_MASK)
            if wd >= 0:
                self.paths[wd] = path
                self.watched.add(path)

    def drain(self) -> None:
        """Forget the cached reading of every directory inotify reported as changed."""
        changed: set[str] = set()
        while self.fd >= 0:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                break
            offset = 0
            while offset + 16 <= len(data):
                wd, mask, _, length = struct.unpack_from("iIII", data, offset)
                offset += 16 + length
                if mask & _IN_Q_OVERFLOW:
                    self.cache.clear()
                    self.results.clear()
                    return
                if wd in self.paths:
                    changed.add(self.paths[wd])
                    if mask & (0x400 | 0x800 | 0x8000):  # gone, moved or unwatched: watch again when seen
                        self.watched.discard(self.paths.pop(wd))
        for key in [k for k in self.cache if k[0] in changed]:
            del self.cache[key]
        if changed:
            self.results.clear()


_watcher = _Watcher()


def _read_dir(path: str, modes: bool, skip: frozenset[str]) -> _Dir:
    subdirs, files, dirs = [], [], []
    now = time.time_ns()
    ctime = os.lstat(path).st_ctime_ns
    with os.scandir(path) as it:
        for entry in it:
            if entry.path in skip:
                continue
            if entry.is_dir(follow_symlinks=False):
                if modes and entry.stat(follow_symlinks=False).st_mode & 0o005 != 0o005:
                    dirs.append(entry.path)  # masked whole: no need to look inside
                else:
                    subdirs.append(entry.path)
            elif entry.is_symlink():
                continue  # resolved inside the sandbox, where its target is checked on its own
            elif not entry.is_file(follow_symlinks=False):
                files.append(entry.path)  # FIFO, socket, device node (from the directory entry's type)
            elif modes and entry.stat(follow_symlinks=False).st_mode & 0o004 == 0:
                files.append(entry.path)
    return _Dir(ctime, now, tuple(subdirs), tuple(files), tuple(dirs))


def _current(path: str, modes: bool, skip: frozenset[str], now: int) -> _Dir:
    entry = _watcher.cache.get((path, modes))
    if entry is not None and path in _watcher.watched:
        return entry  # inotify would have reported a change
    if entry is not None and entry.ctime_ns == os.lstat(path).st_ctime_ns and now - entry.ctime_ns >= _RECENT_NS \
            and entry.read_at_ns - entry.ctime_ns >= _RECENT_NS:
        return entry
    _watcher.watch(path)  # before reading: a change after this point is reported
    entry = _watcher.cache[(path, modes)] = _read_dir(path, modes, skip)
    return entry


def hidden_paths(binds: tuple[tuple[str, str], ...], skip: tuple[str, ...], modes: bool,
                 ) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(files, dirs)`` to mask inside, as sandbox paths, for the ``(host, sandbox)`` path pairs ``binds``
    (``skip``: host directories already masked whole).

    Every FIFO, socket or device node in a bound tree, a bound path that is neither a regular file
    nor a directory, and, with ``modes``, every file that is not world-readable and every directory
    that is not world-searchable. Current at the call (module docstring).
    """
    files: list[str] = []
    dirs: list[str] = []
    for src, dest in binds:  # bound files: looked at on every run (a few lstat calls)
        try:
            st = os.lstat(src)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) and (not stat.S_ISREG(st.st_mode) or (modes and st.st_mode & 0o004 == 0)):
            files.append(dest)
    tree_files, tree_dirs = _in_trees(tuple(b for b in binds if os.path.isdir(b[0])), frozenset(skip), modes)
    return tuple(files) + tree_files, tree_dirs


def _in_trees(binds, skip: frozenset[str], modes: bool) -> tuple[tuple[str, ...], tuple[str, ...]]:
    files: list[str] = []
    dirs: list[str] = []
    now = time.time_ns()
    key = (binds, skip, modes)
    with _watcher.lock:
        _watcher._open()
        _watcher.drain()
        if key in _watcher.results:  # nothing changed since, and every directory is watched
            return _watcher.results[key]
        watched = True
        for src, dest in binds:
            stack = [src]
            while stack:
                path = stack.pop()
                try:
                    entry = _current(path, modes, skip, now)
                except OSError:
                    continue  # gone since the last look
                watched = watched and path in _watcher.watched
                files += [dest + f[len(src):] for f in entry.files]
                dirs += [dest + d[len(src):] for d in entry.dirs]
                stack += entry.subdirs
        if watched:
            _watcher.results[key] = (tuple(files), tuple(dirs))
    return tuple(files), tuple(dirs)
