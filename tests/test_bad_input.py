"""Bad input found by a fresh-user review: each gets a clear error naming the problem."""

import json
import os
import subprocess
import sys

import pytest

from dgrpo.cli import main
from dgrpo.config import ConfigError, load_config
from dgrpo.metrics.logger import MetricsFileError, read_metrics
from dgrpo.rewards.math import parse_oracle

HAIL = ["attack.kind=injection"]


@pytest.mark.parametrize("ids, message", [("[1, 1]", "list a node twice"), ("[true]", "valid integer")])
def test_malicious_ids_are_distinct_integers(ids, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, [*HAIL, f"swarm.malicious={ids}"])


@pytest.mark.parametrize("value, message", [(".nan", "finite"), (".inf", "finite"), ("-.inf", "finite"),
                                            ("nan", "not the text 'nan'"), ("inf", "not the text 'inf'")])
def test_non_finite_numbers_are_rejected(value, message):
    with pytest.raises(ConfigError, match=message):  # (YAML 1.2 spells them .nan, .inf; nan and inf are text)
        load_config(None, [f"grpo.lr={value}"])


@pytest.mark.parametrize("answer, message", [("work\n#### ", "not a number"), ("work\n#### abc", "'abc', not a number"),
                                             ("#### 3\nmore", "does not end")])
def test_oracle_line_must_be_a_final_number(answer, message):
    with pytest.raises(ValueError, match=message):
        parse_oracle(answer)


def test_oracle_accepts_fractions_and_decimals():
    assert [parse_oracle(a) for a in ("x\n#### 1/2", "#### 3.5\n", "#### -1,200")] == ["1/2", "3.5", "-1200"]


@pytest.mark.parametrize("lib", ["os", "numpy", "json"])
def test_python_math_refuses_to_stand_in_for_real_modules(lib):
    with pytest.raises(ConfigError, match="not real modules"):
        load_config(None, ["task.kind=python_math", f"task.libraries=[{lib}]"])


@pytest.mark.parametrize("line", ["[1, 2]", '{"loss": 1.0}', '{"round": "3"}'])
def test_metrics_records_need_an_integer_round(tmp_path, line):
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"round": 0}) + "\n" + line + "\n")
    with pytest.raises(MetricsFileError, match=":2: not a round record"):
        read_metrics(tmp_path)


def test_report_of_a_corrupt_run_is_a_one_line_error(tmp_path, capsys):
    (tmp_path / "config.yaml").write_text("rounds: 2\n")
    (tmp_path / "metrics.jsonl").write_text("{not json\n")
    assert main(["report", str(tmp_path)]) == 2
    assert "metrics.jsonl:1: not JSON" in capsys.readouterr().err


def test_missing_local_model_folder_is_named(tmp_path, capsys):
    missing = tmp_path / "no_model"
    assert main(["run", f"model.name={missing}", "task.n_train=4", "task.n_val=2", f"out_dir={tmp_path / 'runs'}"]) == 2
    assert f"no such model folder: {missing}" in capsys.readouterr().err
    assert not any((tmp_path / "runs").glob("*"))  # the failed run left no directory behind


def test_paper_jobs_must_be_positive(capsys):
    assert main(["paper", "fig8", "--jobs", "0"]) == 2
    assert "--jobs must be at least 1" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["../x", "a/b", "a\\b", ".", ".."])
def test_run_name_stays_inside_out_dir(name):
    with pytest.raises(ConfigError, match="one folder name"):
        load_config(None, [f"name={name}"])


@pytest.mark.parametrize("argv, message", [(["run", "swarm.nodes=abc"], "swarm.nodes"),
                                           (["resume", "/nonexistent/run"], "holds no run")])
def test_a_bad_config_or_run_folder_is_reported_without_importing_torch(argv, message):
    # a fresh interpreter: this test process has long imported torch
    code = (f"import sys; from dgrpo.cli import main; rc = main({argv!r}); "
            "print(rc, 'torch' in sys.modules, 'transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert message in out.stderr
    assert out.stdout.split() == ["2", "False", "False"]


def test_resume_of_an_empty_checkpoint_fails_before_loading_a_model(tmp_path, capsys):
    run = tmp_path / "r"
    (run / "checkpoint").mkdir(parents=True)
    (run / "config.yaml").write_text("model:\n  name: /nonexistent/model\n")  # loading it would fail differently
    assert main(["resume", str(run)]) == 2
    err = capsys.readouterr().err
    assert "holds no saved node" in err and "no such model folder" not in err


@pytest.mark.parametrize("argv", [["run", "--help"], ["--help"]])
def test_help_into_a_closed_pipe_exits_quietly(argv):
    # `dgrpo run --help | head -1`: the reader is gone before the write (its end closed first, so every write fails,
    # whatever the pipe's buffer); before the fix a BrokenPipeError traceback went to stderr
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run([sys.executable, "-m", "dgrpo", *argv], stdout=write_end, stderr=subprocess.PIPE,
                              text=True, timeout=120)
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr) == (0, "")  # (argparse's own help exits 0 into a closed pipe)
