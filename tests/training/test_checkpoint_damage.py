"""Damaged, mismatched and half-swapped checkpoints (issue 18, point 3): each is one line on stderr
naming the file, never a traceback and never a silently wrong resume; an interrupted swap is
recovered from the old copy; every file is fsynced before the renames."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch

from dgrpo.cli import main
from dgrpo.metrics.logger import read_metrics
from dgrpo.training import checkpoint
from dgrpo.training.checkpoint import sha256
from dgrpo.training.durable import seal

COMMON = ["threads=1", "swarm.nodes=2", "swarm.group_size=4", "swarm.prompts_per_round=2", "sampling.max_new_tokens=24",
          "eval.every=2", "eval.n_prompts=2", "task.n_train=20", "task.n_val=5", "task.few_shot=0", "grpo.lr=0.01",
          "swarm.malicious=[1]", "attack.kind=injection", "attack.poisoned_per_group=1"]


def metrics(run_dir):
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in read_metrics(run_dir)]


@pytest.fixture(scope="module")
def saved(tmp_path_factory, tiny_model_dir):
    """A finished 2-round run (checkpoint at round 2) and the metrics of the same run taken to 4 rounds."""
    out = tmp_path_factory.mktemp("ckpt")
    args = [f"model.name={tiny_model_dir}", *COMMON, f"out_dir={out}"]
    assert main(["run", *args, "rounds=4", "name=straight"]) == 0
    assert main(["run", *args, "rounds=2", "name=part"]) == 0
    return out / "part", metrics(out / "straight")


@pytest.fixture()
def run_dir(saved, tmp_path):
    target = tmp_path / "part"
    shutil.copytree(saved[0], target)
    return target


def node0(run_dir) -> Path:
    return run_dir / "checkpoint" / "node0"


def edit_state(run_dir, change, reseal=True) -> None:
    """Change node0's state; ``reseal``: record its new checksum too, so the checks behind it are reached."""
    path = node0(run_dir) / "state.json"
    state = json.loads(path.read_text())
    change(state)
    path.write_text(json.dumps(seal(state) if reseal else state))


def rehash(run_dir, name) -> None:
    """Record the current checksum of ``name``: the damage below the checksum check is reached."""
    edit_state(run_dir, lambda s: s["files"].__setitem__(name, sha256(node0(run_dir) / name)))


def resume_fails(run_dir, capsys, *needles, overrides=("rounds=4",)):
    rc = main(["resume", str(run_dir), *overrides])
    err = capsys.readouterr().err
    assert rc == 2, err
    last = err.rstrip("\n").rsplit("\n", 1)[-1]  # (above it: the model loader's progress bar)
    assert last.startswith("dgrpo: error: ") and err.count("dgrpo: error") == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in last, err
    return last


