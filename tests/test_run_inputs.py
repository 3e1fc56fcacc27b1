"""Inputs a run reads, third review of issue 34: a surrogate pair in a YAML file is its character, an
invisible or over-long run name is one line, a task file that is a folder or a FIFO says what it is, and
an out_dir that cannot be created is one line. Every refusal comes before any model loads."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dgrpo import config_yaml
from dgrpo.cli import main
from dgrpo.config import NAME_MAX_BYTES, load_config
from dgrpo.errors import ConfigError, DataError


@pytest.fixture()
def no_model(monkeypatch):
    """Fail the test if a model would load."""
    import dgrpo.training.build as build

    monkeypatch.setattr(build, "load_policy", lambda *a, **k: pytest.fail("loaded a model before checking the inputs"))


def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("dgrpo: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_a_surrogate_pair_written_as_escapes_is_its_character(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text('name: "run \\ud83d\\ude00"\n', encoding="ascii")  # JSON's way of writing U+1F600
    assert load_config(path).name == "run " + chr(0x1F600)
    assert load_config(None, ['name="\\ud83d\\ude00"']).name == chr(0x1F600)
    for lone in ('"\\ud800"', '"\\ude00\\ud83d"', '"\\ud83d x"'):  # a lone half, the halves swapped, a half then text
        path.write_text(f"name: {lone}\n", encoding="ascii")
        with pytest.raises(ConfigError, match="lone surrogate"):
            load_config(path)


@pytest.mark.parametrize("name", ["\u200b", "\u200b\u200c\u200d\u2060", "\u00ad", "\u202e", "\u3164", "\u2800", " \u200b ",
                                  "\U000e0041"])
def test_a_name_that_prints_nothing_is_one_line(name, tmp_path, capsys, no_model):
    with pytest.raises(ConfigError, match="prints nothing"):
        load_config(None, [f'name="{name}"'])
    assert main(["run", f'name="{name}"', f"out_dir={tmp_path}"]) == 2
    assert "name" in _one_line(capsys) and os.listdir(tmp_path) == []


def test_a_name_with_an_invisible_character_inside_is_still_a_name():
    assert load_config(None, ["name=a\u200bb"]).name == "a\u200bb"


def test_a_name_over_the_folder_name_limit_in_bytes_is_one_line(tmp_path, capsys, no_model):
    assert NAME_MAX_BYTES <= os.pathconf(tmp_path, "PC_NAME_MAX")  # the file system's own limit
    longest = "é" * (NAME_MAX_BYTES // 2)  # 2 bytes each in UTF-8: 254 bytes, 127 characters
    assert load_config(None, [f"name={longest}"]).name == longest
    (tmp_path / longest).mkdir()  # (the file system takes it: the limit is not stricter than the kernel's)
    too_long = longest + "é"  # 256 bytes in 128 characters (the 200-character bound does not see it)
    with pytest.raises(ConfigError, match="name is 256 bytes in UTF-8 .128 characters.; a folder name holds at most 255 bytes"):
        load_config(None, [f"name={too_long}"])
    assert main(["run", f"name={too_long}", f"out_dir={tmp_path}"]) == 2
    assert "name is 256 bytes" in _one_line(capsys)


def test_a_task_file_that_is_a_folder_or_a_fifo_says_what_it_is(tmp_path, capsys, no_model):
    fifo = tmp_path / "train.jsonl"
    os.mkfifo(fifo)
    for path, what in ((tmp_path, "is a folder, not a file"), (fifo, "is a FIFO, not a regular file")):
        assert main(["run", "task.kind=gsm8k", f"task.path={path}", f"out_dir={tmp_path}", "name=r"]) == 2
        err = _one_line(capsys)
        assert f"task.path: {path} {what}" in err and "no such" not in err and not (tmp_path / "r").exists()


def test_a_task_file_that_is_not_utf8_names_the_field_the_file_and_the_line(tmp_path, capsys, no_model):
    bad, ok = tmp_path / "bin.jsonl", tmp_path / "ok.jsonl"
    bad.write_bytes(b'{"question": "q", "answer": "#### 3"}\n\xff\xfe\n')
    ok.write_text('{"question": "q", "answer": "#### 3"}\n')
    assert main(["run", "task.kind=gsm8k", f"task.path={bad}", f"task.val_path={ok}", f"out_dir={tmp_path}", "name=r"]) == 2
    err = _one_line(capsys)
    assert f"task.path: {bad}:2: not UTF-8 text (byte b'\\xff'); save the file as UTF-8" in err, err


def test_a_roster_file_that_is_no_roster_is_refused_before_the_model_loads(tmp_path, capsys, no_model):
    roster = tmp_path / "bad.jsonl"
    roster.write_text("not a roster\n")
    assert main(["run", f"swarm.protocol.roster={roster}", f"out_dir={tmp_path}", "name=r"]) == 2
    assert f"swarm.protocol.roster: {roster} is not a roster file written by `dgrpo keys`" in _one_line(capsys)


def test_the_task_readers_say_what_a_path_is_without_opening_it(tmp_path):
    from dgrpo.tasks.gsm8k import read_jsonl

    fifo = tmp_path / "f.jsonl"
    os.mkfifo(fifo)  # (opening it would block forever: the answer must come from stat alone)
    with pytest.raises(DataError, match="is a FIFO, not a regular file"):
        read_jsonl(fifo)
    with pytest.raises(DataError, match="is a folder, not a file"):
        read_jsonl(tmp_path)
    with pytest.raises(DataError, match="no such file"):
        read_jsonl(tmp_path / "missing.jsonl")


def test_an_out_dir_that_cannot_be_created_is_one_line(tmp_path, capsys, no_model):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    for out_dir, why in ((blocker / "runs", "Not a directory"), (tmp_path / ("d" * 300), "File name too long")):
        assert main(["run", f"out_dir={out_dir}", "name=r"]) == 2
        err = _one_line(capsys)
        assert f"out_dir={out_dir}: cannot create the run folder" in err and why in err


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("names")


@settings(max_examples=400, deadline=5000, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.text(min_size=1, max_size=140))
def test_fuzz_any_name_is_kept_exactly_and_makes_its_folder_or_is_one_line(name, fuzz_dir):
    """400 generated names (any Unicode but lone surrogates, up to 140 characters: up to 560 bytes) written in a
    config file: each is refused in one line, or read back exactly and creatable as a folder (no errno later)."""
    path = fuzz_dir / "c.yaml"
    path.write_text(config_yaml.dump({"name": name}), encoding="utf-8")
    try:
        cfg = load_config(path)
    except ConfigError as err:
        assert str(err) and "\n" not in str(err)
        return
    assert cfg.name == name
    folder = fuzz_dir / "out" / name
    folder.mkdir(parents=True, exist_ok=True)  # (raises on a name the file system refuses)
    assert folder.is_dir() and folder.parent == fuzz_dir / "out"


def test_a_model_name_that_is_a_file_is_one_line_before_any_model_loads(tmp_path, capsys, no_model, tiny_model_dir,
                                                                        monkeypatch):
    monkeypatch.chdir(tiny_model_dir)  # (a relative path, as a hub id would be written)
    assert main(["run", "model.name=config.json", f"out_dir={tmp_path}", "name=r"]) == 2
    err = _one_line(capsys)
    assert "model.name" in err and "config.json is a file, not a model folder" in err, err
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("what", ["empty", "missing", "file"])
def test_the_judge_model_folder_is_checked_before_any_model_loads(tmp_path, capsys, no_model, what):
    folder = tmp_path / "judge"
    if what == "empty":
        folder.mkdir()
    elif what == "file":
        folder.write_text("{}")
    assert main(["run", "defenses.0.kind=judge", f"defenses.0.model={folder}", f"out_dir={tmp_path}", "name=r"]) == 2
    err = _one_line(capsys)
    expect = {"empty": f"model folder {folder} holds no config.json", "missing": f"no such model folder: {folder}",
              "file": f"{folder} is a file, not a model folder"}[what]
    assert "judge: model: " in err and expect in err, err
    assert not (tmp_path / "r").exists()


# Sixth review of issue 34 (r34e): a YAML merge key gets no look-alike suggestions, a mistyped section's
# suggestion is a key that has the one key written under it, and a missing task file names its field
# and the fix whatever the task (it spoke of GSM8K for the dataset task too).
@pytest.mark.parametrize("text, where", [("base: &b {nodes: 4}\nswarm:\n  <<: *b\n", "swarm"),
                                         ("swarm: {<<: {nodes: 3}}\n", "swarm"), ("<<: {seed: 3}\n", "the top level")])
def test_a_yaml_merge_key_is_named_as_such(text, where, tmp_path, capsys, no_model):
    (tmp_path / "c.yaml").write_text(text)
    assert main(["run", "--config", str(tmp_path / "c.yaml"), f"out_dir={tmp_path}", "name=r"]) == 2
    err = _one_line(capsys)
    head = err.split("; base:")[0]  # (merge.yaml's anchor holder is an unknown key of its own)
    assert "a YAML merge key (<<)" in head and f"write the keys out under {where}" in head
    assert "did you mean" not in head and "nodes.nodes" not in err


@pytest.mark.parametrize("override, hint", [("swarm..nodes=4", "did you mean swarm.nodes?"),
                                            ("SWARM.nodes=4", "did you mean swarm.nodes?"),
                                            ("swarm.<<=4", "a YAML merge key (<<)")])
def test_a_mistyped_section_suggests_keys_that_hold_what_was_written(override, hint, tmp_path, capsys, no_model):
    assert main(["run", override, f"out_dir={tmp_path}", "name=r"]) == 2
    err = _one_line(capsys)
    assert hint in err and "mode.nodes" not in err and "models.nodes" not in err


@pytest.mark.parametrize("kind", ["dataset", "gsm8k"])
def test_a_missing_task_file_names_its_field_and_the_fix_for_any_task(kind, tmp_path, capsys, no_model, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["run", f"task.kind={kind}", "task.path=nope.jsonl", f"out_dir={tmp_path}", "name=r"]) == 2
    err = _one_line(capsys)
    assert f"task.path: no such file: nope.jsonl; set task.path to an existing file (a relative path is read from {tmp_path})" in err
    assert "GSM8K" not in err and not (tmp_path / "r").exists()
