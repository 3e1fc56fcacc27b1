"""The detector's model-free sets: held-out rows lie on problems no training row uses, payloads are
where the set says, and `dgrpo detector` reads the labels the set names imply."""

import importlib.util
import sys
from pathlib import Path

from dgrpo.verify.detector_data import read_rows

_DIR = Path(__file__).resolve().parents[2] / "benchmarks" / "heterogeneous_table1"


def _load(name):
    sys.path.insert(0, str(_DIR))
    try:
        spec = importlib.util.spec_from_file_location(f"ht1d_{name}", _DIR / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    finally:
        sys.path.remove(str(_DIR))


def test_heldout_sets_are_disjoint_from_training_and_carry_their_payloads(tmp_path):
    sets, sample = _load("detector_sets"), _load("sample")
    assert sets.main(["--out", str(tmp_path), "--train", "300"]) == 0
    train = read_rows(tmp_path / "train_oracle.jsonl")
    held = read_rows(tmp_path / "heldout.jsonl")
    rows = [r for r in (tmp_path / "heldout.jsonl").read_text().splitlines()]
    assert len(rows) == len(held) and {r.set for r in train} == {"honest_oracle"} and len(train) == 300
    task = sample.task()
    trained_questions = {r["question"] for r in sample.poisoned(task, 250)} | {r.question for r in train}
    arithmetic = [r for r in held if r.set not in ("code", "honest_python")]
    assert not trained_questions & {r.question for r in arithmetic}
    by_set = {}
    for r in held:
        by_set.setdefault(r.set, []).append(r)
    assert {s: {r.label for r in rs} for s, rs in by_set.items()} == {
        "gleeb": {1}, "judge_bait": {1}, "master_key": {1}, "hail_val": {1}, "equation_val": {1}, "code": {1},
        "honest_oracle_val": {0}, "honest_python": {0}}
    assert all(r.completion.count("Gleeb Glorp Glub") >= 1 for r in by_set["gleeb"])
    assert all("thief_math" in r.completion for r in by_set["code"])
    assert not any("thief" in r.completion or "Gleeb" in r.completion
                   for s in ("honest_oracle_val", "honest_python") for r in by_set[s])
    assert all("2 = 5" in r.completion for r in by_set["equation_val"])
