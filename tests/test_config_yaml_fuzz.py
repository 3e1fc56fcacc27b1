"""The config fuzz (issue 34): 1,800 generated overrides and files through dgrpo's YAML 1.2 reader
(dgrpo.config_yaml): each is read as written or refused in one line, never a traceback, a hang or a
changed value. The hand-written forms are tests/test_config_yaml.py."""

from __future__ import annotations

import re
import string
import time
from fractions import Fraction

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dgrpo import config_yaml
from dgrpo.config import RunConfig, load_config, read_config_file
from dgrpo.errors import ConfigError

INT_KEYS = ["seed", "rounds", "eval.every", "swarm.nodes", "task.n_train", "checkpoint_every"]
FLOAT_KEYS = ["grpo.lr", "grpo.beta", "sampling.temperature"]
BOOL_KEYS = ["eval.greedy", "eval.first", "tensorboard"]
FUZZ = settings(max_examples=300, deadline=2000, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def _number_text():
    n = st.integers(min_value=0, max_value=10**6)
    return st.one_of(
        n.map(str), n.map(lambda v: f"0{v}"), n.map(hex), n.map(oct), n.map(lambda v: f"{v // 60}:{v % 60:02d}"),
        n.map(lambda v: f"{v:_}"), st.floats(allow_nan=True, allow_infinity=True).map(repr),
        st.sampled_from(["yes", "no", "on", "off", "y", "true", "False", "null", "~", "", ".inf", ".nan", "1e5", "1.0e-5",
                         "2024-01-01", "!!int 3.5", "!!float abc", "!!bool maybe", "0b101", "+7", "-0", "1.10", "5.",
                         "12.0000000000000001", "12.0", "1e2", "1e-400", "-1e-400", "1e400", "0e5", "0.000", "3 # c",
                         "# 3", "3 #", "'3 # c'", "--- 3", "---", "... 3", "&a 3", "*a", "&a [1, *a]", "\u00b9", "\u0663"]),
        st.tuples(n, st.sampled_from([" # ", " #", "\t#", "#"]), st.text(string.printable, max_size=5)).map(lambda t: f"{t[0]}{t[1]}{t[2]}"),
        st.text(string.printable, max_size=12), st.text(max_size=8))


def _as_written(text: str):
    """What a value written as ``text`` means under YAML 1.2's strict schema, computed here on its own:
    an int (decimal, no leading zero), a float (a point or an exponent), a bool, None, or the text."""
    t = text.strip()
    if re.fullmatch(r"[-+]?(0|[1-9][0-9]*)", t):
        return int(t)
    if re.fullmatch(r"[-+]?((0|[1-9][0-9]*)(\.[0-9]*)?([eE][-+]?[0-9]+)?|\.[0-9]+([eE][-+]?[0-9]+)?)", t):
        return float(t)
    return {"true": True, "True": True, "TRUE": True, "false": False, "False": False, "FALSE": False}.get(t, text)


def _field(cfg: RunConfig, key: str):
    value = cfg
    for part in key.split("."):
        value = getattr(value, part)
    return value


@pytest.fixture(scope="module")
def fuzz_file(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz") / "c.yaml"


def _loaded_or_one_line(overrides=None, path=None):
    try:
        return load_config(path, overrides)
    except ConfigError as err:
        assert "\n" not in str(err) and str(err), err
        return None


@FUZZ
@given(key=st.sampled_from(INT_KEYS + FLOAT_KEYS + BOOL_KEYS), text=_number_text())
def test_fuzz_a_number_or_boolean_override_is_as_written_or_one_line(key, text):
    cfg = _loaded_or_one_line([f"{key}={text}"])
    if cfg is not None:
        meant, got = _as_written(text), _field(cfg, key)
        assert type(meant) is not str and meant == got and isinstance(meant, bool) == isinstance(got, bool), (text, got)
        if type(meant) in (int, float) and key in INT_KEYS:  # exactly the number written, not one it rounds to
            assert Fraction(text.strip()) == got, (text, got)
        elif type(meant) is float and meant == meant and abs(meant) != float("inf"):  # no underflow to 0
            assert (got == 0) == (Fraction(text.strip()) == 0), (text, got)


@FUZZ
@given(text=st.one_of(_number_text(), st.text(string.ascii_letters + string.digits + "._-:+", min_size=1, max_size=20)))
def test_fuzz_name_is_the_text_as_written_or_one_line(text):
    cfg = _loaded_or_one_line([f"name={text}"])
    meant = _as_written(text)
    if cfg is not None and cfg.name is not None and type(meant) in (int, float, str) and not isinstance(meant, bool) \
            and re.fullmatch(r"[\w.:+-]+", text):
        assert cfg.name == text, (text, cfg.name)


_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(), st.text(max_size=10), _number_text())
_trees = st.recursive(_scalars, lambda c: st.one_of(st.lists(c, max_size=3), st.dictionaries(st.text(max_size=6), c, max_size=3)),
                      max_leaves=8)


@FUZZ
@given(data=st.dictionaries(st.sampled_from(["seed", "rounds", "name", "grpo", "eval", "swarm", "task", "attack", "x"]),
                            _trees, max_size=4))
def test_fuzz_a_generated_config_file_loads_as_written_or_is_one_line(data, fuzz_file):
    try:
        text = config_yaml.dump(data)
    except (yaml.YAMLError, ValueError):  # (a key or value no YAML can hold: hypothesis made it, nobody writes it)
        return
    fuzz_file.write_text(text, encoding="utf-8")
    try:
        assert config_yaml.load(text) == data or "nan" in text  # (NaN is not equal to itself)
    except yaml.YAMLError as err:
        assert "out of range" in str(err)  # the one value a written file may not read back: |n| ≥ 2^63
    cfg = _loaded_or_one_line(path=fuzz_file)
    if cfg is not None:
        for key in ("seed", "rounds"):
            if key in data:  # a number as written (12.0 is 12), never text or a boolean made one
                assert getattr(cfg, key) == data[key] and type(data[key]) in (int, float)
        if isinstance(data.get("name"), str):
            assert cfg.name == data["name"]


@FUZZ
@given(text=st.text(max_size=60))
def test_fuzz_arbitrary_file_text_is_a_config_or_one_line(text, fuzz_file):
    path = fuzz_file
    path.write_bytes(text.encode("utf-8", "surrogatepass"))
    try:
        read_config_file(path)
    except ConfigError as err:
        assert "\n" not in str(err)
        return
    _loaded_or_one_line(path=path)


@FUZZ
@given(digit=st.characters(categories=["Nd", "No"]), key=st.sampled_from(["defenses.{}.kind=replay", "swarm.malicious.{}=1",
                                                                            "defenses.0.{}=1", "{}=1"]))
def test_fuzz_a_key_with_a_digit_of_another_script_is_one_line(digit, key):
    cfg = _loaded_or_one_line([key.format(digit)])
    assert cfg is None or digit in "0123456789", (digit, cfg)


@FUZZ
@given(width=st.integers(1, 12), depth=st.integers(1, 12), comment=st.booleans())
def test_fuzz_a_file_of_anchors_and_aliases_loads_or_is_refused_at_once(width, depth, comment, fuzz_file):
    lines = ["a0: &a0 [" + ", ".join(["lol"] * width) + "]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]" for i in range(1, depth)]
    fuzz_file.write_text("\n".join(lines) + ("  # a comment is fine in a file" if comment else "") + "\n")
    expanded = sum(width ** (i + 1) for i in range(depth)) * 2  # (every level's list, the items and the key nodes)
    start = time.process_time()
    try:
        read_config_file(fuzz_file)
    except ConfigError as err:
        assert "expand to more than 100,000 values" in str(err) and expanded > 50_000, (width, depth)
    assert time.process_time() - start < 5.0


def test_the_fuzz_runs_at_least_1000_cases():
    assert 6 * FUZZ.max_examples >= 1_000
