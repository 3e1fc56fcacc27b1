"""Seventh review of issue 34 (r34f #4): a disk that fills before a run's first checkpoint is one line that
says to run again, not to resume (``dgrpo resume`` finds nothing to resume there)."""

from __future__ import annotations

from pathlib import Path

from dgrpo.cli import main
from resume_cli import COMMON


def test_a_full_disk_before_the_first_checkpoint_says_run_again_not_resume(tmp_path, tiny_model_dir, capsys, monkeypatch):
    import dgrpo.training.loop as loop

    def log_fails(run, rec):  # (round 0's record: no checkpoint exists yet)
        raise OSError(28, "No space left on device", str(Path(run.run_dir) / "metrics.jsonl"))

    monkeypatch.setattr(loop, "share_record", log_fails)
    assert main(["run", f"model.name={tiny_model_dir}", *COMMON, "rounds=2", f"out_dir={tmp_path}", "name=r"]) == 2
    err = capsys.readouterr().err.rstrip("\n").rsplit("\n", 1)[-1]
    run_dir = (tmp_path / "r").resolve()
    assert err == (f"dgrpo: error: {tmp_path / 'r' / 'metrics.jsonl'}: the disk is full (No space left on device) while "
                   f"writing the run's files; free space on the file system of {run_dir} (old runs, caches), then delete "
                   f"{run_dir} and run again with the same name: no checkpoint was saved yet, so there is nothing to "
                   f"resume"), err
    assert not list((tmp_path / "r").glob("checkpoint/**/state.json"))  # (indeed nothing to resume)
