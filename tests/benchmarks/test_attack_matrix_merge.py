"""`benchmarks/attack_matrix_smollm2.py --merge`: a row measured later joins the committed matrix, or the
script refuses in one line and leaves the committed files as they were."""

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "attack_matrix_smollm2.py"
SETUP = {"model": "m", "seed": 0, "max_new_tokens": 64, "round": 1, "group_size": 8, "top_k": 10,
         "defenses": ["none", "topk"], "not_filters": {}}


def _matrix(rows: dict, fp: int = 0) -> dict:
    honest = {"none": {"rate": 0.0, "low": 0.0, "high": 0.4, "rejected": 0, "n": 10},
              "topk": {"rate": fp / 10, "low": 0.0, "high": 0.4, "rejected": fp, "n": 10}}
    attacks = {name: {"detection": {"none": {"rate": 0.0, "low": 0.0, "high": 0.5, "rejected": 0, "n": 4},
                                    "topk": {"rate": r, "low": 0.0, "high": 1.0, "rejected": round(4 * r), "n": 4}},
                      "poisoned": 4, "full_reward": 1.0, "stats": {}, "seconds": 1.0} for name, r in rows.items()}
    return {**SETUP, "honest": honest, "attacks": attacks}


def _merge(out: Path, extra: Path):
    return subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), "--merge", str(extra)],
                          capture_output=True, text=True, timeout=120)


def test_merge_appends_the_row_and_rewrites_the_table(tmp_path):
    (tmp_path / "matrix").mkdir()
    (tmp_path / "matrix" / "matrix.json").write_text(json.dumps(_matrix({"hail": 1.0})))
    (tmp_path / "later.json").write_text(json.dumps(_matrix({"topk_gleeb": 0.25})))
    done = _merge(tmp_path, tmp_path / "later.json")
    assert done.returncode == 0, done.stderr
    merged = json.loads((tmp_path / "matrix" / "matrix.json").read_text())
    assert list(merged["attacks"]) == ["hail", "topk_gleeb"]
    table = (tmp_path / "matrix" / "table.md").read_text()
    assert "| topk_gleeb (4) | 0.0% [0.0, 50.0] | 25.0% [0.0, 100.0] |" in table
    assert (tmp_path / "matrix" / "matrix.png").exists()


def test_merge_refuses_in_one_line_and_keeps_the_committed_matrix(tmp_path):
    (tmp_path / "matrix").mkdir()
    committed = json.dumps(_matrix({"hail": 1.0}))
    (tmp_path / "matrix" / "matrix.json").write_text(committed)
    cases = {"not json": "{", "another pool": json.dumps(_matrix({"topk_gleeb": 0.25}, fp=1)),
             "the same row": json.dumps(_matrix({"hail": 1.0})), "a list": "[]"}
    for why, text in cases.items():
        (tmp_path / "later.json").write_text(text)
        done = _merge(tmp_path, tmp_path / "later.json")
        assert done.returncode != 0 and done.stderr.startswith("--merge: "), why
        assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr, why
        assert (tmp_path / "matrix" / "matrix.json").read_text() == committed, why
    done = _merge(tmp_path, tmp_path / "missing.json")
    assert done.returncode != 0 and "missing.json" in done.stderr and len(done.stderr.strip().splitlines()) == 1
