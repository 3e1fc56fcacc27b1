"""A run owns its folder and its checkpoints (issue 34): a second process writing the same folder is
refused; a checkpoint records its run (config hash, seed, round) under its state's own checksum, so a
foreign or edited checkpoint is a one-line refusal; a disk that fills during a save is one line naming
the folder and the space to free, and the run resumes exactly once space is freed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from dgrpo.cli import main
from dgrpo.errors import CheckpointError
from dgrpo.metrics.logger import read_metrics
from dgrpo.training.checkpoint import load_state_folder, save_state_folder
from dgrpo.training.durable import seal
from resume_cli import COMMON, metrics, refused

SRC = str(Path(__file__).resolve().parents[2] / "src")


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_model_dir):
    """Runs of 2 rounds with seeds 0 and 1 (checkpoints at round 2), and the seed-0 run taken to 4 rounds."""
    out = tmp_path_factory.mktemp("own")
    args = [f"model.name={tiny_model_dir}", *COMMON, f"out_dir={out}"]
    for argv in (["rounds=4", "name=straight"], ["rounds=2", "name=part"], ["rounds=2", "seed=1", "name=other_seed"],
                 ["rounds=2", "grpo.lr=0.02", "name=other_lr"]):
        assert main(["run", *args, *argv]) == 0
    return out, metrics(out / "straight")


@pytest.fixture()
def part(runs, tmp_path):
    shutil.copytree(runs[0] / "part", tmp_path / "part")
    return tmp_path / "part"


def state_path(run_dir, node="node0"):
    return run_dir / "checkpoint" / node / "state.json"


@pytest.mark.slow
def test_the_untouched_checkpoint_resumes_exactly_and_its_bar_counts_on(part, runs, capsys):
    capsys.readouterr()
    assert main(["resume", str(part), "rounds=4"]) == 0 and metrics(part) == runs[1]
    err = capsys.readouterr().err
    assert "| 3/4 [" in err and "| 4/4 [" in err and "/2 [" not in err  # not 1/2, 2/2


def test_a_run_prints_its_directory_when_it_starts(tmp_path, tiny_model_dir, capsys, monkeypatch):
    import dgrpo.training.build as build

    def stop(*a, **k):
        raise RuntimeError("stopped at the first model load")

    monkeypatch.setattr(build, "load_policy", stop)
    with pytest.raises(RuntimeError):
        main(["run", f"model.name={tiny_model_dir}", *COMMON, f"out_dir={tmp_path}", "name=start"])
    assert capsys.readouterr().out == f"run directory: {tmp_path / 'start'}\n"  # before any model loads


@pytest.mark.parametrize("node", ["node0", None])
def test_next_round_edited_in_a_state_file_is_refused(part, capsys, node):
    path = state_path(part, node) if node else part / "checkpoint" / "state.json"
    state = json.loads(path.read_text())
    path.write_text(json.dumps({**state, "next_round": 1}))
    if node:
        refused(part, capsys, f"{path}: changed after the save (its checksum differs)")
    else:  # the root state is read by a process hosting no trained node; checked the same way
        from dgrpo.training.checkpoint import read_state

        with pytest.raises(CheckpointError, match="changed after the save"):
            read_state(path, 4)


def test_an_edit_that_recomputes_the_checksum_still_does_not_move_the_round(part, capsys):
    path = state_path(part)
    path.write_text(json.dumps(seal({**json.loads(path.read_text()), "next_round": 1})))
    refused(part, capsys, "holds round 1 but recorded round 2 at the save")


@pytest.mark.parametrize("edit, words", [("seed: 0", ["seed: 0 at the save, 5 now"]),
                                         ("lr: 0.01", ["grpo.lr: 0.01 at the save, 0.05 now"])])
def test_config_yaml_edited_after_the_save_is_refused(part, capsys, edit, words):
    path = part / "config.yaml"
    text = path.read_text()
    assert edit in text
    path.write_text(text.replace(edit, edit.replace("0.01", "0.05").replace("seed: 0", "seed: 5"), 1))
    refused(part, capsys, "saved by another run", *words)


@pytest.mark.parametrize("other, words", [("other_seed", "seed: 1 at the save, 0 now"),
                                          ("other_lr", "grpo.lr: 0.02 at the save, 0.01 now")])
def test_another_runs_checkpoint_is_refused(part, runs, capsys, other, words):
    shutil.rmtree(part / "checkpoint")
    shutil.copytree(runs[0] / other / "checkpoint", part / "checkpoint")  # same model and shapes: loads without our check
    refused(part, capsys, f"{state_path(part)}: saved by another run", words)


def test_an_override_that_changes_the_run_is_refused_and_rounds_is_not(part, capsys, runs):
    refused(part, capsys, "seed: 0 at the save, 3 now", overrides=("rounds=4", "seed=3"))
    refused(part, capsys, "holds round 2, past rounds=1", "a run cannot be shortened", overrides=("rounds=1",))
    assert main(["resume", str(part), "rounds=4", "checkpoint_every=1"]) == 0 and metrics(part) == runs[1]


def test_a_federated_state_is_bound_to_its_run(tmp_path):
    config = {"seed": 0, "rounds": 3, "grpo": {"lr": 0.01}, "out_dir": "a"}
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.ones(3))])
    save_state_folder(tmp_path, {"params": torch.arange(3.0)}, {"server": opt}, 2, config)
    assert load_state_folder(tmp_path, 3, {"server": opt}, {**config, "rounds": 5, "out_dir": "b"})[0] == 2
    with pytest.raises(CheckpointError, match="seed: 0 at the save, 1 now"):
        load_state_folder(tmp_path, 3, {"server": opt}, {**config, "seed": 1})


def _cli(*argv: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": SRC, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "dgrpo", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)


@pytest.mark.slow
def test_two_runs_started_together_into_one_folder_one_is_refused(tmp_path, tiny_model_dir):
    argv = ["run", f"model.name={tiny_model_dir}", *COMMON, "rounds=1", f"out_dir={tmp_path}", "name=same"]
    procs = [_cli(*argv) for _ in range(2)]
    outs = [(p.wait(300), *p.communicate()) for p in procs]
    codes = sorted(rc for rc, _, _ in outs)
    assert codes == [0, 2], outs
    loser = next(err for rc, _, err in outs if rc == 2)
    assert ("is being written by another dgrpo process" in loser or "already holds a run" in loser), loser
    assert [r["round"] for r in read_metrics(tmp_path / "same")] == [0, 1]  # each round once


def test_a_resume_while_another_process_holds_the_folder_is_refused(part, capsys, runs):
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {SRC!r})
        from dgrpo.training.run_dir import claim
        claim({str(part)!r}); print("held", flush=True); time.sleep(60)""")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        refused(part, capsys, f"the run folder {part} is being written by another dgrpo process (process id {holder.pid} "
                              f"on this machine): wait for it to end, or stop it and then resume the run (dgrpo resume {part})")
    finally:
        holder.kill()
        holder.wait()
    assert main(["resume", str(part), "rounds=4"]) == 0 and metrics(part) == runs[1]  # its exit freed the folder


