"""The bubblewrap command line of one sandboxed program run (the OS boundary, see docs/sandbox.md).

:func:`bwrap_command` builds ``bwrap … python -I -S -B -c BOOTSTRAP FD RUN_ID``: new user, PID,
network, IPC, UTS, cgroup and mount namespaces; no capability but the three the runner needs for its
set-up (``CAP_SYS_ADMIN`` for the work tmpfs, ``CAP_SETUID``/``CAP_SETGID`` to drop to the sandbox
identity, which then clears all three); ``--die-with-parent`` and ``--new-session``; an empty environment but for a
few fixed variables; the base seccomp filter (:mod:`dgrpo.rewards.seccomp`). The file system is a
read-only tmpfs holding only

* the interpreter binary, its ``libpython`` and its standard library (``site-packages`` masked),
* the shared libraries the interpreter has mapped (``/proc/self/maps``): their directories, or the
  files alone where a directory also holds the interpreter's own tree (``…/lib`` of a pyenv or conda
  install); never a ``site-packages`` directory; and the loader at the path the interpreter names (PT_INTERP),
* the package directories of the third-party modules a program names (numpy, sympy, mpmath),
* ``/dev/null`` (the only device: random numbers come from ``getrandom``),
* ``/tmp``: a fresh tmpfs of bounded size and inodes, ``noexec``, mounted by the runner (by bwrap,
  without the inode bound, where a bind lands under ``/tmp``): the working directory, the only
  writable place.

**Identity.** Run by root, the sandbox's uid and gid 65534 map to :data:`HOST_ID`, an id that owns
no file on the host: bwrap creates the user namespace and waits (``--userns-block-fd``) while the
host writes the maps (:func:`dgrpo.rewards.supervise.write_id_maps`); bwrap sets up the mounts as
root of the namespace (0 maps to 0 for that), and the runner drops to 65534 before anything else,
which clears its capabilities. So the kernel's own permission checks keep every host file that is
not world-readable unreadable, now and whenever it is created, and no lease, ``chmod`` or ``utime``
on a host file is possible (the program owns none). Run by another user, bwrap maps 65534 to that
user (the only mapping an unprivileged process may write), and :func:`hidden_paths` also masks the
bound files and directories that are not world-readable.

**Special files.** Before every run :func:`hidden_paths` looks for FIFOs, sockets and device nodes
in the bound trees (a read-only bind does not stop a FIFO write) and masks each; the trees are read
once and then watched with inotify (:mod:`dgrpo.rewards.bound_tree`).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import struct
import sys
import sysconfig
from dataclasses import dataclass

from dgrpo.rewards import bound_tree

SANDBOX_UID = 65534  # uid and gid inside the sandbox ("nobody")
HOST_ID = 2_000_000_000  # what SANDBOX_UID is outside when root runs the sandbox: in the range systemd
# leaves unused (1879048192-2147352575), owner of no file
WORK_DIR = "/tmp"  # the program's working directory inside: a fresh tmpfs, the only writable place
RUNNER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sandbox_runner.py")
DEVICES = ("/dev/null",)  # random numbers come from getrandom(2), not /dev/urandom


@dataclass(frozen=True)
class HostLayout:
    """What of the host the sandbox sees (the binds are computed once per process and package set).

    Attributes:
        interpreter: the real path of the base interpreter binary (no venv wrapper).
        binds: ``(host path, sandbox path)`` pairs, bound read-only.
        empty_dirs: bound directories replaced by an empty read-only tmpfs (``site-packages``).
        site_dirs: directories to put on ``sys.path`` inside (parents of the third-party packages).
    """

    interpreter: str
    binds: tuple[tuple[str, str], ...]
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


def _mapped_libraries(exclude: tuple[str, ...]) -> dict[str, set[str]]:
    """Directory -> file names (real paths) of the shared libraries this process has mapped, minus ``exclude`` trees."""
    found: dict[str, set[str]] = {}
    with open("/proc/self/maps") as fh:
        for line in fh:
            path = line.split(maxsplit=5)[-1].strip() if line.count(" ") >= 5 else ""
            if path.startswith("/") and ".so" in os.path.basename(path):
                real = os.path.realpath(path)
                folder = os.path.dirname(real)
                if not any(folder == e or folder.startswith(e + os.sep) for e in exclude):
                    found.setdefault(folder, set()).add(os.path.basename(real))
    return found


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
    trees = (stdlib, *sites)
    for folder, files in sorted(_mapped_libraries(tuple(sorted(sites))).items()):
        if folder == stdlib or folder.startswith(stdlib + os.sep):
            continue  # lib-dynload is in the stdlib
        if any(t.startswith(folder + os.sep) for t in trees):
            binds += [(os.path.join(folder, f), os.path.join(folder, f)) for f in sorted(files)]  # libpython's own lib/
        else:
            binds.append((folder, folder))
    loader = elf_interpreter(interpreter)
    if loader and os.path.exists(loader):
        binds.append((os.path.realpath(loader), loader))
    binds += [(p, p) for p in pkgs]
    binds += [(os.path.realpath(p), p) for p in extra]
    binds = _without_covered(binds)
    empty = tuple(d for d in (os.path.join(stdlib, "site-packages"), os.path.join(stdlib, "dist-packages"))
                  if os.path.isdir(d))
    return HostLayout(interpreter, tuple(binds), empty, tuple(site_dirs))


def hidden_paths(layout: HostLayout, modes: bool) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(files, dirs)`` to mask inside: every FIFO, socket or device node in a bound tree and, with
    ``modes`` (a sandbox whose identity owns the bound files), every file that is not world-readable
    and every directory that is not world-searchable; current at the call
    (:func:`dgrpo.rewards.bound_tree.hidden_paths`)."""
    return bound_tree.hidden_paths(layout.binds, layout.empty_dirs, modes)


