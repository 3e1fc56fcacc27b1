"""Converted weights of a GGUF file, made once per file and checked every time they are used.

transformers dequantises a GGUF file to float32 on every load (15-22 s for SmolLM2-135M on 2 CPU
cores). :func:`converted_copy` saves the result as safetensors under the cache directory, in a
folder named after the GGUF file's sha256, so

* the same file is never converted twice (not by later runs, not by processes that start at once:
  the first converts under a lock, the others wait and take its copy);
* a copy made from other bytes (an updated package, another quantisation) is never taken for it;
* a copy is used only when the files in it (subfolders included) are exactly those its manifest
  (``dgrpo-converted.json``) recorded at conversion, each with the sha256 recorded, otherwise it is
  converted again (a file added to the folder, such as a ``special_tokens_map.json`` that would rename
  the tokenizer's eos, counts as a change);
* a conversion is written to a temporary folder and renamed into place, so an interrupted one
  leaves nothing that a later load would trust.

Checking a copy hashes its files (about 0.5 s for SmolLM2's 538 MB), once per process.

A conversion runs transformers' own GGUF loader (the copy is what ``from_pretrained(gguf_file=...)``
gives), with its repeated work done once (:func:`gguf_parsed_once`): 13.6 → 5.3 CPU s for SmolLM2-135M,
the same bytes in every file written.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import logging
import os
import shutil
import stat
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import torch

log = logging.getLogger(__name__)

MANIFEST = "dgrpo-converted.json"
MANIFEST_BYTES = 1 << 20  # a manifest lists a dozen files: a few KiB
_checked: dict[tuple, bool] = {}  # (folder, source sha256, files' sizes and mtimes) -> verified
_digests: dict[tuple, str] = {}  # (GGUF path, size, mtime) -> its sha256
_patching = threading.Lock()  # one gguf_parsed_once block at a time in a process (it swaps module attributes)


def cache_dir() -> Path:
    """Where converted weights are cached: ``$DGRPO_CACHE`` or ``~/.cache/dgrpo``."""
    return Path(os.environ.get("DGRPO_CACHE", Path.home() / ".cache" / "dgrpo"))


def file_sha256(path: Path) -> str:
    """Hex sha256 of a file's bytes (hashlib, 1 MiB reads)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _entries(folder: Path) -> list[Path]:
    """Everything under ``folder`` (subfolders included, symlinks not followed), sorted."""
    return sorted(folder.rglob("*")) if folder.is_dir() else []


def _stamp(folder: Path) -> tuple:
    def stamp(p: Path) -> tuple:
        try:
            st = p.stat()
        except OSError:  # a dangling symlink: still an entry, so still part of the key
            st = p.lstat()
        # (ctime and inode too: bytes changed with size and mtime put back, os.utime, or a file renamed over, change
        # them, so the memo is not taken for a folder that changed; review r38 F5)
        return p.relative_to(folder).as_posix(), st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino

    return tuple(stamp(p) for p in _entries(folder))


def _listed(folder: Path) -> dict[str, Path]:
    """The files under ``folder`` as a manifest names them (paths relative to it, ``/``-separated)."""
    return {p.relative_to(folder).as_posix(): p for p in _entries(folder) if p.is_file() and not p.is_symlink()}


def _exactly(folder: Path, files: dict) -> bool:
    """True when the entries under ``folder`` are the manifest, the files it lists and their folders, nothing else."""
    expected = {MANIFEST, *files}
    expected |= {"/".join(name.split("/")[:i]) for name in files for i in range(1, name.count("/") + 1)}
    return {p.relative_to(folder).as_posix() for p in _entries(folder)} == expected


