"""task.kind=dataset: any dataset by column mapping and a reward function by import path, from a config."""

import csv
import json
import sys

import pytest

from dgrpo.cli import main
from dgrpo.config import load_config
from dgrpo.errors import ConfigError, DataError
from dgrpo.metrics.logger import read_metrics
from dgrpo.training.build import build_task

REWARD = '''
CALLS = []


def tagged(completion, problem):
    """1 when the completion writes the answer in answer tags, 0.5 when it writes the number anywhere."""
    CALLS.append((completion, problem.question))
    if f"<answer>{problem.answer}</answer>" in completion:
        return 1.0
    return 0.5 if problem.answer in completion else 0.0


def two_args_missing(completion):
    return 0.0


def out_of_range(completion, problem):
    return 2.0
'''

ROWS = [{"q": f"Ann has {i} pens and buys 2. How many?", "a": str(i + 2), "why": f"{i} + 2 = {i + 2}"} for i in range(12)]


@pytest.fixture()
def data(tmp_path, monkeypatch):
    (tmp_path / "myrewards.py").write_text(REWARD)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("myrewards", None)
    with (tmp_path / "pens.jsonl").open("w") as fh:
        for r in ROWS:
            fh.write(json.dumps(r) + "\n")
    with (tmp_path / "pens.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, ["q", "a", "why"])
        w.writeheader()
        w.writerows(ROWS)
    return tmp_path


MAP = "task.columns={question: q, answer: a, solution: why}"


@pytest.mark.parametrize("name", ["pens.jsonl", "pens.csv"])
def test_column_mapping_and_reward_by_import_path(data, name):
    cfg = load_config(None, ["task.kind=dataset", f"task.path={data / name}", MAP, "task.n_val=4",
                             "task.reward=myrewards:tagged", "task.few_shot=0"])
    task = build_task(cfg)
    assert len(task.train) == 8 and len(task.val) == 4
    p = task.train[3]
    assert (p.question, p.answer, p.solution) == (ROWS[3]["q"], "5", "3 + 2 = 5")  # a CSV's 5 is read as "5" too
    assert task.val[0].question == ROWS[8]["q"]
    assert task.rewards(["</think><answer>5</answer>", "so 5 pens", "7"], [p, p, p]) == [1.0, 0.5, 0.0]
    assert task.oracle_completion(p) == "3 + 2 = 5</think>\n<answer>5</answer>"  # (after the <think> prefill)


def test_bad_columns_and_rewards_are_one_line_errors(data):
    path = f"task.path={data / 'pens.jsonl'}"
    with pytest.raises(DataError, match=r"task.columns.question='question' is not a column of .*pens.jsonl \(columns: q, a, why\)"):
        build_task(load_config(None, ["task.kind=dataset", path]))
    for spec, message in (("myrewards:nope", "module 'myrewards' has no function 'nope'"),
                          ("nomodule_xyz:f", "cannot import 'nomodule_xyz'"),
                          ("myrewards", "reward must look like module:function"),
                          ("myrewards:two_args_missing", r"must take \(completion: str, problem: Problem\)")):
        with pytest.raises(ConfigError, match=message):
            load_config(None, ["task.kind=dataset", path, MAP, f"task.reward={spec}"])
    task = build_task(load_config(None, ["task.kind=dataset", path, MAP, "task.n_val=2", "task.reward=myrewards:out_of_range"]))
    with pytest.raises(ValueError, match=r"returned 2.0: a reward is a number in \[0, 1\]"):
        task.reward("x", task.train[0])


def test_a_dataset_folder_by_hub_with_splits(data):
    folder = data / "pens"
    folder.mkdir()
    for split, rows in (("train", ROWS[:9]), ("test", ROWS[9:])):
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = build_task(load_config(None, ["task.kind=dataset", f"task.hub={folder}", MAP, "task.val_split=test"]))
    assert [p.answer for p in task.val] == ["11", "12", "13"] and len(task.train) == 9


def test_a_run_trains_on_the_dataset_with_the_custom_reward(data, tiny_model_dir):
    rc = main(["run", f"model.name={tiny_model_dir}", f"out_dir={data}", "name=ds", "rounds=2", "swarm.nodes=2",
               "swarm.group_size=2", "swarm.prompts_per_round=2", "sampling.max_new_tokens=6", "eval.every=1",
               "eval.n_prompts=2", "task.kind=dataset", f"task.path={data / 'pens.jsonl'}", MAP, "task.n_val=4",
               "task.few_shot=0", "task.reward=myrewards:tagged"])
    assert rc == 0
    import myrewards

    train_questions = {r["q"] for r in ROWS[:8]}
    trained = [q for _, q in myrewards.CALLS if q in train_questions]
    assert len(trained) >= 2 * 2 * 2  # every training completion of both rounds was scored by it
    assert all(q in {r["q"] for r in ROWS} for _, q in myrewards.CALLS)
    records = read_metrics(data / "ds")
    assert [r["round"] for r in records] == [0, 1, 2] and "eval/accuracy" in records[-1]


def test_an_oracle_the_math_reward_cannot_read_is_refused_at_load(tmp_path):
    """Review of issue 34 (N3): an answer column holding ``x+1`` loaded, then the math reward raised
    ``ValueError`` at the first well-formed completion, mid-run. Now the load refuses it in one line naming
    the record; ``$x+1$`` (LaTeX) and a custom reward function are accepted."""
    from dgrpo.tasks.dataset import DatasetTask

    rows = [{"q": f"q{i}", "a": str(i)} for i in range(6)]
    rows[4]["a"] = "x+1"  # (math-verify reads no expression from it: answers_match raises, as the reward would)
    path = tmp_path / "sym.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cols = {"question": "q", "answer": "a"}
    with pytest.raises(DataError) as err:
        DatasetTask(path=str(path), columns=cols, n_val=2)
    assert str(err.value).count("\n") == 0
    assert "record train-4: answer 'x+1' is neither a number nor an expression the math reward reads" in str(err.value)
    rows[4]["a"] = "$x+1$"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert DatasetTask(path=str(path), columns=cols, n_val=2).val[0].answer == "$x+1$"  # (record 4: held out)


def test_an_oracle_the_math_reward_would_not_credit_as_itself_is_refused_at_load(tmp_path):
    """Fifth review of issue 34 (r34d N3): an exact right answer must never earn 0 silently. ``$\\sqrt{2}$``
    and ``$\\pi$`` now credit themselves (the oracle's own √ and π are no hedge) and load; an oracle that
    names two candidates (``$1$ or $2$``) would pay every completion 0, and is refused in one line."""
    from dgrpo.rewards.math import math_reward
    from dgrpo.tasks.dataset import DatasetTask

    rows = [{"q": f"q{i}", "a": a} for i, a in enumerate(["$\\sqrt{2}$", "$\\pi$", "3", "4", "5", "6"])]
    path = tmp_path / "sym.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cols = {"question": "q", "answer": "a"}
    task = DatasetTask(path=str(path), columns=cols, n_val=2)
    for p in task.train + task.val:
        assert math_reward(f"<think>x</think><answer>{p.answer}</answer>", p.answer) == 1.0
    rows[3]["a"] = "$x+1$ or $x+2$"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DataError) as err:
        DatasetTask(path=str(path), columns=cols, n_val=2)
    assert str(err.value).count("\n") == 0
    assert "record train-3: the math reward does not credit the answer '$x+1$ or $x+2$'" in str(err.value)
