"""A run's folder is one process's: it is claimed with a lock before anything is written, and every
path the run needs is checked before any model loads.

The lock is ``RUN_DIR/.lock``, an exclusive ``flock`` held by the process that writes the run's
metrics (a distributed or hivemind run: its main process) until the run ends; the kernel drops it
when that process exits, however it exits (a SIGKILLed run leaves no stale lock). A second
``dgrpo run`` or ``dgrpo resume`` of the same folder is refused in one line naming the folder, the
holder's process id and what to do; the holder itself may take it again (an ensemble's groups, a resume in the same process).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from dgrpo.config import RunConfig
from dgrpo.config_inputs import path_problem
from dgrpo.errors import ConfigError

LOCK = ".lock"
_held: dict[Path, int] = {}  # claimed folder → descriptor of its lock file
last_claimed: list[Path] = []  # the folder this process claimed last (named by a later disk-full error)
made: set[Path] = set()  # the run folders this process created (mkdir): a start-up stop may remove them (drop_unused)


def claim(run_dir: Path) -> None:
    """Lock ``run_dir`` (which must exist) for this process until :func:`release` or exit.

    Raises:
        ConfigError: another process holds it (names the process id it recorded).
    """
    key = Path(run_dir).resolve()
    if key in _held:
        return
    fd = os.open(key / LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise _busy(run_dir, holder) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    _held[key] = fd
    last_claimed[:] = [key]


def take(run_dir: Path) -> bool:
    """Lock ``run_dir`` for this process if nobody holds it, through a descriptor of its own: a node that became the
    main mid-run writes the run folder only when the main before it let go (it exited, as an expelled main does in
    a swarm of 3 or more), never beside it (issue 31, review r31s: the two halves of a split swarm of 2). Unlike
    :func:`claim`, a lock this process took before through another descriptor (an in-process rank's) counts as held.

    Returns:
        whether this process now holds the lock.
    """
    key = Path(run_dir).resolve()
    fd = os.open(key / LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return False
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    _held[key] = fd
    last_claimed[:] = [key]
    return True


def holder(run_dir: Path) -> str:
    """The process id the holder of ``run_dir``'s lock recorded ("unknown" when none can be read)."""
    try:
        return (Path(run_dir) / LOCK).read_text(errors="replace").strip()[:32] or "unknown"
    except OSError:
        return "unknown"


def _busy(run_dir: Path, holder: str) -> ConfigError:
    return ConfigError(f"the run folder {run_dir} is being written by another dgrpo process (process id {holder} "
                       "on this machine): wait for it to end, or stop it and then resume the run (dgrpo resume "
                       f"{run_dir}); to start a separate run, give it another name (name=...)")


def check_unclaimed(run_dir: Path) -> None:
    """Test, without taking it, whether another process holds ``run_dir``'s lock (a resume's checks
    that fail on a folder being written name that, not the half-written files).

    Raises:
        ConfigError: another process holds it (the line :func:`claim` gives).
    """
    key = Path(run_dir).resolve()
    if key in _held:
        return
    try:
        fd = os.open(key / LOCK, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:  # (no lock file: no run has claimed the folder)
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        raise _busy(run_dir, os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown") from None
    finally:
        os.close(fd)


def release(run_dir: Path) -> None:
    """Drop this process's lock on ``run_dir`` (nothing when it holds none)."""
    fd = _held.pop(Path(run_dir).resolve(), None)
    if fd is not None:
        os.close(fd)


def drop_unused(run_dir: Path) -> bool:
    """After a start-up stop (nothing trained): release ``run_dir`` and remove it if this process created it
    (:data:`made`) and it holds nothing but ``config.yaml`` (and the lock file of this process's own claim). A folder
    it did not create (a resumed run's, another process's) or that holds anything else is kept whole: its files are
    removed one by one and the folder last, which fails if anything else came meanwhile (review r31n G5: a rank that
    agreed on node 1's name made its folder before every rank stopped, and left it behind).

    Returns:
        whether the folder was removed.
    """
    key = Path(run_dir).resolve()
    ours = key in _held
    release(run_dir)
    try:
        names = set(os.listdir(key))
    except OSError:
        return False
    if key not in made or not names <= {"config.yaml", *([LOCK] if ours else [])}:
        return False
    try:
        for name in names:
            (key / name).unlink()
        key.rmdir()  # (not empty: something came meanwhile; the folder stays)
    except OSError:
        return False
    made.discard(key)
    return True


# (dotted key, "file" or "folder") of every path a run reads; a list item is written N
PATHS = [("task.path", "file"), ("task.val_path", "file"), ("hardening.prompts_path", "file"),
         ("swarm.protocol.roster", "file"), ("swarm.protocol.key_dir", "folder"), ("defenses.N.path", "folder")]


def _values(data, parts: list[str], prefix: str = ""):
    """(dotted key, value) of every ``parts`` path in ``data`` (``N`` spans a list)."""
    if not parts:
        yield prefix[:-1], data
        return
    head, rest = parts[0], parts[1:]
    if head == "N" and isinstance(data, list):
        for i, item in enumerate(data):
            yield from _values(item, rest, f"{prefix}{i}.")
    elif isinstance(data, dict) and data.get(head) is not None:
        yield from _values(data[head], rest, f"{prefix}{head}.")


def check_paths(cfg: RunConfig) -> None:
    """Every file the config names is a regular file and every folder a folder (model folders are
    checked by the config itself), and a roster file (``swarm.protocol.roster``) reads as a roster.

    Raises:
        ConfigError: one line naming every path and its key, and what it is instead (missing, a folder,
            a FIFO, a device, unreadable).
    """
    data, missing, wrong = cfg.model_dump(mode="json"), [], []
    for key, kind in PATHS:
        for where, value in _values(data, key.split(".")):
            problem = path_problem(str(value), kind)
            if problem is not None:
                wrong.append((where, kind))
                missing.append(f"{where}: {value} {problem}" if problem.startswith(("is ", "cannot"))
                               else f"{where}: {problem}: {value}")
    roster = data.get("swarm", {}).get("protocol", {}).get("roster") if isinstance(data.get("swarm"), dict) else None
    if roster is not None and not any(m.startswith("swarm.protocol.roster") for m in missing):
        from dgrpo.swarm.identity import Roster  # (its contents too, not only that it is a file: before the model)

        try:
            Roster.load(roster)
        except ValueError as err:
            missing.append(str(err))
    if missing:
        fixes = [f"{where} to an existing {kind}" for where, kind in wrong]  # (the field and the fix, any task)
        data_note = "; docs/datasets.md says where to get the data sets the docs use" if any(
            where.startswith("task.") for where, _ in wrong) else ""  # (a clone ships none)
        hint = f"; set {', '.join(fixes)} (a relative path is read from {Path.cwd()}){data_note}" if fixes else ""
        raise ConfigError("; ".join(missing) + hint)
