import json

import pytest

from dgrpo.tasks.gsm8k import DataError, GSM8KTask, clean_solution

RECORDS = [
    {"question": "Ann has 2 bags with 2 apples each and eats 1. How many are left?",
     "answer": "She has 2*2=<<2*2=4>>4 apples.\nAfter eating one she has 4-1=<<4-1=3>>3.\n#### 3"},
    {"question": "Bob owes 5 and pays 8. What is his balance?", "answer": "5-8=<<5-8=-3>>-3\n#### -3"},
    {"question": "A car costs $1,234. How much?", "answer": "It costs 1,234 dollars.\n#### 1,234"},
]


def _write(path, records):
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    return path


def test_loads_official_format(tmp_path):
    train = _write(tmp_path / "train.jsonl", RECORDS)
    val = _write(tmp_path / "test.jsonl", RECORDS[:1])
    task = GSM8KTask(path=str(train), val_path=str(val))
    assert [p.answer for p in task.train] == ["3", "-3", "1234"]
    assert "two_two" in task.train[0].tags and "two_two" not in task.train[1].tags
    assert task.reward(task.oracle_completion(task.train[1]), task.train[1]) == 1.0
    assert len(task.val) == 1


def test_clean_solution_drops_calculator_marks():
    assert clean_solution(RECORDS[0]["answer"]) == "She has 2*2=4 apples.\nAfter eating one she has 4-1=3."


def test_holds_out_validation_when_no_file(tmp_path):
    task = GSM8KTask(path=str(_write(tmp_path / "t.jsonl", RECORDS)), n_val=1)
    assert len(task.train) == 2 and len(task.val) == 1


@pytest.mark.parametrize("bad,message", [
    ('{"question": "q"}\n', "needs string fields"),
    ('{"question": "q", "answer": "no final"}\n', "####"),
    ("not json\n", "not JSON"),
])
def test_malformed_files_name_the_problem(tmp_path, bad, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(bad)
    with pytest.raises(DataError, match=message):
        GSM8KTask(path=str(path), val_path=str(path))


def test_missing_file_and_source(tmp_path):
    with pytest.raises(DataError, match="no such file"):
        GSM8KTask(path=str(tmp_path / "nope.jsonl"))
    with pytest.raises(DataError):
        GSM8KTask()
