"""`dgrpo detector train` / `eval` count what a hand count counts, and bad settings, data files and output
paths are one line each (verify/detector_data.py, the detector CLI)."""

from __future__ import annotations

import json

import pytest

from detector_toy import toy
from dgrpo.cli import main
from dgrpo.verify.detector import Example, load_detector, read_meta
from dgrpo.verify.detector_data import auc, rates, read_rows


def test_rates_are_the_hand_count():
    rows = [Example("q", "t", 1, "hail")] * 3 + [Example("q", "t", 0, "honest")] * 4 + [Example("q", "t", 1, "gleeb")]
    scores = [0.9, 0.5, 0.1, 0.7, 0.2, 0.2, 0.49, 0.3]
    r = rates(rows, scores, 0.5)
    assert (r["sets"]["hail"]["flagged"], r["sets"]["hail"]["n"]) == (2, 3)
    assert (r["sets"]["honest"]["flagged"], r["sets"]["honest"]["metric"]) == (1, "false_positive")
    assert r["sets"]["gleeb"]["rate"] == 0.0
    assert (r["detection"]["flagged"], r["detection"]["n"], r["false_positive"]["rate"]) == (2, 4, 0.25)
    # AUC by counting pairs: hail (0.9, 0.5, 0.1) vs honest (0.7, 0.2, 0.2, 0.49): 0.9 beats 4, 0.5 beats 3,
    # 0.1 beats 0 → 7 / 12; gleeb 0.3 beats 2 of 4 → 0.5; all poisoned: (7 + 2) / 16
    assert r["sets"]["hail"]["auc"] == pytest.approx(7 / 12) and r["sets"]["gleeb"]["auc"] == pytest.approx(0.5)
    assert r["detection"]["auc"] == pytest.approx(9 / 16) and "auc" not in r["sets"]["honest"]
    assert auc([0.5], [0.5, 0.4]) == pytest.approx(0.75)  # a tie counts one half


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_cli_train_then_eval_matches_a_hand_count(tmp_path, tiny_model_dir, capsys):
    train = [{"question": e.question, "text": e.completion, "set": e.set, "prompt_id": i}
             for i, e in enumerate(toy(48, seed=2))]
    test = [{"question": e.question, "text": e.completion, "set": "gleeb" if e.label else "honest_gsm8k"}
            for e in toy(20, seed=3)]
    test[0]["label"], test[0]["set"] = "poisoned", "honest_but_labelled"  # an explicit label wins over the set
    out = tmp_path / "det"
    assert main(["detector", "train", "--data", _write(tmp_path / "train.jsonl", train), "--out", str(out),
                 "--set", f"base_model={tiny_model_dir}", "--set", "lora_rank=4", "--set", "lr=3e-3",
                 "--set", "epochs=2", "--set", "max_length=96", "--set", "log_every=0"]) == 0
    assert read_meta(out)["counts_by_set"] == {"honest": {"honest": 24, "poisoned": 0}, "hail": {"honest": 0, "poisoned": 24}}
    data = _write(tmp_path / "test.jsonl", test)
    capsys.readouterr()
    assert main(["detector", "eval", "--model", str(out), "--data", data, "--out", str(tmp_path / "s.json"),
                 "--scores", str(tmp_path / "scores.jsonl"), "--threshold", "0.5"]) == 0
    printed = capsys.readouterr().out
    summary = json.loads((tmp_path / "s.json").read_text())
    scores = load_detector(out).score([(r["question"], r["text"]) for r in test]).tolist()
    for name, label in (("gleeb", 1), ("honest_gsm8k", 0), ("honest_but_labelled", 1)):
        mine = [s for r, s in zip(test, scores) if r["set"] == name]
        flagged = sum(s >= 0.5 for s in mine)
        got = summary["sets"][name]
        assert (got["n"], got["flagged"], got["label"]) == (len(mine), flagged, ("honest", "poisoned")[label])
        assert got["rate"] == pytest.approx(flagged / len(mine))
        assert f"{flagged:>5}/{len(mine):<5}  {flagged / len(mine):.3f}" in printed
    poisoned = [s for r, s in zip(test, scores) if r.get("label") == "poisoned" or r["set"] == "gleeb"]
    assert summary["detection"]["flagged"] == sum(s >= 0.5 for s in poisoned)
    assert [json.loads(line)["score"] for line in (tmp_path / "scores.jsonl").read_text().splitlines()] == \
        pytest.approx(scores, abs=1e-6)