def _ancestors(dests: list[str]) -> list[str]:
    """Directories above the bind destinations, outermost first, that no bind provides."""
    found: set[str] = set()
    for dest in dests:
        parent = os.path.dirname(dest)
        while parent not in ("/", "") and not any(parent == d or parent.startswith(d + os.sep) for d in dests):
            found.add(parent)
            parent = os.path.dirname(parent)
    return sorted(found, key=lambda d: (d.count(os.sep), d))


def find_bwrap() -> str | None:
    """Path of the ``bwrap`` executable, or None."""
    return shutil.which("bwrap") or (os.access("/usr/bin/bwrap", os.X_OK) and "/usr/bin/bwrap") or None


def runner_mounts_work(layout: HostLayout) -> bool:
    """Whether the runner can mount the work tmpfs itself (with an inode limit): when no bind lands
    under :data:`WORK_DIR` (a venv made in /tmp), which its mount would hide."""
    return not any(dest == WORK_DIR or dest.startswith(WORK_DIR + os.sep) for _, dest in layout.binds)


def bwrap_command(bwrap: str, layout: HostLayout, *, env: dict[str, str], seccomp_fd: int, info_fd: int,
                  tmpfs_bytes: int | None, argv: list[str], userns_block_fd: int | None,
                  hidden: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())) -> list[str]:
    """The full ``bwrap`` argument list of one run.

    Args:
        bwrap: path of the executable.
        layout: the host paths to bind (:func:`host_layout`); hidden: ``(files, dirs)`` masked over
            them (:func:`hidden_paths`).
        env: the whole environment inside.
        seccomp_fd: descriptor holding the base seccomp filter (BPF).
        info_fd: descriptor bwrap writes its JSON information to (the sandbox's pid 1 as ``child-pid``).
        tmpfs_bytes: size of the writable working directory that bwrap mounts; None: the runner mounts
            it (with an inode limit; root only, see :func:`runner_mounts_work`).
        argv: the command inside (the interpreter and its arguments).
        userns_block_fd: bwrap waits on it until the host has mapped the sandbox identity (root
            only); None: bwrap maps :data:`SANDBOX_UID` to the caller.
    """
    cmd = [bwrap, "--unshare-all", "--unshare-user", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    if userns_block_fd is not None:  # set-up as root of the namespace; the runner drops to SANDBOX_UID
        cmd += ["--userns-block-fd", str(userns_block_fd), "--uid", "0", "--gid", "0",
                "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        if tmpfs_bytes is None:
            cmd += ["--cap-add", "CAP_SYS_ADMIN"]
    else:
        cmd += ["--disable-userns", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]
    cmd += ["--hostname", "sandbox", "--clearenv"]
    for key, value in env.items():
        cmd += ["--setenv", key, value]
    # The working directory's tmpfs first: binds below /tmp (a venv made there) then land on it
    # instead of being hidden under it.
    if tmpfs_bytes is not None:
        cmd += ["--size", str(tmpfs_bytes), "--perms", "1777", "--tmpfs", WORK_DIR]
    else:
        cmd += ["--perms", "0755", "--dir", WORK_DIR]
    for d in _ancestors([dest for _, dest in layout.binds]):  # bwrap would make them 0700: unsearchable
        cmd += ["--perms", "0755", "--dir", d]
    for src, dest in layout.binds:
        cmd += ["--ro-bind", src, dest]
    for d in layout.empty_dirs + hidden[1]:
        cmd += ["--tmpfs", d, "--remount-ro", d]
    for f in hidden[0]:
        cmd += ["--ro-bind", "/dev/null", f]  # a device node on a nodev mount: unreadable, unwritable
    cmd += ["--dir", "/dev"]
    for dev in DEVICES:
        cmd += ["--dev-bind", dev, dev]
    cmd += ["--remount-ro", "/", "--chdir", WORK_DIR, "--info-fd", str(info_fd), "--seccomp", str(seccomp_fd),
            "--", *argv]
    return cmd