def verified(folder: Path, source_sha256: str) -> bool:
    """True when ``folder`` holds a conversion of the file with ``source_sha256``: the files under it
    (subfolders included) are exactly the manifest and the files it lists, each with the sha256 listed
    (memoised per process while no entry under the folder changes)."""
    key = (str(folder), source_sha256, _stamp(folder))
    if key not in _checked:
        try:
            st = (folder / MANIFEST).lstat()  # a regular file of a manifest's size (r38 F7: a FIFO blocked, a link
            if not stat.S_ISREG(st.st_mode) or st.st_size > MANIFEST_BYTES:  # to /dev/zero filled memory)
                raise ValueError("not a manifest")
            manifest = json.loads((folder / MANIFEST).read_bytes()[:MANIFEST_BYTES])
            files = manifest["files"]
            _checked[key] = (manifest.get("source_sha256") == source_sha256 and bool(files)
                             and _exactly(folder, files) and set(_listed(folder)) == {MANIFEST, *files}
                             and all(file_sha256(folder / name) == digest for name, digest in files.items()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):  # (deep JSON: r38 F7)
            _checked[key] = False
    return _checked[key]


@contextmanager
def gguf_parsed_once() -> Iterator[None]:
    """Inside the block, transformers' GGUF loading parses each file once and builds gguf's tensor-name table once.

    ``from_pretrained(gguf_file=...)`` of a tokenizer and then a model makes transformers build a
    ``gguf.GGUFReader`` of the file three times (config, tokenizer, weights), each parsing every
    metadata field again (SmolLM2's 49,152 tokens and 48,900 merges: ~2 CPU s a parse), and rebuild
    ``gguf.get_tensor_name_map(arch, layers)`` for every submodule it maps (397 for SmolLM2: ~4 CPU s).
    Both are pure functions of their arguments for a file that does not change during the block, so the
    block hands out one reader per (path, mode) and one table per (arch, layers): the same objects,
    read the same way, hence the same tokenizer and tensors. transformers reads both names from the
    ``gguf`` module at call time (``from gguf import GGUFReader`` inside its loader), which is what the
    block swaps; it restores them, and drops the readers (their memory maps), on the way out. Blocks in
    one process run one at a time.
    """
    import gguf

    with _patching:
        reader_cls, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
        readers: dict[tuple, object] = {}

        def reader(path, mode="r"):
            key = (os.fspath(path), mode)
            if key not in readers:
                readers[key] = reader_cls(path, mode)
            return readers[key]

        gguf.GGUFReader, gguf.get_tensor_name_map = reader, functools.lru_cache(maxsize=None)(name_map)
        try:
            yield
        finally:
            gguf.GGUFReader, gguf.get_tensor_name_map = reader_cls, name_map
            readers.clear()


def convert_gguf(src: Path, target: Path, source_sha256: str | None = None) -> Path:
    """Save a float32 safetensors copy of the GGUF file ``src`` (weights, tokenizer and a manifest of
    every file's sha256) as the folder ``target``, written aside and renamed into place.

    Args:
        source_sha256: the sha256 of ``src`` (computed when None), recorded in the manifest.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source_sha256 = source_sha256 or file_sha256(src)
    log.info("converting %s to safetensors under %s (once)", src.name, target)
    with gguf_parsed_once():
        tokenizer = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
        model = AutoModelForCausalLM.from_pretrained(src.parent, gguf_file=src.name, dtype=torch.float32)
    # A GGUF-loaded model keeps a quantization config that makes it look untrainable; the saved
    # copy is plain float32.
    if getattr(model, "hf_quantizer", None) is not None:
        model.hf_quantizer.remove_quantization_config(model)
    tmp = target.with_name(f"{target.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    files = {name: file_sha256(p) for name, p in _listed(tmp).items()}
    (tmp / MANIFEST).write_text(json.dumps({"source": src.name, "source_sha256": source_sha256, "files": files},
                                           indent=1))
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
    return target


def converted_copy(src: Path, name: str, source_sha256: str | None = None) -> Path:
    """The verified safetensors copy of the GGUF file ``src``, converted on first use.

    Args:
        src: the GGUF file.
        name: the model's name, the start of the folder name (``{name}-f32-{sha256[:12]}``).
        source_sha256: ``src``'s sha256 when already known and checked (a pinned packaged file);
            otherwise it is computed from ``src``.

    Returns:
        The folder under :func:`cache_dir`, ready for ``from_pretrained``.
    """
    if source_sha256 is None:
        stat = src.stat()
        key = (str(src), stat.st_size, stat.st_mtime_ns)
        if key not in _digests:
            _digests[key] = file_sha256(src)
        source_sha256 = _digests[key]
    digest = source_sha256
    target = cache_dir() / f"{name}-f32-{digest[:12]}"
    if verified(target, digest):
        return target
    locks = target.parent / ".locks"
    locks.mkdir(parents=True, exist_ok=True)
    with open(locks / f"{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one conversion at a time; the others then find its copy
        if verified(target, digest):
            return target
        if target.exists():
            log.warning("%s does not match its manifest (a file changed, missing, or not listed in it); converting %s again",
                        target, src.name)
        convert_gguf(src, target, digest)
        if not verified(target, digest):
            raise OSError(f"{target}: the conversion just written does not match its manifest")
        return target
