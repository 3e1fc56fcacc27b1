"""A run keeps its name, its roster history and its logs across resumes (fifth review of issue 34, r34d
N11 and its notes): ``name`` or ``out_dir`` edited in config.yaml after a save is a one-line refusal;
``rosters.jsonl`` records the roster of every start and is bound to the checkpoint like peers.jsonl (a
crash after a start and before the next save still resumes); a federated checkpoint binds the run
files as a swarm's does."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

import resume_cli
from dgrpo.cli import main
from dgrpo.errors import CheckpointError
from dgrpo.training.checkpoint import load_state_folder, save_state_folder
from resume_cli import COMMON, metrics

def rounds(path):
    return [json.loads(line)["round"] for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_model_dir):
    """A run of 2 rounds (its checkpoint holds round 2) and the same run taken straight to 4 rounds."""
    out = tmp_path_factory.mktemp("history")
    for argv in (["rounds=4", "name=straight"], ["rounds=2", "name=part"]):
        assert main(["run", f"model.name={tiny_model_dir}", *COMMON, f"out_dir={out}", *argv]) == 0
    return out, metrics(out / "straight")


@pytest.fixture()
def part(runs, tmp_path):
    shutil.copytree(runs[0] / "part", tmp_path / "part")  # (a copy elsewhere: its config.yaml keeps name and out_dir)
    return tmp_path / "part"


def refused(run_dir, capsys, monkeypatch, *needles):
    """:func:`resume_cli.refused`, and before any model loads."""
    import dgrpo.training.build as build

    monkeypatch.setattr(build, "load_policy", lambda *a, **k: pytest.fail("loaded a model before refusing"))
    return resume_cli.refused(run_dir, capsys, *needles)


@pytest.mark.slow
@pytest.mark.parametrize("key, edited", [("name", "other"), ("out_dir", "/tmp/nowhere")])
def test_name_or_out_dir_edited_in_config_yaml_after_the_save_is_refused(part, runs, capsys, monkeypatch, key, edited):
    path = part / "config.yaml"
    was = "part" if key == "name" else str(runs[0])
    text = path.read_text()
    assert f"{key}: {was}\n" in text
    path.write_text(text.replace(f"{key}: {was}\n", f"{key}: {edited}\n"))
    refused(part, capsys, monkeypatch, f"{key}: {part}/config.yaml says {edited!r}, but the checkpoint",
            f"was saved by the run with {key} {was!r}", f"put `{key}: {was}` back in config.yaml")


def test_the_roster_history_is_bound_and_a_crash_before_the_next_save_still_resumes(part, runs, capsys, monkeypatch):
    from dgrpo.recipes import horizontal

    first = [json.loads(line) for line in (part / "rosters.jsonl").read_text().splitlines()]
    assert [r["round"] for r in first] == [0] and first[0]["roster"] == json.loads((part / "roster.json").read_text())
    one_round = horizontal.one_round

    def crash(run, r):
        raise RuntimeError("power cut")

    monkeypatch.setattr(horizontal, "one_round", crash)
    with pytest.raises(RuntimeError, match="power cut"):  # this start wrote its roster, then died before any save
        main(["resume", str(part), "rounds=4"])
    assert rounds(part / "rosters.jsonl") == [0, 2]
    monkeypatch.setattr(horizontal, "one_round", one_round)
    capsys.readouterr()
    assert main(["resume", str(part), "rounds=4"]) == 0 and metrics(part) == runs[1]
    history = [json.loads(line) for line in (part / "rosters.jsonl").read_text().splitlines()]
    assert [r["round"] for r in history] == [0, 2] and history[0] == first[0]  # the crashed start's record dropped
    assert history[1]["roster"] == json.loads((part / "roster.json").read_text())
    assert history[1]["roster"]["nodes"] != first[0]["roster"]["nodes"]  # (in-process keys: new at every start)


def _edit_roster_record(run_dir):
    rec = json.loads((run_dir / "rosters.jsonl").read_text())
    rec["roster"]["nodes"]["1"] = "00" * 32
    (run_dir / "rosters.jsonl").write_text(json.dumps(rec) + "\n")


@pytest.mark.parametrize("edit, needles", [
    (_edit_roster_record, ["rosters.jsonl: its records of rounds 0..1 differ from those the checkpoint",
                           "restore it as it was at the save of round 2"]),
    (lambda d: (d / "rosters.jsonl").unlink(), ["rosters.jsonl: missing, but the checkpoint", "(deleted)",
                                                "restore it as it was at the save of round 2"]),
    (lambda d: (d / "rosters.jsonl").write_text("{oops\n" + (d / "rosters.jsonl").read_text()), ["rosters.jsonl:1: not JSON"]),
])
def test_an_edited_or_deleted_roster_history_is_refused(part, capsys, monkeypatch, edit, needles):
    edit(part)
    refused(part, capsys, monkeypatch, *needles)


def test_a_federated_checkpoint_binds_the_run_files(tmp_path):
    config = {"seed": 0, "rounds": 3, "grpo": {"lr": 0.01}, "out_dir": str(tmp_path), "name": "run"}
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").write_text('{"round": 0, "eval/accuracy": 0.5}\n{"round": 1, "eval/accuracy": 0.6}\n')
    (run_dir / "samples.jsonl").write_text('{"round": 0, "completion": "7"}\n')
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.ones(3))])
    save_state_folder(run_dir / "checkpoint", {"params": torch.arange(3.0)}, {"server": opt}, 2, config)
    assert load_state_folder(run_dir / "checkpoint", 3, {"server": opt}, config)[0] == 2
    (run_dir / "metrics.jsonl").write_text('{"round": 0, "eval/accuracy": 0.9}\n{"round": 1, "eval/accuracy": 0.6}\n')
    with pytest.raises(CheckpointError, match=r"metrics.jsonl: its records of rounds 0..1 differ"):
        load_state_folder(run_dir / "checkpoint", 3, {"server": opt}, config)
    (run_dir / "metrics.jsonl").write_text('{"round": 0, "eval/accuracy": 0.5}\n{"round": 1, "eval/accuracy": 0.6}\n')
    (run_dir / "samples.jsonl").unlink()
    with pytest.raises(CheckpointError, match=r"samples.jsonl: missing, but the checkpoint"):
        load_state_folder(run_dir / "checkpoint", 3, {"server": opt}, config)


def test_a_federated_run_with_edited_metrics_is_refused_before_any_model_loads(tmp_path, tiny_model_dir, capsys, monkeypatch):
    args = ["federated", f"model.name={tiny_model_dir}", f"out_dir={tmp_path}", "name=f", "rounds=1",
            "swarm.mode=vertical", "swarm.nodes=2", "swarm.prompts_per_round=2", "swarm.group_size=2",
            "sampling.max_new_tokens=4", "eval.n_prompts=1", "task.n_train=10", "task.n_val=2", "task.few_shot=0"]
    assert main(args) == 0
    path = tmp_path / "f" / "metrics.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    rec = json.loads(lines[0])
    assert rec["round"] == 0
    rec["eval/accuracy"] = 1.0 - rec["eval/accuracy"]
    path.write_text(json.dumps(rec) + "\n" + "".join(lines[1:]))
    needles = ("metrics.jsonl: its records of rounds 0..0 differ from those the checkpoint",
                    f"{tmp_path / 'f' / 'checkpoint' / 'state' / 'state.json'} was saved with")
    import dgrpo.recipes.federated as federated

    monkeypatch.setattr(federated, "build_federation", lambda *a, **k: pytest.fail("built the federation before refusing"))
    capsys.readouterr()
    assert main(["resume", str(tmp_path / "f"), "rounds=2"]) == 2
    last = capsys.readouterr().err.rstrip("\n").rsplit("\n", 1)[-1]
    assert last.startswith("dgrpo: error: ") and all(n in last for n in needles), last
