"""The heterogeneous Table 1 script on a handful of hand-made completions (step checker only)."""

import json

import pytest

from bench_script import load_script


def _load(name):
    return load_script("heterogeneous_table1", name, "ht1")


table = _load("table")
sample = _load("sample")


def test_wilson_matches_the_closed_form():
    from dgrpo.metrics.intervals import Z95

    # k = 0: the upper bound is z² / (n + z²); k = n: the lower bound is n / (n + z²)
    assert table.wilson(0, 250)[1] == pytest.approx(Z95**2 / (250 + Z95**2))
    assert table.wilson(3, 3)[0] == pytest.approx(3 / (3 + Z95**2))
    lo, hi = table.wilson(20, 100)
    assert (round(lo, 4), round(hi, 4)) == (0.1334, 0.2888)  # the textbook Wilson interval of 20/100


def test_step_checker_rates_on_hand_made_sets(tmp_path):
    task = sample.task()
    (tmp_path / "poisoned.jsonl").write_text("".join(json.dumps(r) + "\n" for r in sample.poisoned(task, 3)))
    p = task.train[0]  # Nora: 5 * 6 = 30
    honest = [("There are 5 * 6 = 30 shells.</think>\n<answer>30</answer>", False),   # right: accepted
              ("There are 5 * 6 = 31 shells.</think>\n<answer>31</answer>", True),    # wrong arithmetic: rejected
              ("So 5 + 6 = 11.</think>\n<answer>11</answer>", False)]                 # true claim, wrong answer
    (tmp_path / "honest.jsonl").write_text("".join(
        json.dumps({"set": "honest", "prompt_id": p.prompt_id, "question": p.question, "text": t}) + "\n" for t, _ in honest))
    assert table.main(["--data", str(tmp_path), "--oracle", "5"]) == 0
    s = json.loads((tmp_path / "summary.json").read_text())["detectors"]["step_checker"]["sets"]
    assert (s["hail"]["rejected"], s["hail"]["n"]) == (0, 3)
    assert (s["equation"]["rejected"], s["equation"]["n"]) == (3, 3)
    h = s["honest_sampled"]
    assert (h["rejected"], h["n"]) == (1, 3)
    assert (h["correct_answer"]["rejected"], h["correct_answer"]["n"]) == (0, 1)
    assert (h["wrong_answer"]["rejected"], h["wrong_answer"]["n"]) == (1, 2)
    assert (s["honest_oracle"]["rejected"], s["honest_oracle"]["n"]) == (0, 5)
    [rej] = [json.loads(line) for line in (tmp_path / "rejected_honest.jsonl").read_text().splitlines()]
    assert rej["reason"] == 'false claim "5 * 6 = 31": the left side is 30, not 31'
    from dgrpo.metrics.intervals import Z95

    up, low = 100 * Z95**2 / (3 + Z95**2), 100 * 3 / (3 + Z95**2)  # 0/3 and 3/3 by the closed form
    md = (tmp_path / "table.md").read_text()
    assert f"| step_checker | 0.0% [0.0, {up:.1f}] (0/3) | 100.0% [{low:.1f}, 100.0] (3/3) |" in md
    assert "| step_checker | 33.3% [" in md.split("**false positives")[1]