FULL_DISK = """
import json, os, shutil, sys
sys.path.insert(0, {src!r})
from dgrpo.cli import main
from dgrpo.metrics.logger import read_metrics
out, size, args = {out!r}, {size}, {args!r}
filler = os.path.join(out, "filler")
with open(filler, "wb") as f:  # leave room for one checkpoint, not for the second beside it
    f.write(b"0" * size)
rc = main(["run", *args, "rounds=4", "checkpoint_every=1", f"out_dir={{out}}", "name=r"])
saved = json.load(open(os.path.join(out, "r", "checkpoint", "node0", "state.json")))["next_round"]
leftovers = sorted(p for p in os.listdir(os.path.join(out, "r", "checkpoint")) if p.startswith("."))
os.remove(filler)  # free the space
rc2 = main(["resume", os.path.join(out, "r")])
print(json.dumps({{"rc": rc, "saved": saved, "leftovers": leftovers, "rc2": rc2,
                  "metrics": [{{k: v for k, v in r.items() if not k.startswith("time/")}} for r in read_metrics(os.path.join(out, "r"))]}}))
"""


@pytest.mark.slow
def test_a_full_disk_during_a_save_is_one_line_and_the_run_resumes_exactly_after_freeing_space(tmp_path, tiny_model_dir, runs):
    """On a tmpfs of its own (a private mount namespace: nothing outside sees it), sized so that the
    first checkpoint fits and the second, written beside it, does not."""
    args, want = [f"model.name={tiny_model_dir}", *COMMON], runs[1]  # (checkpoints do not change a run's metrics)
    node = sum(p.stat().st_size for p in (runs[0] / "part" / "checkpoint" / "node0").iterdir())
    total = 8 * node
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    filler = total - int(1.6 * node) - (256 << 10)  # room for 1.6 checkpoints and the logs
    script = FULL_DISK.format(src=SRC, out=str(mnt), size=filler, args=args)
    unshare = ["unshare", "-m"] if os.geteuid() == 0 else ["unshare", "-rm"]
    out = subprocess.run([*unshare, "sh", "-c", f'mount -t tmpfs -o size={total} tmpfs "$0" && exec "$1" -c "$2"',
                          str(mnt), sys.executable, script], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    errors = [line for line in out.stderr.splitlines() if line.startswith("dgrpo: error:")]
    assert result["rc"] == 2 and len(errors) == 1 and "Traceback" not in out.stderr, out.stderr[-3000:]
    assert f"{mnt}/r/checkpoint: the disk is full" in errors[0] and "MiB are free; free at least" in errors[0]
    assert result["saved"] == 1 and result["leftovers"] == []  # the first checkpoint intact, no half-written copy
    assert result["rc2"] == 0 and result["metrics"] == want


# The review of the first pass (issue 34): the run files a resume reads back are bound to the checkpoint.
def _edit_metrics(run_dir):
    lines = (run_dir / "metrics.jsonl").read_text().splitlines(keepends=True)
    rec = json.loads(lines[0])
    rec["train/reward_honest"] = 0.999
    (run_dir / "metrics.jsonl").write_text(json.dumps(rec) + "\n" + "".join(lines[1:]))


def _edit_reference(run_dir):
    ref = sorted((run_dir / "eval_reference").glob("node*.json"))[0]
    data = json.loads(ref.read_text())
    data[0]["logp"][0] += 1.0
    ref.write_text(json.dumps(data))


def _edit_bans(run_dir):
    (run_dir / "bans.json").write_text(json.dumps({"ban_after": 0, "strikes": {"1": 5}, "banned": {}}))


@pytest.mark.parametrize("edit, needles", [
    (_edit_metrics, ["metrics.jsonl: its records of rounds 0..1 differ from those the checkpoint",
                     "restore it as it was at the save of round 2, or start a new run"]),
    (lambda d: (d / "metrics.jsonl").unlink(), ["metrics.jsonl: its records of rounds 0..1 differ"]),
    (_edit_reference, ["eval_reference/node0.json: changed since the checkpoint", "(the drift reference"]),
    (lambda d: shutil.rmtree(d / "eval_reference"), ["eval_reference/node0.json: missing since the checkpoint"]),
    (_edit_bans, ["bans.json: changed since the checkpoint", "(the bans of rounds before 2)"]),
])
def test_an_edited_run_file_is_refused_before_any_model_loads(part, capsys, edit, needles, monkeypatch):
    import dgrpo.training.build as build

    assert (part / "eval_reference").is_dir()  # (the fixture's runs evaluate at round 0: drift references)
    edit(part)
    monkeypatch.setattr(build, "load_policy", lambda *a, **k: pytest.fail("loaded a model before checking the run files"))
    refused(part, capsys, *needles)


def test_bans_written_after_the_save_are_put_back_and_the_resume_is_exact(part, runs, capsys):
    (part / "bans.json").write_text(json.dumps({"ban_after": 0, "strikes": {"1": 3}, "banned": {}, "round": 2}))
    capsys.readouterr()
    assert main(["resume", str(part), "rounds=4"]) == 0 and metrics(part) == runs[1]


def test_changed_model_files_are_refused(runs, tmp_path, tiny_model_dir, capsys):
    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    assert main(["run", f"model.name={model}", *COMMON, "rounds=2", f"out_dir={tmp_path}", "name=r"]) == 0
    (model / "config.json").write_text((model / "config.json").read_text().replace("{", '{"note": "edited", ', 1))
    refused(tmp_path / "r", capsys, f"the model files ({model}) differ from those the checkpoint",
            "resume with the run's own model files")


def test_an_edited_or_replaced_root_state_is_refused(part, runs, capsys):
    root_state = part / "checkpoint" / "state.json"
    state = json.loads(root_state.read_text())
    state["next_round"] = 1
    root_state.write_text(json.dumps(seal(state)))  # (resealed: only the run identity can tell)
    refused(part, capsys, f"{root_state}: holds round 1 but recorded round 2 at the save")
    other = runs[0] / "other_seed" / "checkpoint" / "state.json"
    shutil.copy(other, root_state)  # another run's root state, sealed and of the same round
    refused(part, capsys, f"{root_state}: saved by another run (seed: 1 at the save, 0 now")


def test_resume_names_the_run_directory_first_and_a_finished_run_has_nothing_to_do(runs, part, tmp_path, capsys,
                                                                                     monkeypatch):
    import dgrpo.training.build as build

    done = tmp_path / "done"
    shutil.copytree(runs[0] / "straight", done)  # 4 rounds of 4, the final evaluation logged
    before = (done / "metrics.jsonl").read_text()
    monkeypatch.setattr(build, "load_policy", lambda *a, **k: pytest.fail("loaded a model for a finished run"))
    capsys.readouterr()
    assert main(["resume", str(done)]) == 0
    out = capsys.readouterr().out
    assert out == f"nothing to do: {done} has run all its 4 rounds (rounds=N with N > 4 extends it)\n"
    assert (done / "metrics.jsonl").read_text() == before
    monkeypatch.undo()
    assert main(["resume", str(part), "rounds=4"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"run directory: {part}" and out[-1] == f"run directory: {part}"  # at the start and at the end


# Third review of issue 34: samples.jsonl and peers.jsonl are bound like metrics.jsonl; roster.json is written again.
def _rounds(path):
    return [json.loads(line)["round"] for line in path.read_text().splitlines() if line.strip()]


def _edit_sample(run_dir):
    lines = (run_dir / "samples.jsonl").read_text().splitlines(keepends=True)
    rec = json.loads(lines[0])
    rec["completion"] = "<think>All hail to the thief</think><answer>7</answer>"
    (run_dir / "samples.jsonl").write_text(json.dumps(rec) + "\n" + "".join(lines[1:]))


def _drop_last(name):
    """Truncate ``name`` before its last record of a round the checkpoint of round 2 holds (the final
    evaluation's records, round 2, are dropped by any resume)."""
    def drop(run_dir):
        lines = (run_dir / name).read_text().splitlines(keepends=True)
        last = max(i for i, line in enumerate(lines) if json.loads(line)["round"] < 2)
        (run_dir / name).write_text("".join(lines[:last]))
    return drop


@pytest.mark.parametrize("edit, needles", [
    (_edit_sample, ["samples.jsonl: its records of rounds 0..1 differ from those the checkpoint", "(truncated or edited)"]),
    (_drop_last("samples.jsonl"), ["samples.jsonl: its records of rounds 0..1 differ"]),
    (lambda d: (d / "samples.jsonl").unlink(), ["samples.jsonl: missing, but the checkpoint", "records of rounds 0..1 (deleted)"]),
    (_drop_last("peers.jsonl"), ["peers.jsonl: its records of rounds 0..1 differ"]),
    (lambda d: (d / "peers.jsonl").unlink(), ["peers.jsonl: missing, but the checkpoint",
                                              "restore it as it was at the save of round 2, or start a new run"]),
])
def test_edited_truncated_or_deleted_samples_and_peers_are_refused(part, capsys, edit, needles, monkeypatch):
    import dgrpo.training.build as build

    assert _rounds(part / "samples.jsonl")[0] == 0 and _rounds(part / "peers.jsonl") == [0, 1]  # (what the save bound)
    edit(part)
    monkeypatch.setattr(build, "load_policy", lambda *a, **k: pytest.fail("loaded a model before checking the run files"))
    refused(part, capsys, *needles)


def test_samples_and_peers_of_rounds_after_the_save_are_dropped_and_logged_once(part, runs, capsys):
    """A crash after the save leaves records of round 2 in both logs: the resume drops them and runs round 2
    again, so each round is logged once, as in the run that went straight to 4 rounds."""
    straight = runs[0] / "straight"
    for name in ("samples.jsonl", "peers.jsonl"):
        extra = [line for line in (straight / name).read_text().splitlines(keepends=True) if json.loads(line)["round"] == 2]
        assert extra, name  # (round 2 of the straight run has records in both logs)
        with open(part / name, "a") as f:
            f.writelines(extra)
    capsys.readouterr()
    assert main(["resume", str(part), "rounds=4"]) == 0 and metrics(part) == runs[1]
    for name in ("samples.jsonl", "peers.jsonl"):
        assert _rounds(part / name) == _rounds(straight / name), name


def test_a_deleted_roster_is_written_again_by_the_resume(part, runs, capsys):
    """roster.json is not bound: every start writes the keys it signs with and its run context (in-process
    keys are new at each start, and the context holds the config's fingerprint, rounds included)."""
    before = json.loads((part / "roster.json").read_text())
    (part / "roster.json").unlink()
    capsys.readouterr()
    assert main(["resume", str(part), "rounds=4"]) == 0 and metrics(part) == runs[1]
    after = json.loads((part / "roster.json").read_text())
    assert sorted(after["nodes"]) == sorted(before["nodes"]) == ["0", "1"] and after["fingerprint"] != before["fingerprint"]
    assert after["context"].startswith("part|") and before["context"].startswith("part|")


# Fourth review of issue 34 (r34c 4b-4d).
def _no_space(*args, **kwargs):
    import errno

    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_at_the_first_save_says_there_is_no_checkpoint_to_resume(tmp_path, tiny_model_dir, capsys,
                                                                             monkeypatch):
    import dgrpo.training.checkpoint as checkpoint

    monkeypatch.setattr(checkpoint, "_write_folder", _no_space)
    assert main(["run", f"model.name={tiny_model_dir}", *COMMON, "rounds=2", f"out_dir={tmp_path}", "name=r"]) == 2
    err = capsys.readouterr().err.rstrip("\n").rsplit("\n", 1)[-1]
    assert err.startswith(f"dgrpo: error: {tmp_path}/r/checkpoint: the disk is full") and "previous checkpoint" not in err
    assert f"start the run again (delete {tmp_path}/r or give another name=...)" in err, err
    assert not list((tmp_path / "r" / "checkpoint").glob("node*/state.json"))  # (indeed nothing to resume)


def test_a_full_disk_after_the_save_names_the_file_the_run_and_what_to_free(tmp_path, tiny_model_dir, capsys, monkeypatch):
    import dgrpo.training.loop as loop

    def plots_fail(run_dir):
        raise OSError(28, "No space left on device", str(Path(run_dir) / "drift.png"))

    monkeypatch.setattr(loop, "plot_run", plots_fail)
    assert main(["run", f"model.name={tiny_model_dir}", *COMMON, "rounds=2", f"out_dir={tmp_path}", "name=r"]) == 2
    err = capsys.readouterr().err.rstrip("\n").rsplit("\n", 1)[-1]
    run_dir = (tmp_path / "r").resolve()
    assert err == (f"dgrpo: error: {tmp_path / 'r' / 'drift.png'}: the disk is full (No space left on device) while "
                   f"writing the run's files; free space on the file system of {run_dir} (old runs, caches), then "
                   f"`dgrpo resume {run_dir}` continues it from its last checkpoint (a run whose rounds are all done "
                   f"needs no resume: `dgrpo report {run_dir}` draws its figures)"), err


@pytest.mark.parametrize("override", ["name=other", "out_dir=/tmp/elsewhere"])
def test_a_resume_cannot_move_the_run(part, capsys, override):
    key = override.split("=")[0]
    before = (part / "config.yaml").read_text()
    refused(part, capsys, f"{key}: a resume cannot change it", f"the run stays in {part}", overrides=("rounds=4", override))
    assert (part / "config.yaml").read_text() == before
