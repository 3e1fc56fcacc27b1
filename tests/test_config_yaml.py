"""Configs read as written (issue 34): overrides and files use YAML 1.2's core schema, strictly
(dgrpo.config_yaml). Each YAML form that 1.1 reads as a number nobody wrote is text or an error; tag
errors, oversized integers, repeated keys, lone surrogates and non-regular files are one line; the fuzz is
tests/test_config_yaml_fuzz.py."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time

import pytest
import yaml

import dgrpo.recipes
from dgrpo import config_yaml
from dgrpo.cli import main
from dgrpo.config import load_config
from dgrpo.errors import ConfigError


@pytest.fixture()
def refuse_runs(monkeypatch):
    monkeypatch.setattr(dgrpo.recipes, "run", lambda cfg, run_dir=None: pytest.fail(f"accepted {cfg!r}"[:200]))


def one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("dgrpo: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


# (override, the error's words) for each YAML 1.1 form that would run with a number nobody wrote
NUMBER_FORMS = [
    ("seed=017", "seed: must be a number, not the text '017'"),        # 1.1: octal 15
    ("rounds=1:30", "rounds: must be a number, not the text '1:30'"),  # 1.1: sexagesimal 90
    ("eval.every=1:00", "eval.every: must be a number, not the text '1:00'"),
    ("seed=0x1f", "seed: must be a number, not the text '0x1f'"),      # 1.1 and 1.2: 31
    ("seed=0o17", "seed: must be a number, not the text '0o17'"),
    ("seed=1_000", "seed: must be a number, not the text '1_000'"),
    ("grpo.lr=01.5", "grpo.lr: must be a number, not the text '01.5'"),
    ("eval.greedy=yes", "eval.greedy: must be true or false, not 'yes'"),  # 1.1: true
    ("eval.first=off", "eval.first: must be true or false, not 'off'"),
    ("eval.greedy=1", "eval.greedy: must be true or false, not 1"),
    ("swarm.malicious=[01]", "swarm.malicious.0: Input should be a valid integer"),  # (a strict field: pydantic's words)
]


@pytest.mark.parametrize("override, message", NUMBER_FORMS)
def test_a_yaml_1_1_number_form_is_refused_never_converted(override, message, capsys, refuse_runs):
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(None, [override])
    assert main(["run", override]) == 2 and message in one_line(capsys)


@pytest.mark.parametrize("value, name", [("0x1f", "0x1f"), ("1.10", "1.10"), ("017", "017"), ("2024-01-01", "2024-01-01"),
                                         ("1e3", "1e3"), ("2024", "2024"), ("'007'", "007"), ("1:30", "1:30")])
def test_name_is_always_the_text_as_written(value, name):
    assert load_config(None, [f"name={value}"]).name == name


def test_the_same_forms_in_a_file(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("name: 0x1f\nseed: 17\ngrpo:\n  lr: 2e-5\neval:\n  every: 3\n")
    cfg = load_config(path)
    assert (cfg.name, cfg.seed, cfg.grpo.lr, cfg.eval.every) == ("0x1f", 17, 2e-5, 3)  # 1.1 reads 2e-5 as text
    path.write_text("seed: 017\n")
    with pytest.raises(ConfigError, match="seed: must be a number, not the text '017'"):
        load_config(path)


TAGS = ["seed=!!int 3.5", "grpo.lr=!!float abc", "seed=!!timestamp 2024-99-99", "eval.greedy=!!bool maybe",
        "seed=!!int 0b2", "seed=!!int 0x10", "seed=!!binary aGk=", "seed=!!python/object:os.system x", "seed=!!null 0"]


@pytest.mark.parametrize("override", TAGS)
def test_a_tag_error_is_one_line(override, capsys, refuse_runs):
    key = override.split("=")[0]
    with pytest.raises(ConfigError, match=rf"^{re.escape(override[:60])}: "):
        load_config(None, [override])
    assert main(["run", override]) == 2 and key in one_line(capsys)


def test_core_tags_read_by_the_same_rules():
    assert load_config(None, ["seed=!!int 17", "name=!!str 017", "grpo.lr=!!float 1e-4"]).model_dump(
        include={"seed", "name"}) == {"seed": 17, "name": "017"}


@pytest.mark.parametrize("digits", [20, 4_301, 100_000])
def test_an_oversized_integer_is_one_line_in_an_override_and_a_file(digits, tmp_path, capsys, refuse_runs):
    assert main(["run", f"seed={'9' * digits}"]) == 2 and "out of range" in one_line(capsys)
    path = tmp_path / "big.yaml"
    path.write_text(f"eval:\n  every: {'9' * digits}\n")
    assert main(["run", "--config", str(path)]) == 2
    assert "line 2, column 10: integer 999999999999" in one_line(capsys)


@pytest.mark.parametrize("text, message", [
    ("seed: 1\nseed: 2\n", "line 2, column 1: key 'seed' is given twice"),
    ('name: "\\ud800"\n', "line 1, column 7: '\\ud800' holds a lone surrogate"),
    ("seed: [1\n", "line 2, column 1: expected ',' or ']'"),
    ("seed: !!set {1}\n", "could not determine a constructor for the tag 'tag:yaml.org,2002:set'"),
    ("seed: &a 1\nrounds: *b\n", "found undefined alias 'b'"),
])
def test_a_malformed_file_is_one_line_with_its_line(text, message, tmp_path, capsys, refuse_runs):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    assert main(["run", "--config", str(path)]) == 2
    err = one_line(capsys)
    assert f"cannot read config {path}: " in err and message in err


def test_a_lone_surrogate_in_an_override_is_one_line(capsys, refuse_runs):
    assert main(["run", "name=\udcff"]) == 2  # (a non-UTF-8 byte in argv arrives as a surrogate)
    assert "bytes that are not UTF-8" in one_line(capsys)


def test_a_fifo_as_config_is_refused_at_once(tmp_path, capsys, refuse_runs):
    fifo = tmp_path / "c.yaml"
    os.mkfifo(fifo)  # no writer: opening it for reading would block forever
    result = {}
    worker = threading.Thread(target=lambda: result.setdefault("rc", main(["run", "--config", str(fifo)])), daemon=True)
    worker.start()
    worker.join(10)
    assert result.get("rc") == 2, "dgrpo run --config FIFO hung"
    assert f"config {fifo} is a FIFO, not a regular file" in one_line(capsys)


@pytest.mark.parametrize("path, what", [("/dev/null", "a device"), ("/dev/zero", "a device"), ("/", "a folder")])
def test_a_device_or_folder_as_config_is_refused(path, what, capsys, refuse_runs):
    assert main(["run", "--config", path]) == 2 and f"is {what}, not a regular file" in one_line(capsys)


@pytest.mark.parametrize("overrides, hint", [(["swarm.node=4"], "did you mean swarm.nodes"),
                                             (["grpo.lrr=1e-5"], "did you mean grpo.lr"),
                                             (["defenses=[{kind: topk, atoll: 1e-4}]"], "did you mean defenses.0.atol"),
                                             (["task.kind=gsm8k", "task.pth=x.jsonl"], "did you mean task.path")])
def test_dgrpo_run_names_the_closest_keys(overrides, hint, capsys, refuse_runs):
    assert main(["run", *overrides]) == 2 and hint in one_line(capsys)


# Fourth review of issue 34 (r34c 3b, 3c): the same closest name as `dgrpo config KEY`, whatever the case.
@pytest.mark.parametrize("overrides, hint", [(["grpo.LR=1e-5"], "did you mean grpo.lr"),
                                             (["SWARM.nodes=3"], "did you mean swarm.nodes?"),
                                             (["attack.kind=injection", "attack.targt=x"], "did you mean attack.text"),
                                             (["attack.kind=injection", "attack.Target=x"], "did you mean attack.text"),
                                             (["rounds2=3"], "rounds2: Extra inputs are not permitted; did you mean rounds"),
                                             (["swarm.nodes2=3"], "did you mean swarm.nodes")])
def test_dgrpo_run_suggests_what_dgrpo_config_suggests(overrides, hint, capsys, refuse_runs):
    assert main(["run", *overrides]) == 2
    err = one_line(capsys)
    assert hint in err and "list index" not in err
    from dgrpo.config_doc import lookup_rows
    if "=" in overrides[-1] and "2=" not in overrides[-1] and "SWARM" not in overrides[-1]:
        with pytest.raises(ConfigError, match=hint.split("did you mean ")[1].rstrip("?")):
            lookup_rows(overrides[-1].split("=")[0])  # (the config command names the same key)


def test_a_written_config_reads_back_the_same_under_yaml_1_1_and_1_2():
    data = {"name": "017", "a": "yes", "b": "1e5", "c": "1:30", "d": "0x1f", "e": "2024-01-01", "f": 1.5e-5,
            "g": "null", "h": "~", "i": "", "j": [True, None, 3]}
    text = config_yaml.dump(data)
    assert config_yaml.load(text) == data and yaml.safe_load(text) == data


def _billion_laughs(levels: int = 9) -> str:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def test_billion_laughs_is_refused_at_once(tmp_path, capsys, refuse_runs):
    path = tmp_path / "lol.yaml"
    path.write_text(_billion_laughs())  # 9^9 = 387,420,489 strings once expanded
    start = time.process_time()
    assert main(["run", "--config", str(path)]) == 2
    assert "line 1, column 1: the aliases (*a) of this YAML expand to more than 100,000 values" in one_line(capsys)
    assert time.process_time() - start < 5.0
    path.write_text("a: &a [1, *a]\n")  # (an alias inside the value it names)
    assert main(["run", "--config", str(path)]) == 2 and "refers to a value that contains it" in one_line(capsys)
    path.write_text("x: &s 3\nseed: *s\n")  # a small alias stays YAML as written
    with pytest.raises(ConfigError, match="x: Extra inputs|unknown config key 'x'"):
        load_config(path)


# The review of the first pass (issue 34): YAML forms that still changed a value silently or ended in a traceback.
REVIEW_FORMS = [
    ("defenses.\u00b9.kind=replay", "override 'defenses.\u00b9.kind': '\u00b9' is not a list index or a key; write list "
                                   "indices in ASCII digits (defenses.0.kind=replay)"),  # was: ValueError traceback
    ("defenses.\u0660.kind=replay", "'\u0660' is not a list index or a key"),  # was: silently index 0
    ("seed=3 # my note", "seed=3 # my note: '#' here starts a YAML comment and the rest would be dropped"),  # was: 3
    ("name=run #2", "'#' here starts a YAML comment"),  # was: the folder 'run'
    ("name=#2", "'#' here starts a YAML comment"),  # was: no name at all (null)
    ("name=---", "name=---: '---' is a YAML document marker, not a value; quote it"),  # was: null
    ("name=--- x", "'---' is a YAML document marker"),  # was: 'x'
    ("name=&a x", "name=&a x: YAML anchors (&a) and aliases (*a) are not read in an override"),  # was: 'x'
    ("seed=&a 3", "YAML anchors (&a) and aliases (*a) are not read in an override"),
    ("grpo.beta=1e-400", "grpo.beta=1e-400: '1e-400' is too small for a float and would be read as 0"),  # was: 0.0
    ("grpo.lr=1e400", "'1e400' is too large for a float and would be read as infinity"),
    ("seed=12.0000000000000001", "seed: must be a whole number, not 12.0000000000000001"),  # was: 12
    ("rounds=2.5", "rounds: must be a whole number, not 2.5"),
]


@pytest.mark.parametrize("override, message", REVIEW_FORMS)
def test_a_form_the_review_found_is_one_line(override, message, capsys, refuse_runs):
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(None, [override])
    assert main(["run", override]) == 2 and message in one_line(capsys)


@pytest.mark.parametrize("override, field, value", [
    ("name=a#b", "name", "a#b"), ("name='run #2'", "name", "run #2"), ('name="--- x"', "name", "--- x"),
    ("name='&a x'", "name", "&a x"), ("seed=12.0", "seed", 12), ("rounds=1e2", "rounds", 100), ("name=...", "name", "..."),
    ("grpo.lr=1e-300", "grpo.lr", 1e-300), ("defenses.0.kind=replay", "defenses", None),
])
def test_the_same_characters_where_yaml_reads_them_as_text_stay_as_written(override, field, value):
    got = load_config(None, [override])
    for part in field.split("."):
        got = getattr(got, part)
    assert got == value if value is not None else got[0].kind == "replay"


def test_an_override_that_is_not_yaml_stays_text_and_reading_takes_no_time_for_a_deep_value():
    assert load_config(None, ["swarm.malicious=[3]", "attack.kind=injection", "attack.text=a: b: c"]).attack.text == "a: b: c"
    out = subprocess.run([sys.executable, "-c", "from dgrpo.config import load_config; load_config(None, ['name=' + '[' * 10000])"],
                         capture_output=True, text=True, timeout=60)
    assert "nested more than 32 levels" in out.stderr and out.stderr.count("Traceback") == 1  # (raised in -c: one traceback)


@pytest.mark.parametrize("overrides, named", [
    (["task.kind=gsm8k", "task.path=/nonexistent/train.jsonl"], "task.path: no such file: /nonexistent/train.jsonl"),
    (["task.kind=dataset", "task.path=/nonexistent/d.jsonl"], "task.path: no such file"),
    (["task.kind=python_math", "task.path=/nonexistent/p.jsonl"], "task.path: no such file"),
    (["swarm.protocol.roster=/nonexistent/roster.json", "swarm.protocol.key_dir=/nonexistent/keys"],
     "swarm.protocol.roster: no such file: /nonexistent/roster.json; swarm.protocol.key_dir: no such folder"),
    (["defenses=[{kind: judge, backend: detector, path: /nonexistent/det}]"], "detector path '/nonexistent/det' is not a folder"),
])
def test_every_path_a_run_needs_is_checked_before_any_model_loads(overrides, named, tmp_path, capsys, monkeypatch):
    import dgrpo.training.build as build

    monkeypatch.setattr(build, "load_policy", lambda *a, **k: pytest.fail("loaded a model before checking the paths"))
    assert main(["run", *overrides, f"out_dir={tmp_path}", "name=r"]) == 2
    err = one_line(capsys)
    assert named in err and not (tmp_path / "r").exists()
    if "task.path" in named:
        assert "docs/datasets.md" in err  # where to get the data a clone does not have


def test_an_int_keyed_mapping_reads_back_from_a_written_config_and_refuses_other_key_forms():
    from pydantic import ValidationError

    from dgrpo.registry import StrictConfig

    class Joins(StrictConfig):
        join: dict[int, int] = {}

    written = config_yaml.dump(Joins(join={2: 2}).model_dump(mode="json"))  # JSON writes int keys as text
    assert Joins.model_validate(config_yaml.load(written)).join == {2: 2}
    for bad in ({"02": 2}, {"0x2": 2}, {2: "2"}):
        with pytest.raises(ValidationError, match="must be a number, not the text|valid integer"):  # never converted
            Joins.model_validate({"join": bad})
