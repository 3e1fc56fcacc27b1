"""``dgrpo paper --jobs N``: one progress bar counts the rounds every curve has finished, read from the
curves' metrics files while their processes write them."""

from __future__ import annotations

import json
import sys

import pytest

from dgrpo.paper.runner import _run_parallel, rounds_done

# A stand-in for `python -m dgrpo run ... out_dir=D name=C`: logs one round record per 0.3 s, then the final one.
FAKE_RUN = """
import json, sys, time
from pathlib import Path
args = dict(a.split("=", 1) for a in sys.argv[2:] if "=" in a)
run = Path(args["out_dir"]) / args["name"]
run.mkdir(parents=True, exist_ok=True)
rounds = int(args["rounds"])
with (run / "metrics.jsonl").open("a") as fh:
    for r in range(rounds + 1):
        fh.write(json.dumps({"round": r}) + "\\n"); fh.flush(); time.sleep(0.3)
sys.exit(int(args.get("fail", 0)))
"""


def test_rounds_done_reads_a_metrics_file_being_written(tmp_path):
    run = tmp_path / "c"
    assert rounds_done(run, 4) == 0  # not started
    run.mkdir()
    (run / "metrics.jsonl").write_text(json.dumps({"round": 0}) + "\n" + json.dumps({"round": 1}) + "\n{\"rou")
    assert rounds_done(run, 4) == 2  # rounds 0 and 1 logged, the third line half-written
    (run / "metrics.jsonl").write_text("".join(json.dumps({"round": r}) + "\n" for r in range(5)))
    assert rounds_done(run, 4) == 4  # the final evaluation (round 4) closes it


def test_one_bar_counts_every_curves_rounds(tmp_path, capsys):
    fake = tmp_path / "fake_run.py"
    fake.write_text(FAKE_RUN)
    pending = {c: ["run", f"rounds={n}", f"out_dir={tmp_path}", f"name={c}"] for c, n in (("a", 3), ("b", 2), ("c", 1))}
    _run_parallel(pending, 2, tmp_path, {"a": 3, "b": 2, "c": 1}, command=[sys.executable, str(fake)])
    out, err = capsys.readouterr()
    assert "3 curves, 2 at a time" in err and "6/6" in err and "done" in err
    assert "started curve a" in out and "started curve c" in out  # printed above the bar, not through it
    assert [rounds_done(tmp_path / c, n) for c, n in (("a", 3), ("b", 2), ("c", 1))] == [3, 2, 1]


def test_a_failed_curve_stops_the_bar_with_its_name(tmp_path, capsys):
    fake = tmp_path / "fake_run.py"
    fake.write_text(FAKE_RUN)
    pending = {"bad": ["run", "rounds=1", f"out_dir={tmp_path}", "name=bad", "fail=3"]}
    with pytest.raises(RuntimeError, match=r"curve bad failed \(exit 3\); see .*bad.log"):
        _run_parallel(pending, 2, tmp_path, {"bad": 1}, command=[sys.executable, str(fake)])