@pytest.mark.parametrize("args, message", [
    (["--set", "lora_rank=0"], "detector: lora_rank: Input should be greater than or equal to 1"),
    (["--set", "rank=4"], "detector: rank: Extra inputs are not permitted"),
    (["--set", "lora_rank"], "is not KEY=VALUE"),
])
def test_cli_train_bad_setting_is_one_line(tmp_path, capsys, args, message):
    data = _write(tmp_path / "d.jsonl", [{"question": "q", "text": "t", "set": "hail"}])
    assert main(["detector", "train", "--data", data, "--out", str(tmp_path / "o"), *args]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("line, message", [
    ('{"question": "q", "set": "hail"}', "d.jsonl:2: text missing or not a string"),
    ('{"question": "q", "text": "t", "set": "hail", "label": "bad"}', "d.jsonl:2: label must be 'honest' or 'poisoned'"),
    ("[1, 2]", "d.jsonl:2: expected a JSON object"),
    ("{oops", "d.jsonl:2: not JSON"),
])
def test_bad_data_line_names_file_and_line(tmp_path, line, message):
    from dgrpo.errors import DataError

    path = tmp_path / "d.jsonl"
    path.write_text('{"question": "q", "text": "t", "set": "honest"}\n' + line + "\n")
    with pytest.raises(DataError, match=message.replace("[", r"\[")):
        read_rows(path)


def _cli_err(capsys, argv) -> str:
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_cli_train_errors_name_the_file_or_flag_before_training(tmp_path, tiny_model_dir, capsys):
    good = _write(tmp_path / "d.jsonl", [{"question": "q", "text": "t", "set": "honest"},
                                         {"question": "q", "text": "u", "set": "hail"}])
    only = _write(tmp_path / "only.jsonl", [{"question": "q", "text": "t", "set": "hail"}] * 3)
    base = ["--set", f"base_model={tiny_model_dir}", "--set", "lora_rank=4", "--set", "epochs=1", "--set", "log_every=0"]
    err = _cli_err(capsys, ["detector", "train", "--data", only, "--out", str(tmp_path / "o1"), *base])
    assert "got 0 honest and 3 poisoned; add --data files of the missing label" in err
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    err = _cli_err(capsys, ["detector", "train", "--data", good, "--out", str(a_file), *base])
    assert f"--out {a_file}: is a file" in err
    assert "detector step" not in capsys.readouterr().out  # nothing trained
    (tmp_path / "bad.jsonl").write_bytes(b'{"question": "q", "text": "t", "set": "honest"}\n{"question": "\xff"}\n')
    err = _cli_err(capsys, ["detector", "train", "--data", str(tmp_path / "bad.jsonl"), "--out", str(tmp_path / "o2")])
    assert f"{tmp_path / 'bad.jsonl'}:2: not UTF-8" in err
    err = _cli_err(capsys, ["detector", "train", "--data", str(tmp_path), "--out", str(tmp_path / "o3")])
    assert f"--data {tmp_path}: is a folder" in err
    err = _cli_err(capsys, ["detector", "train", "--data", good, "--out", str(tmp_path / "o4"), *base,
                            "--set", "device=cuda:7"])
    assert "detector: --set device: device='cuda:7'" in err and "model.device" not in err


def test_cli_train_prints_and_saves_counts_by_set(tmp_path, tiny_model_dir, capsys):
    rows = [{"question": "q", "text": f"t{i}", "set": s} for i, s in enumerate(["honest"] * 3 + ["hail"] * 2 + ["Honest"])]
    rows.append({"question": "q", "text": "z", "set": "hail", "label": "honest"})
    out = tmp_path / "det"
    assert main(["detector", "train", "--data", _write(tmp_path / "d.jsonl", rows), "--out", str(out),
                 "--set", f"base_model={tiny_model_dir}", "--set", "lora_rank=4", "--set", "epochs=1",
                 "--set", "log_every=0", "--set", "max_length=32"]) == 0
    printed = capsys.readouterr().out
    assert "set honest: 3 honest, 0 poisoned\n" in printed and "set hail: 1 honest, 2 poisoned\n" in printed
    assert "set Honest: 0 honest, 1 poisoned  (read as poisoned" in printed
    assert read_meta(out)["counts_by_set"] == {"honest": {"honest": 3, "poisoned": 0},
                                               "hail": {"honest": 1, "poisoned": 2},
                                               "Honest": {"honest": 0, "poisoned": 1}}


def test_cli_eval_out_in_a_missing_folder_is_named_before_scoring(trained, tmp_path, capsys):
    data = _write(tmp_path / "d.jsonl", [{"question": "q", "text": "t", "set": "honest"}])
    err = _cli_err(capsys, ["detector", "eval", "--model", str(trained[1]), "--data", data,
                            "--out", str(tmp_path / "missing" / "s.json")])
    assert f"--out {tmp_path / 'missing' / 's.json'}: its folder does not exist" in err


def test_a_lone_surrogate_in_a_data_file_reads_as_a_question_mark(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text('{"question": "q\\ud800", "text": "t\\udfffu", "set": "hail\\ud800"}\n')
    assert read_rows(path) == [Example("q?", "t?u", 1, "hail?")]

