"""The bubblewrap command line of one sandboxed program run (the OS boundary, see docs/sandbox.md).

:func:`bwrap_command` builds ``bwrap … python -I -S -B -c BOOTSTRAP FD RUN_ID``: new user, PID,
network, IPC, UTS, cgroup and mount namespaces; uid/gid :data:`SANDBOX_UID` inside; no capability;
no further user namespaces; ``--die-with-parent`` and ``--new-session``; an empty environment but
for a few fixed variables; the base seccomp filter (:mod:`dgrpo.rewards.seccomp`). The file system
is a read-only tmpfs holding only

* the interpreter binary, its ``libpython`` and its standard library (``site-packages`` masked),
* the directories of the shared libraries the interpreter has mapped (``/proc/self/maps``: the C
  library, ``libffi``, ``libpython``'s directory...; never a ``site-packages`` directory, and none
  already inside another bind) and the loader at the path the interpreter names (PT_INTERP),
* the package directories of the third-party modules programs may import (numpy, sympy, mpmath),
* ``/dev/null``, ``/dev/zero``, ``/dev/urandom``,
* ``/tmp``: a fresh tmpfs of bounded size, the working directory, the only writable place.

The runner, the program, the stand-in libraries and the program filter reach the sandbox through one
inherited descriptor (:func:`dgrpo.rewards.sandbox.runner_argv`), not through mounts: every mount
costs bubblewrap about half a millisecond.

There is no ``/proc``, ``/sys``, ``/etc`` or ``/home``. Because a sandbox started by root runs as
root's uid mapped into its user namespace, a bound host file that is not world-readable would be
readable inside; :func:`host_layout` therefore masks every bound file or directory that is not
world-readable (an unreadable device node over a file, an empty read-only tmpfs over a directory).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import stat
import struct
import sys
import sysconfig
from dataclasses import dataclass

SANDBOX_UID = 65534  # uid and gid inside the sandbox ("nobody"); mapped to the caller's uid outside
WORK_DIR = "/tmp"  # the program's working directory inside: a fresh tmpfs, the only writable place
RUNNER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sandbox_runner.py")
DEVICES = ("/dev/null", "/dev/zero", "/dev/urandom")


@dataclass(frozen=True)
class HostLayout:
    """What of the host the sandbox sees, computed once per process.

    Attributes:
        interpreter: the real path of the base interpreter binary (no venv wrapper).
        binds: ``(host path, sandbox path)`` pairs, bound read-only.
        masked_files / masked_dirs: bound paths that are not world-readable, hidden inside.
        empty_dirs: bound directories replaced by an empty read-only tmpfs (``site-packages``).
        site_dirs: directories to put on ``sys.path`` inside (parents of the third-party packages).
    """

    interpreter: str
    binds: tuple[tuple[str, str], ...]
    masked_files: tuple[str, ...]
    masked_dirs: tuple[str, ...]
    empty_dirs: tuple[str, ...]
    site_dirs: tuple[str, ...]


def elf_interpreter(path: str) -> str | None:
    """The program interpreter (PT_INTERP, e.g. ``/lib64/ld-linux-x86-64.so.2``) of a 64-bit ELF file."""
    with open(path, "rb") as fh:
        head = fh.read(64)
        if head[:5] != b"\x7fELF\x02":
            return None
        end = "<" if head[5] == 1 else ">"
        phoff, = struct.unpack(end + "Q", head[32:40])
        phentsize, phnum = struct.unpack(end + "HH", head[54:58])
        for i in range(phnum):
            fh.seek(phoff + i * phentsize)
            p_type, _, p_offset, _, _, p_filesz = struct.unpack(end + "IIQQQQ", fh.read(40))
            if p_type == 3:  # PT_INTERP
                fh.seek(p_offset)
                return fh.read(p_filesz).rstrip(b"\0").decode()
    return None


def _mapped_library_dirs(exclude: tuple[str, ...]) -> list[str]:
    """Directories (real paths) of the shared libraries this process has mapped, minus ``exclude`` trees."""
    dirs = set()
    with open("/proc/self/maps") as fh:
        for line in fh:
            path = line.split(maxsplit=5)[-1].strip() if line.count(" ") >= 5 else ""
            if path.startswith("/") and ".so" in os.path.basename(path):
                real = os.path.dirname(os.path.realpath(path))
                if not any(real == e or real.startswith(e + os.sep) for e in exclude):
                    dirs.add(real)
    return sorted(dirs)


def _without_covered(binds: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Drop binds that another bind of the same tree already makes visible; parents first."""
    same = sorted({b for b in binds if b[0] == b[1]}, key=lambda b: len(b[0]))
    kept: list[tuple[str, str]] = []
    for b in same:
        if not any(b[0].startswith(k[0] + os.sep) for k in kept):
            kept.append(b)
    return kept + [b for b in binds if b[0] != b[1]]


def _package_dirs(names: tuple[str, ...]) -> list[str]:
    """Directories of the importable packages ``names`` and their vendored libraries (``numpy.libs``)."""
    found = []
    for name in names:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            continue
        pkg = os.path.realpath(list(spec.submodule_search_locations)[0])
        found.append(pkg)
        libs = pkg + ".libs"  # auditwheel puts a wheel's shared libraries beside the package
        if os.path.isdir(libs):
            found.append(libs)
    return found


