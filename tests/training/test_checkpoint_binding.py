"""A node's checkpoint is bound to its node (issue 34 item 4): ``node{k}/state.json`` records k and
the model the config gives node k under its seal, so node folders swapped or copied over each other
are refused before any model loads; and a resume of a folder another process holds names that
process even when the folder's files are mid-save (config.yaml or a state missing, states of
different rounds)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dgrpo.cli import main
from tests.conftest import build_model

SRC = str(Path(__file__).resolve().parents[2] / "src")
COMMON = ["threads=1", "swarm.nodes=2", "swarm.group_size=4", "swarm.prompts_per_round=2", "sampling.max_new_tokens=16",
          "eval.every=2", "eval.n_prompts=2", "task.n_train=20", "task.n_val=5", "task.few_shot=0", "grpo.lr=0.01", "rounds=2"]


@pytest.fixture(scope="module")
def het(tmp_path_factory, tokenizer):
    """A 2-node heterogeneous run of 2 rounds whose two models have one shape (seeds 0 and 1)."""
    base = tmp_path_factory.mktemp("bind")
    for i in (0, 1):
        build_model(len(tokenizer), seed=i).save_pretrained(base / f"t{i}")
        tokenizer.save_pretrained(base / f"t{i}")
    models = f"swarm.models=[{{name: {base / 't0'}}}, {{name: {base / 't1'}}}]"
    assert main(["run", f"model.name={base / 't0'}", models, *COMMON, f"out_dir={base / 'runs'}", "name=het"]) == 0
    return base / "runs" / "het", base


def refused(run_dir, capsys):
    capsys.readouterr()
    rc = main(["resume", str(run_dir), "rounds=4"])
    err = capsys.readouterr().err
    last = err.rstrip("\n").rsplit("\n", 1)[-1]
    assert rc == 2 and err.count("dgrpo: error") == 1 and "Traceback" not in err, err
    return last


def test_each_node_state_records_its_node_and_model(het):
    run, base = het
    for k in (0, 1):
        state = json.loads((run / "checkpoint" / f"node{k}" / "state.json").read_text())
        assert (state["node"], state["model"]) == (k, str(base / f"t{k}"))


def test_swapped_node_folders_are_refused(het, tmp_path, capsys):
    run = shutil.copytree(het[0], tmp_path / "het")
    ckpt = run / "checkpoint"
    (ckpt / "node0").rename(ckpt / "t")
    (ckpt / "node1").rename(ckpt / "node0")
    (ckpt / "t").rename(ckpt / "node1")
    last = refused(run, capsys)
    assert f"{ckpt / 'node0'}: holds the checkpoint of node 1 (model '{het[1] / 't1'}'), not of node 0" in last, last


def test_a_node_folder_copied_over_another_is_refused(het, tmp_path, capsys):
    run = shutil.copytree(het[0], tmp_path / "het")
    ckpt = run / "checkpoint"
    shutil.rmtree(ckpt / "node1")
    shutil.copytree(ckpt / "node0", ckpt / "node1")
    last = refused(run, capsys)
    assert f"{ckpt / 'node1'}: holds the checkpoint of node 0 (model '{het[1] / 't0'}'), not of node 1" in last, last


def test_the_untouched_copy_still_resumes(het, tmp_path):
    run = shutil.copytree(het[0], tmp_path / "het")
    assert main(["resume", str(run), "rounds=3"]) == 0


@pytest.mark.parametrize("damage", ["config", "state", "rounds"])
def test_a_resume_of_a_folder_being_written_names_the_writer(het, tmp_path, capsys, damage):
    run = shutil.copytree(het[0], tmp_path / "het")
    if damage == "config":  # (mid-write: what a live run's folder may look like at any instant)
        (run / "config.yaml").unlink()
    elif damage == "state":
        shutil.rmtree(run / "checkpoint")
    else:
        state = run / "checkpoint" / "state.json"
        state.write_text(state.read_text().replace('"next_round": 2', '"next_round": 1'))
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {SRC!r})
        from dgrpo.training.run_dir import claim
        claim({str(run)!r}); print("held", flush=True); time.sleep(60)""")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        last = refused(run, capsys)
    finally:
        holder.kill()
        holder.wait()
    assert f"the run folder {run} is being written by another dgrpo process (process id {holder.pid} on this machine)" \
        in last, last
