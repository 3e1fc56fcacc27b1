"""Files a crash cannot half-write and an edit cannot slip past: checksums, fsync, small JSON state
files written atomically and sealed with their own checksum, and a full disk as one line.

A sealed state file holds its data plus ``"sha256"``: the SHA-256 of the data's canonical JSON
(sorted keys, no spaces). It detects damage and hand edits (``next_round`` changed in a text editor);
it is not a signature, since whoever can write the folder can recompute it.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
from pathlib import Path

from safetensors import SafetensorError

from dgrpo.errors import CheckpointError

_HASH_CHUNK = 1 << 22
SEAL = "sha256"  # the key of a state file's own checksum


def sha256(path: Path) -> str:
    """Hex SHA-256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_HASH_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def fsync(path: Path) -> None:
    """Flush a file's (or a folder's entries') data to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def digest(data: dict) -> str:
    """SHA-256 of ``data`` (without its seal) as canonical JSON."""
    body = {k: v for k, v in data.items() if k != SEAL}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def seal(data: dict) -> dict:
    """``data`` with its own checksum under :data:`SEAL`."""
    return {**{k: v for k, v in data.items() if k != SEAL}, SEAL: digest(data)}


def check_seal(path: Path, data) -> None:
    """Refuse a state whose recorded checksum is missing or not its data's.

    Raises:
        CheckpointError: names the file; a missing seal is a state written by an older dgrpo.
    """
    if not isinstance(data, dict) or not isinstance(data.get(SEAL), str):
        raise CheckpointError(f"{path}: no checksum of its own (written by an older dgrpo, or not by dgrpo); "
                              "the checkpoint cannot be verified: resume it with the dgrpo that wrote it")
    if data[SEAL] != digest(data):
        raise CheckpointError(f"{path}: changed after the save (its checksum differs); restore the file as saved, "
                              "or resume from another checkpoint")


def write_state(path: Path, data: dict) -> None:
    """Write a small JSON state file sealed (:func:`seal`), atomically and durably (temporary file,
    fsync, rename, fsync of the folder)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        tmp.write_text(json.dumps(seal(data)))
        fsync(tmp)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)  # atomic: ranks sharing a file system may write the same file
    fsync(path.parent)


def folder_bytes(folder: Path) -> int:
    """Bytes of the regular files under ``folder`` (0 when it does not exist)."""
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else 0


def free_bytes(folder: Path) -> int:
    """Bytes free to this user on the file system of ``folder`` (0 when it cannot be asked)."""
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return 0


def is_disk_full(err: BaseException) -> bool:
    """Whether ``err`` is a write that failed for lack of space or quota (an OSError with ENOSPC or
    EDQUOT, or safetensors' and torch's own wrappings of it)."""
    if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    text = str(err)
    return isinstance(err, (SafetensorError, RuntimeError, OSError)) and (
        "No space left" in text or "StorageFull" in text or "Disk quota" in text
        or "file write failed" in text or "unexpected pos" in text)  # (torch's zip writer reports ENOSPC only so)


def disk_full_error(folder: Path, needed: int, previous: bool = True) -> CheckpointError:
    """The one line for a save that ran out of space in ``folder``: how much it needs, how much is
    free, and what to do: resume from the previous checkpoint, which is intact (``previous``), or, at
    the run's first save (none earlier), start the run again, since there is nothing to resume."""
    free = free_bytes(folder if folder.exists() else folder.parent)
    then = ("`dgrpo resume` the run: its previous checkpoint is intact" if previous else
            f"start the run again (delete {folder.parent} or give another name=...): this was its first save, so "
            "no checkpoint exists to resume")
    return CheckpointError(
        f"{folder}: the disk is full: this save needs about {needed / 2**20:.1f} MiB, {free / 2**20:.1f} MiB are free; "
        f"free at least {max(needed - free, 0) / 2**20 + 1:.0f} MiB on that file system (old runs, caches) and {then}")


def disk_full_after_save(err: OSError, run_dir: Path | None) -> str:
    """The one line for a write that ran out of space outside a checkpoint save (a plot, a log line):
    the file, the run folder, what to free, and that the last checkpoint is kept (or, before the run's
    first checkpoint, that the run starts again: ``dgrpo resume`` has nothing to resume)."""
    where = err.filename or run_dir or "a file"
    folder = run_dir or (Path(err.filename).parent if err.filename else None)
    saved = folder is not None and ((Path(folder) / "checkpoint" / "state.json").exists()
                                    or any((Path(folder) / "checkpoint").glob("node*/state.json")))
    tail = (f"; free space on the file system of {folder} (old runs, caches), then `dgrpo resume {folder}` "
            f"continues it from its last checkpoint (a run whose rounds are all done needs no resume: `dgrpo report "
            f"{folder}` draws its figures)" if saved else
            f"; free space on the file system of {folder} (old runs, caches), then delete {folder} and run again with "
            f"the same name: no checkpoint was saved yet, so there is nothing to resume" if folder is not None else
            "; free space on that file system (old runs, caches)")
    return f"{where}: the disk is full ({err.strerror or 'No space left on device'}) while writing the run's files{tail}"
