"""The served judge's Table 1 tooling: the decision rule's per-kind false-positive bound and split v2 by problem."""

import json

import pytest

from bench_script import load_script


def _module(name):
    return load_script("judge_table1", name, "judge_table1")


def _rows(set_name, scores, honest):
    return [{"set": set_name, "score": s, "honest": honest} for s in scores]


def test_the_bound_on_every_honest_kind_is_stricter_than_on_their_pool():
    report = _module("report")
    dev = (_rows("hail", [0.1, 0.2, 0.3, 0.9], False) + _rows("equation", [0.1, 0.65, 0.95, 0.96], False)
           + _rows("honest_oracle", [0.97] * 20, True) + _rows("honest_gsm8k", [0.6, 0.7] + [0.99] * 18, True))
    # pooled: 2 of 40 may be refused -> t = 0.97 refuses only 0.6 and 0.7 and catches all 8 poisons
    pooled = report.choose(dev, 0.05)
    assert pooled["threshold"] == 0.97 and pooled["dev_detection"] == 1.0 and pooled["dev_fp"] == 2 / 40
    # per kind: 1 of the 20 GSM8K rows may be refused -> t = 0.7 (refuses 0.6 only; the lowest t that refuses
    # 2+2=5 at 0.65): hail 3/4, 2+2=5 2/4
    per_kind = report.choose(dev, 0.05, per_kind=True)
    assert per_kind["threshold"] == 0.7 and per_kind["dev_detection"] == (3 / 4 + 2 / 4) / 2
    assert per_kind["dev_fp_worst_kind"] == 1 / 20 and per_kind["fp_per_kind"] is True
    assert per_kind["dev"]["honest_gsm8k"] == {"rejected": 1, "n": 20}
    assert per_kind["dev"]["honest_oracle"] == {"rejected": 0, "n": 20}


def test_split_v2_puts_every_row_of_a_looked_at_problem_on_dev(tmp_path):
    sets = _module("sets")
    seen = tmp_path / "scores.jsonl"
    seen.write_text("".join(json.dumps({"key": k}) + "\n" for k in ("gleeb/train-2/1", "honest_gsm8k/train-500")))
    keys = {"hail/train-1/0": "dev", "gleeb/train-1/0": "heldout", "gleeb/train-2/1": "heldout",
            "honest_oracle/train-2": "heldout", "code/train-3/2": "heldout", "honest_gsm8k/train-3": "heldout",
            "honest_gsm8k/train-60": "heldout", "honest_gsm8k/train-500": "heldout", "honest_oracle/train-500": "heldout"}
    rows = [{"set": k.split("/")[0], "split": s, "key": k} for k, s in keys.items()]
    got = {r["key"]: r["split"] for r in sets.resplit_v2(rows, seen)}
    assert got == {"hail/train-1/0": "dev", "gleeb/train-1/0": "dev",  # a v1 dev row's problem
                   "gleeb/train-2/1": "dev", "honest_oracle/train-2": "dev",  # a judged row's problem, every set
                   "code/train-3/2": "heldout",
                   "honest_gsm8k/train-3": "dev", "honest_gsm8k/train-60": "heldout",  # GSM8K test-0..59 are dev
                   "honest_gsm8k/train-500": "dev",  # judged; GSM8K and arithmetic problems are apart:
                   "honest_oracle/train-500": "heldout"}


def test_an_unknown_split_is_one_line():
    with pytest.raises(ValueError, match="^split must be v1 or v2, got 'v3'$"):
        _module("sets").load(split="v3")


def test_pick_fills_each_set_up_to_n_judged_rows_with_evenly_spaced_fresh_ones():
    score = _module("score")
    rows = [{"set": "a", "key": f"a{i}"} for i in range(10)] + [{"set": "b", "key": f"b{i}"} for i in range(4)]
    assert [r["key"] for r in score.pick(rows, 2, None, set())] == ["a0", "a5", "b0", "b2"]
    # a: 3 judged -> 2 more of the 7 fresh (a1 a3 a5 a7 a8 a9 ... spaced by 3.5: indices 0 and 3); b: 4 judged -> none
    judged = {"a0", "a2", "a4", "b0", "b1", "b2", "b3"}
    assert [r["key"] for r in score.pick(rows, None, 5, judged)] == ["a1", "a6"]
    assert score.pick(rows, None, 3, judged) == []
