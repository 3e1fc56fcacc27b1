"""Seventh review of issue 34 (r34f #4): ``eval.n_prompts`` larger than the validation set is not cut silently:
one warning line names both numbers (the evaluations then use every validation prompt)."""

from __future__ import annotations

import logging

from dgrpo.cli import main
from resume_cli import COMMON


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "eval.n_prompts" in r.getMessage()]


def test_more_eval_prompts_than_validation_prompts_is_one_warning_line(tmp_path, tiny_model_dir, caplog):
    caplog.set_level(logging.WARNING)
    args = ["run", f"model.name={tiny_model_dir}", *COMMON, "rounds=1", f"out_dir={tmp_path}"]
    assert main([*args, "name=over", "eval.n_prompts=9"]) == 0  # (COMMON: task.n_val=5)
    assert _warnings(caplog) == ["eval.n_prompts=9 but the task has only 5 validation prompts: each evaluation uses "
                                 "those 5"]
    caplog.clear()
    assert main([*args, "name=within", "eval.n_prompts=5"]) == 0
    assert _warnings(caplog) == []
