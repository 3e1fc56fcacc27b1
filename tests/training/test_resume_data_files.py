"""A resume reads the data files the run read (review r34f #6): ``task.path`` is a path, read from the working
directory, so the same config resumed from another folder used to read other files under the same name and
exit 0 with other questions in its evaluation. The checkpoint records each task file's SHA-256; another
content, or a file that is not there, is a one-line refusal naming the field."""

from __future__ import annotations

import hashlib
import json

from dgrpo.cli import main
from resume_cli import refused

ROWS = [{"q": f"Ann has {i} pens and buys 2. How many?", "a": str(i + 2)} for i in range(12)]
MAP = "task.columns={question: q, answer: a}"


def _write(folder, rows):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pens.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_a_resume_from_a_folder_whose_task_file_differs_is_refused(tmp_path, tiny_model_dir, monkeypatch, capsys):
    start, other, out = tmp_path / "start", tmp_path / "other", tmp_path / "runs"
    _write(start, ROWS)
    _write(other, [{"q": r["q"].replace("pens", "cups"), "a": r["a"]} for r in ROWS])  # same name, other questions
    monkeypatch.chdir(start)
    assert main(["run", f"model.name={tiny_model_dir}", f"out_dir={out}", "name=ds", "rounds=1", "swarm.nodes=2",
                 "swarm.group_size=2", "swarm.prompts_per_round=2", "sampling.max_new_tokens=4", "eval.every=1",
                 "eval.n_prompts=2", "task.kind=dataset", "task.path=pens.jsonl", MAP, "task.n_val=4",
                 "task.few_shot=0", "threads=1"]) == 0
    state = json.loads((out / "ds" / "checkpoint" / "node0" / "state.json").read_text())
    assert state["run"]["data"] == {"task.path": hashlib.sha256((start / "pens.jsonl").read_bytes()).hexdigest()}

    monkeypatch.chdir(other)
    refused(out / "ds", capsys, "task.path: 'pens.jsonl'", str(other), "holds other content than the run read",
            overrides=("rounds=2",))
    (other / "pens.jsonl").unlink()
    refused(out / "ds", capsys, "task.path", overrides=("rounds=2",))  # (missing: refused before or at the check)
    monkeypatch.chdir(start)  # the folder the run started in: it resumes
    assert main(["resume", str(out / "ds"), "rounds=2"]) == 0