def _not_world_readable(top: str, skip: tuple[str, ...] = ()) -> tuple[list[str], list[str]]:
    """Files without o+r and directories without o+rx under ``top`` (symlinks are not followed)."""
    files, dirs = [], []
    try:
        st = os.lstat(top)
    except OSError:
        return files, dirs
    if not stat.S_ISDIR(st.st_mode):
        return ([top] if st.st_mode & 0o004 == 0 else []), []
    for root, subdirs, names in os.walk(top):
        keep = []
        for d in subdirs:
            path = os.path.join(root, d)
            if path in skip:
                continue
            mode = os.lstat(path).st_mode
            if stat.S_ISDIR(mode) and mode & 0o005 != 0o005:
                dirs.append(path)  # masked whole: no need to look inside
            else:
                keep.append(d)
        subdirs[:] = keep
        for n in names:
            path = os.path.join(root, n)
            mode = os.lstat(path).st_mode
            if not stat.S_ISLNK(mode) and mode & 0o004 == 0:
                files.append(path)
    return files, dirs


@functools.lru_cache(maxsize=16)
def host_layout(packages: tuple[str, ...], extra: tuple[str, ...] = ()) -> HostLayout:
    """The host paths the sandbox binds for programs that may import ``packages`` (module docstring),
    plus the host paths ``extra``, read-only at the same place (tests bind a directory to attack)."""
    interpreter = os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)
    stdlib = os.path.realpath(sysconfig.get_path("stdlib"))
    binds = [(interpreter, interpreter), (stdlib, stdlib)]
    libdir, soname = sysconfig.get_config_var("LIBDIR"), sysconfig.get_config_var("INSTSONAME")
    if libdir and soname and os.path.isfile(os.path.join(libdir, soname)):
        lib = os.path.join(libdir, soname)
        binds.append((os.path.realpath(lib), lib))
    pkgs = _package_dirs(packages)
    site_dirs = sorted({os.path.dirname(p) for p in pkgs if not p.endswith(".libs")})
    # Libraries in a site-packages directory (torch's, say) are never bound: packages come only by name.
    sites = {os.path.realpath(d) for d in (sysconfig.get_path("purelib"), sysconfig.get_path("platlib"),
                                           os.path.join(stdlib, "site-packages"), *site_dirs) if d}
    covered = [stdlib]
    for d in _mapped_library_dirs(tuple(sorted(sites))):
        if not any(d == c or d.startswith(c + os.sep) for c in covered):  # lib-dynload is in the stdlib
            binds.append((d, d))
            covered.append(d)
    loader = elf_interpreter(interpreter)
    if loader and os.path.exists(loader):
        binds.append((os.path.realpath(loader), loader))
    binds += [(p, p) for p in pkgs]
    binds += [(os.path.realpath(p), p) for p in extra]
    binds = _without_covered(binds)
    empty = tuple(d for d in (os.path.join(stdlib, "site-packages"), os.path.join(stdlib, "dist-packages"))
                  if os.path.isdir(d))
    masked_files, masked_dirs = [], []
    for src, dest in binds:
        files, dirs = _not_world_readable(src, skip=empty)
        masked_files += [dest + f[len(src):] for f in files]
        masked_dirs += [dest + d[len(src):] for d in dirs]
    return HostLayout(interpreter, tuple(binds), tuple(masked_files), tuple(masked_dirs), empty, tuple(site_dirs))


def find_bwrap() -> str | None:
    """Path of the ``bwrap`` executable, or None."""
    return shutil.which("bwrap") or (os.access("/usr/bin/bwrap", os.X_OK) and "/usr/bin/bwrap") or None


def bwrap_command(bwrap: str, layout: HostLayout, *, env: dict[str, str], seccomp_fd: int, info_fd: int,
                  tmpfs_bytes: int, argv: list[str]) -> list[str]:
    """The full ``bwrap`` argument list of one run.

    Args:
        bwrap: path of the executable.
        layout: the host paths to bind (:func:`host_layout`).
        env: the whole environment inside.
        seccomp_fd: descriptor holding the base seccomp filter (BPF).
        info_fd: descriptor bwrap writes its JSON information to (the sandbox's pid 1 as ``child-pid``).
        tmpfs_bytes: size of the writable working directory.
        argv: the command inside (the interpreter and its arguments).
    """
    cmd = [bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent", "--new-session",
           "--cap-drop", "ALL", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--hostname", "sandbox",
           "--clearenv"]
    for key, value in env.items():
        cmd += ["--setenv", key, value]
    # The working directory's tmpfs first: binds below /tmp (a venv made there) then land on it
    # instead of being hidden under it.
    cmd += ["--size", str(tmpfs_bytes), "--tmpfs", WORK_DIR]
    for src, dest in layout.binds:
        cmd += ["--ro-bind", src, dest]
    for d in layout.empty_dirs + layout.masked_dirs:
        cmd += ["--tmpfs", d, "--remount-ro", d]
    for f in layout.masked_files:
        cmd += ["--ro-bind", "/dev/null", f]  # a device node on a nodev mount: unreadable
    cmd += ["--dir", "/dev"]
    for dev in DEVICES:
        cmd += ["--dev-bind", dev, dev]
    cmd += ["--remount-ro", "/", "--chdir", WORK_DIR, "--info-fd", str(info_fd), "--seccomp", str(seccomp_fd),
            "--", *argv]
    return cmd
