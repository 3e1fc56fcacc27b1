"""The converted-weights cache of GGUF files: converted once per file (by its sha256), checked
against its manifest before use, rebuilt when a file in it changed, never shared between files."""

import contextlib
import hashlib
import json
import os
import threading
import time

import pytest
import torch

from dgrpo.policy import converted
from dgrpo.policy.converted import MANIFEST, converted_copy
from tests.tiny_gguf import write_tiny_gguf


@pytest.fixture()
def ggufs(tmp_path_factory, monkeypatch, tmp_path):
    folder = tmp_path_factory.mktemp("ggufs")
    write_tiny_gguf(folder / "a.gguf", seed=0)
    write_tiny_gguf(folder / "b.gguf", seed=1)
    monkeypatch.setenv("DGRPO_CACHE", str(tmp_path / "cache"))
    calls = []
    real = converted.convert_gguf
    monkeypatch.setattr(converted, "convert_gguf", lambda *a: calls.append(a[0].name) or real(*a))
    return folder, calls


def test_a_file_is_converted_once_and_keyed_by_its_sha256(ggufs, tmp_path):
    folder, calls = ggufs
    first = converted_copy(folder / "a.gguf", "tiny")
    digest = hashlib.sha256((folder / "a.gguf").read_bytes()).hexdigest()
    assert first == tmp_path / "cache" / f"tiny-f32-{digest[:12]}"
    manifest = json.loads((first / MANIFEST).read_text())
    assert manifest["source_sha256"] == digest
    assert manifest["files"]["model.safetensors"] == hashlib.sha256((first / "model.safetensors").read_bytes()).hexdigest()
    converted._checked.clear()  # as a new process would see it
    assert converted_copy(folder / "a.gguf", "tiny") == first
    other = converted_copy(folder / "b.gguf", "tiny")  # other bytes under the same name: its own copy
    assert other != first and calls == ["a.gguf", "b.gguf"]
    assert not list((tmp_path / "cache").glob("*.tmp*"))  # nothing left half-written


def test_a_changed_file_in_the_copy_is_converted_again(ggufs):
    folder, calls = ggufs
    copy = converted_copy(folder / "a.gguf", "tiny")
    weights = copy / "model.safetensors"
    good = weights.read_bytes()
    data = bytearray(good)
    data[-5] ^= 0xFF  # one flipped byte inside a tensor
    weights.write_bytes(bytes(data))
    assert converted_copy(folder / "a.gguf", "tiny") == copy
    assert calls == ["a.gguf", "a.gguf"] and weights.read_bytes() == good
    (copy / MANIFEST).unlink()  # no manifest (an interrupted or foreign folder): not trusted either
    converted_copy(folder / "a.gguf", "tiny")
    assert len(calls) == 3