def test_every_file_has_its_checksum_recorded(run_dir):
    state = json.loads((node0(run_dir) / "state.json").read_text())
    files = sorted(p.name for p in node0(run_dir).iterdir() if p.name != "state.json")
    assert sorted(state["files"]) == files and {"model.safetensors", "optimizer.pt", "config.json"} <= set(files)
    import hashlib

    weights = (node0(run_dir) / "model.safetensors").read_bytes()
    assert state["files"]["model.safetensors"] == hashlib.sha256(weights).hexdigest()


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty"])
@pytest.mark.parametrize("name", ["model.safetensors", "optimizer.pt", "tokenizer.json", "config.json"])
def test_a_damaged_file_is_named_by_its_checksum(run_dir, capsys, name, damage):
    path = node0(run_dir) / name
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0x01  # one bit
    path.write_bytes(bytes(data[: len(data) // 2]) if damage == "truncate" else b"" if damage == "empty" else bytes(data))
    resume_fails(run_dir, capsys, f"{path}: checksum differs")


def test_damaged_weights_behind_a_matching_checksum_are_named(run_dir, capsys):
    path = node0(run_dir) / "model.safetensors"
    path.write_bytes(path.read_bytes()[:100])
    rehash(run_dir, "model.safetensors")
    resume_fails(run_dir, capsys, f"{path}: does not fit the model")


def test_weights_of_another_shape_are_named(run_dir, capsys, tiny_model_dir_b):
    shutil.copy(Path(tiny_model_dir_b) / "model.safetensors", node0(run_dir) / "model.safetensors")
    rehash(run_dir, "model.safetensors")  # (as if saved so: the shapes are what is wrong)
    resume_fails(run_dir, capsys, "node0/model.safetensors: does not fit the model", "size mismatch")


def test_resuming_with_another_model_is_named(run_dir, capsys, tiny_model_dir, tiny_model_dir_b):
    # the checkpoint records its run: another model.name is another run, refused before any model loads
    resume_fails(run_dir, capsys, "node0/state.json: saved by another run",
                 f"model.name: '{tiny_model_dir}' at the save, '{tiny_model_dir_b}' now",
                 overrides=("rounds=4", f"model.name={tiny_model_dir_b}"))


@pytest.mark.parametrize("content", [b"garbage", b"PK\x03\x04" + b"\x00" * 64, b""])
def test_an_unreadable_optimizer_state_is_named(run_dir, capsys, content):
    (node0(run_dir) / "optimizer.pt").write_bytes(content)
    rehash(run_dir, "optimizer.pt")
    resume_fails(run_dir, capsys, "node0/optimizer.pt: not a readable optimizer state")


@pytest.mark.parametrize("change, message", [
    (lambda s: s["state"][0].__setitem__("exp_avg", s["state"][0]["exp_avg"].flatten()[:7]), "exp_avg of parameter 0 has shape (7,)"),
    (lambda s: s["state"].__setitem__(999, {"step": torch.tensor(1.0)}), "unknown parameter 999"),
    (lambda s: s["param_groups"][0].__setitem__("params", [0]), "does not fit this model"),
    (lambda s: s.pop("state"), "does not fit this model"),
])
def test_an_optimizer_state_that_does_not_fit_is_named(run_dir, capsys, change, message):
    path = node0(run_dir) / "optimizer.pt"
    state = torch.load(path, weights_only=True)
    change(state)
    torch.save(state, path)
    rehash(run_dir, "optimizer.pt")
    resume_fails(run_dir, capsys, f"{path}: ", message)


@pytest.mark.parametrize("change", [
    lambda r: r.__setitem__("torch", [1, 2, 3]),
    lambda r: r.__setitem__("torch", [300] * len(r["torch"])),
    lambda r: r["python"].__setitem__(1, r["python"][1][:10]),
    lambda r: r["python"].__setitem__(1, [-1] * 625),
    lambda r: r.__setitem__("numpy", ["PCG64", *r["numpy"][1:]]),
    lambda r: r["numpy"].__setitem__(2, 10**6),
    lambda r: r.pop("numpy"),
    lambda r: r.__setitem__("cuda", "gpu"),
])
def test_a_garbage_rng_state_is_named(run_dir, capsys, change):
    edit_state(run_dir, lambda s: change(s["rng"]))
    resume_fails(run_dir, capsys, "node0/state.json: damaged RNG state")


@pytest.mark.parametrize("value, message", [(-3, "negative"), (10**6, "past rounds=4"), (5, "past rounds=4"),
                                            (True, "integer 'next_round'"), ("2", "integer 'next_round'"),
                                            (2.0, "integer 'next_round'"), (None, "integer 'next_round'")])
def test_next_round_is_validated(run_dir, capsys, value, message):
    edit_state(run_dir, lambda s: s.__setitem__("next_round", value))
    resume_fails(run_dir, capsys, "node0/state.json: ", message)


def test_a_checkpoint_past_the_rounds_asked_for_is_refused(run_dir, capsys):
    # the checkpoint holds round 2: resuming with rounds=1 would mislabel weights trained for 2 rounds
    last = resume_fails(run_dir, capsys, "holds round 2, past rounds=1", "a run cannot be shortened",
                        "resume with rounds of at least 2", overrides=("rounds=1",))
    assert "damaged" not in last


@pytest.mark.parametrize("change, message", [
    (lambda s: s.pop("files"), "no file checksums recorded"),
    (lambda s: s["files"].pop("optimizer.pt"), "optimizer.pt: not recorded"),
    (lambda s: s["files"].__setitem__("../../escape", "0" * 64), "missing from the checkpoint"),
    (lambda s: s["files"].__setitem__("weights2.safetensors", "0" * 64), "weights2.safetensors: missing"),
])
def test_a_state_with_a_bad_file_list_is_named(run_dir, capsys, change, message):
    edit_state(run_dir, change)
    resume_fails(run_dir, capsys, message)


def test_an_extra_weights_file_is_named(run_dir, capsys):
    shutil.copy(node0(run_dir) / "model.safetensors", node0(run_dir) / "model-00002.safetensors")
    resume_fails(run_dir, capsys, "node0/model-00002.safetensors: not recorded at the save")


def test_a_missing_file_is_named(run_dir, capsys):
    (node0(run_dir) / "optimizer.pt").unlink()
    resume_fails(run_dir, capsys, "node0/optimizer.pt: missing from the checkpoint")
    (node0(run_dir) / "state.json").unlink()
    resume_fails(run_dir, capsys, "node0/state.json: missing")


def test_an_interrupted_swap_is_recovered_from_the_old_copy(run_dir, saved, capsys):
    root = run_dir / "checkpoint"
    os.rename(root / "node0", root / ".node0.old4242")  # killed between the two renames of a save
    shutil.copytree(root / ".node0.old4242", root / ".node0.tmp4242")  # its new copy, maybe half-written
    (root / ".node0.tmp4242" / "model.safetensors").write_bytes(b"half")
    assert main(["resume", str(run_dir), "rounds=4"]) == 0
    assert metrics(run_dir) == saved[1]
    assert sorted(p.name for p in root.iterdir()) == ["node0", "state.json"]  # leftovers cleaned by the next save


def test_every_file_is_fsynced_before_the_renames(run_dir, monkeypatch):
    events = []
    real_fsync, real_rename = os.fsync, os.rename
    monkeypatch.setattr(os, "fsync", lambda fd: (events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}"))), real_fsync(fd)))
    monkeypatch.setattr(os, "rename", lambda a, b: (events.append(("rename", str(a), str(b))), real_rename(a, b)))
    from dgrpo.config import load_config
    from dgrpo.training.build import build_run

    cfg = load_config(run_dir / "config.yaml", [f"out_dir={run_dir.parent}", "name=fsync"])
    run = build_run(cfg)
    root = checkpoint.save_checkpoint(run, 1)
    events.clear()
    checkpoint.save_checkpoint(run, 2)  # a second save swaps the first out
    renames = [e for e in events if e[0] == "rename"]
    assert [(a, b) for _, a, b in renames] == [(str(root / "node0"), str(root / f".node0.old{os.getpid()}")),
                                               (str(root / f".node0.tmp{os.getpid()}"), str(root / "node0"))]
    before = {e[1] for e in events[: events.index(renames[0])] if e[0] == "fsync"}
    tmp = renames[1][1]
    assert {f"{tmp}/{p.name}" for p in (root / "node0").iterdir()} | {tmp, str(root)} <= before
    assert ("fsync", str(root)) in events[events.index(renames[1]):]  # the rename itself made durable
    assert json.loads((root / "node0" / "state.json").read_text())["next_round"] == 2