def test_a_file_the_manifest_does_not_list_is_converted_again(ggufs):
    """An extra file in a verified copy (here a special_tokens_map.json that renames eos and pad, or a file in a
    subfolder) is not used: the folder no longer matches its manifest, so it is converted again, in the same
    process too (the memo covers subfolders), and the extra file is gone."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, calls = ggufs
    copy = converted_copy(folder / "a.gguf", "tiny")
    eos, pad = (lambda t: (t.eos_token, t.pad_token))(AutoTokenizer.from_pretrained(copy))
    AutoModelForCausalLM.from_pretrained(copy)
    assert converted_copy(folder / "a.gguf", "tiny") == copy and calls == ["a.gguf"]  # loading wrote nothing there
    extra = copy / "special_tokens_map.json"
    extra.write_text(json.dumps({"eos_token": "hello", "pad_token": "hello"}))
    assert AutoTokenizer.from_pretrained(copy).eos_token == "hello"  # what a load would have used unchecked
    assert converted_copy(folder / "a.gguf", "tiny") == copy and calls == ["a.gguf", "a.gguf"]
    assert not extra.exists()
    assert (lambda t: (t.eos_token, t.pad_token))(AutoTokenizer.from_pretrained(copy)) == (eos, pad)
    (copy / "sub").mkdir()
    (copy / "sub" / "config.json").write_text("{}")
    converted_copy(folder / "a.gguf", "tiny")
    assert len(calls) == 3 and not (copy / "sub").exists()
    (copy / "empty").mkdir()  # an empty subfolder holds no file, but is not the conversion's either
    converted_copy(folder / "a.gguf", "tiny")
    assert len(calls) == 4 and not (copy / "empty").exists()


def test_processes_starting_together_convert_once(ggufs):
    folder, calls = ggufs
    out = []
    threads = [threading.Thread(target=lambda: out.append(converted_copy(folder / "a.gguf", "tiny"))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(out)) == 1 and len(out) == 3 and calls == ["a.gguf"]


def test_the_copy_holds_the_gguf_weights(ggufs, tmp_path):
    from transformers import AutoModelForCausalLM

    folder, _ = ggufs
    written = write_tiny_gguf(tmp_path / "again.gguf", seed=0)
    model = AutoModelForCausalLM.from_pretrained(converted_copy(folder / "a.gguf", "tiny"))
    for name, value in written.state_dict().items():
        assert torch.equal(model.state_dict()[name], value), name


def test_parsing_the_file_once_writes_the_same_bytes(tmp_path, monkeypatch):
    """The conversion (transformers' loader, each GGUF parse and name table made once) writes every file
    byte for byte as transformers' loader left alone does, and parses the file once instead of three times."""
    import gguf

    src = tmp_path / "a.gguf"
    write_tiny_gguf(src, seed=0)
    built = []
    real_reader = gguf.GGUFReader

    class Counted(real_reader):
        def __init__(self, *args, **kwargs):
            built.append(args[0])
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(gguf, "GGUFReader", Counted)
    fast = converted.convert_gguf(src, tmp_path / "fast")
    parses_fast, built[:] = len(built), []
    monkeypatch.setattr(converted, "gguf_parsed_once", contextlib.nullcontext)
    plain = converted.convert_gguf(src, tmp_path / "plain")
    assert (parses_fast, len(built)) == (1, 3)
    assert gguf.GGUFReader is Counted  # put back after the block
    names = sorted(p.name for p in plain.iterdir())
    assert names == sorted(p.name for p in fast.iterdir()) and "model.safetensors" in names
    for name in names:
        assert (fast / name).read_bytes() == (plain / name).read_bytes(), name


def test_changed_bytes_with_size_and_mtime_put_back_are_seen_in_the_same_process(ggufs):
    """review r38 F5: the memo's key was size and mtime, so bytes changed with os.utime putting mtime back passed
    unhashed; ctime and inode are in the key now (utime cannot set ctime)."""
    folder, calls = ggufs
    copy = converted_copy(folder / "a.gguf", "tiny")
    target = copy / "config.json"
    st = target.stat()
    data = target.read_bytes()
    assert b" " in data
    time.sleep(0.01)
    target.write_bytes(data.replace(b" ", b"\t", 1))  # the same size, other bytes
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert target.stat().st_size == st.st_size and target.stat().st_mtime_ns == st.st_mtime_ns
    converted_copy(folder / "a.gguf", "tiny")
    assert calls == ["a.gguf", "a.gguf"]  # converted again, not taken on the memo


@pytest.mark.parametrize("bad", ["deep", "fifo", "huge"])
def test_a_hostile_manifest_means_a_fresh_conversion_not_a_crash_or_a_hang(ggufs, bad):
    """review r38 F7: a manifest of 200,000 '[' raised RecursionError out of converted_copy, a FIFO blocked the
    read forever, a link to /dev/zero filled memory. Each is now a folder that does not match: converted again."""
    folder, calls = ggufs
    copy = converted_copy(folder / "a.gguf", "tiny")
    manifest = copy / "dgrpo-converted.json"
    manifest.unlink()
    if bad == "deep":
        manifest.write_text("[" * 200_000)
    elif bad == "fifo":
        os.mkfifo(manifest)
    else:
        manifest.symlink_to("/dev/zero")
    done = threading.Thread(target=converted_copy, args=(folder / "a.gguf", "tiny"), daemon=True)
    done.start()
    done.join(60)  # (the FIFO blocked forever before)
    assert not done.is_alive()
    assert calls == ["a.gguf", "a.gguf"] and manifest.is_file() and not manifest.is_symlink()
