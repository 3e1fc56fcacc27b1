"""Malformed configs and overrides (issue 18): every one ends in one line on stderr naming the field,
exit code 2, no traceback, no hang and no run directory left behind.

Each class of bad input is a case below (bounds of the fields that size memory or time, control
characters in names and paths, deep nesting, an unbounded config file, an empty model folder); a
hypothesis test then drives 1,000 generated malformed inputs through the real command line.
"""

from __future__ import annotations

import json
import string
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dgrpo.recipes
from dgrpo.cli import main


def _cli(argv, capsys):
    """(exit code, stderr, seconds) of ``dgrpo ARGV`` run in this process."""
    start = time.perf_counter()
    rc = main(argv)
    return rc, capsys.readouterr().err, time.perf_counter() - start


def _one_error_line(err: str) -> str:
    assert err.startswith("dgrpo: error: ") and err.endswith("\n") and err.count("\n") == 1, err
    assert "Traceback" not in err and all(c.isprintable() for c in err[:-1]), err
    return err


@pytest.fixture()
def refuse_runs(monkeypatch):
    """A config that reaches the recipe was accepted: that is a failure here."""
    def accepted(cfg, run_dir=None):
        raise AssertionError(f"accepted a malformed config: {cfg!r}"[:300])

    monkeypatch.setattr(dgrpo.recipes, "run", accepted)


BOUNDS = [  # (override, field named in the error)
    ("seed=-1", "seed"), ("seed=4294967296", "seed"), (f"seed={10**30}", "seed"),
    ("threads=0", "threads"), ("threads=2000", "threads"), (f"threads={10**20}", "threads"),
    ("rounds=0", "rounds"), ("rounds=1000001", "rounds"), (f"rounds={10**20}", "rounds"), ("rounds=true", "rounds"),
    ("sampling.max_new_tokens=1000000", "sampling.max_new_tokens"), (f"sampling.max_new_tokens={2**64}", "sampling.max_new_tokens"),
    ("sampling.top_k=0", "sampling.top_k"), (f"sampling.top_k={10**9}", "sampling.top_k"),
    (f"swarm.group_size={10**20}", "swarm.group_size"), ("swarm.group_size=100000", "swarm.group_size"),
    (f"swarm.nodes={2**40}", "swarm.nodes"), ("swarm.prompts_per_round=1000000", "swarm.prompts_per_round"),
    ("swarm.timeout_s=1e300", "swarm.timeout_s"), ("swarm.startup_timeout_s=-5", "swarm.startup_timeout_s"),
    ("grpo.num_iterations=100000", "grpo.num_iterations"), ("eval.n_prompts=10000000", "eval.n_prompts"),
    ("eval.every=false", "every"), ("checkpoint_every=1000000", "checkpoint_every"),
    (f"task.n_train={10**12}", "task.n_train"), (f"task.n_val={10**12}", "task.n_val"), ("task.seed=-1", "task.seed"),
]


@pytest.mark.parametrize("override, field", BOUNDS)
def test_a_field_out_of_its_bounds_is_one_line_naming_it(tmp_path, capsys, refuse_runs, override, field):
    rc, err, seconds = _cli(["run", f"out_dir={tmp_path / 'runs'}", override], capsys)
    assert rc == 2 and field in _one_error_line(err)
    assert seconds < 10  # (no hang: these take milliseconds; n_train=10**12 used to generate forever)
    assert not (tmp_path / "runs").exists()


def test_b_times_g_is_bounded():
    from dgrpo.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="at most 2\\^20 completions"):
        load_config(None, ["swarm.prompts_per_round=4096", "swarm.group_size=512"])
    assert load_config(None, ["swarm.prompts_per_round=1024", "swarm.group_size=1024"]).swarm.group_size == 1024


@pytest.mark.parametrize("field", ["name", "out_dir", "model.name", "task.path"])
@pytest.mark.parametrize("char", ["\x00", "\n", "\r", "\x1b", "\x7f"])
def test_names_and_paths_refuse_control_characters(tmp_path, capsys, refuse_runs, field, char):
    extra = ["task.kind=gsm8k"] if field == "task.path" else []
    value = json.dumps(f"run{char}x")  # a YAML double-quoted scalar: the character itself reaches the field
    rc, err, _ = _cli(["run", f"out_dir={tmp_path / 'runs'}", *extra, f"{field}={value}"], capsys)
    assert rc == 2 and field in _one_error_line(err) and "control characters" in err
    assert not (tmp_path / "runs").exists()


def test_a_name_of_printable_characters_is_kept():
    from dgrpo.config import load_config

    assert load_config(None, ['name="run a-1 é"']).name == "run a-1 é"


def test_an_override_nested_5000_deep_is_refused(capsys, refuse_runs):
    rc, err, _ = _cli(["run", "a." * 5000 + "b=1"], capsys)
    assert rc == 2 and "at most 32 deep" in _one_error_line(err)
    rc, err, _ = _cli(["run", "swarm.malicious=" + "[" * 5000 + "]" * 5000], capsys)
    assert rc == 2 and "nested more than 32 levels" in _one_error_line(err)
    rc, err, _ = _cli(["run", "swarm.malicious=" + "[" * 40 + "]" * 40], capsys)  # deeper than 32, parsed fine
    assert rc == 2 and "swarm.malicious" in _one_error_line(err) and "nested more than 32" in err


@pytest.mark.parametrize("command", ["run", "federated", "ensemble", "harden"])
def test_a_yaml_file_nested_20000_deep_is_refused(tmp_path, capsys, refuse_runs, command):
    path = tmp_path / "deep.yaml"
    path.write_text("seed: " + "[" * 20000 + "]" * 20000 + "\n")
    rc, err, _ = _cli([command, "--config", str(path)], capsys)
    assert rc == 2 and "nested more than 32 levels" in _one_error_line(err) and str(path) in err


@pytest.mark.parametrize("command", ["run", "federated", "ensemble", "harden"])
def test_a_config_file_has_a_size_limit(tmp_path, capsys, refuse_runs, command):
    rc, err, seconds = _cli([command, "--config", "/dev/zero"], capsys)  # endless: read without a limit, it never returns
    assert rc == 2 and "/dev/zero is a device, not a regular file" in _one_error_line(err) and seconds < 10
    big = tmp_path / "big.yaml"
    big.write_text("name: x\n" + "# padding\n" * 110_000)  # 1.1 MB of comments
    rc, err, _ = _cli([command, "--config", str(big)], capsys)
    assert rc == 2 and "larger than 1 MiB" in _one_error_line(err)


def test_an_empty_model_folder_is_named_before_any_run_directory(tmp_path, capsys, refuse_runs):
    (tmp_path / "empty").mkdir()
    rc, err, _ = _cli(["run", f"model.name={tmp_path / 'empty'}", f"out_dir={tmp_path / 'runs'}"], capsys)
    assert rc == 2 and "model.name" in _one_error_line(err) and "holds no config.json" in err
    rc, err, _ = _cli(["run", f"swarm.models=[{{name: {tmp_path / 'empty'}}}, {{name: {tmp_path / 'empty'}}}]",
                       "swarm.nodes=2"], capsys)
    assert rc == 2 and "swarm.models.0.name" in _one_error_line(err)
    assert not (tmp_path / "runs").exists()


def test_a_run_that_fails_while_building_leaves_no_run_directory(tmp_path, capsys, tiny_model_dir):
    # valid fields, but the generator cannot find that many distinct problems (an error of the task's
    # builder, after the run directory was made): it is removed again
    rc, err, seconds = _cli(["run", f"model.name={tiny_model_dir}", f"out_dir={tmp_path / 'runs'}", "task.n_train=100000",
                             "task.n_val=100000", "task.difficulty=1", "task.two_two_rate=1"], capsys)
    assert rc == 2 and "distinct problems" in _one_error_line(err) and "task.n_train" in err
    assert not any((tmp_path / "runs").glob("*"))


# ---- 1,000 generated malformed inputs through the command line -------------------------------

INT_FIELDS = ["seed", "rounds", "threads", "checkpoint_every", "sampling.top_k", "sampling.max_new_tokens",
              "grpo.num_iterations", "swarm.nodes", "swarm.group_size", "swarm.prompts_per_round", "eval.every",
              "eval.n_prompts", "task.n_train", "task.n_val", "task.difficulty", "task.few_shot"]
FLOAT_FIELDS = ["grpo.lr", "grpo.max_grad_norm", "grpo.epsilon", "swarm.timeout_s", "swarm.startup_timeout_s",
                "sampling.temperature"]
TEXT_FIELDS = ["name", "out_dir", "model.name"]
CONTROL = [chr(c) for c in (*range(32), 127)]
SAFE_OVERRIDES = ["rounds=3", "sampling.max_new_tokens=16", "eval.every=2", "task.n_train=50", "seed=7"]

NULLABLE = {"threads"}  # threads: null is its default (one per core), a valid value
bad_int_value = st.one_of(st.integers(max_value=-1), st.integers(min_value=2**63, max_value=2**200),
                          st.integers(min_value=2**33, max_value=2**62), st.booleans(), st.just("abc"), st.just("[1, 2]"),
                          st.just("{a: 1}"), st.just("2.5"))
bad_int = st.one_of(bad_int_value, st.just("null"))
bad_float = st.one_of(st.just(".nan"), st.just(".inf"), st.just("-.inf"), st.just("1e999"), st.booleans(),
                      st.floats(max_value=-1e-9, allow_nan=False), st.just("'fast'"), st.just("[]"))
controlled_text = st.builds(lambda a, c, b: json.dumps(a + c + b), st.text(string.ascii_letters, max_size=8),
                            st.sampled_from(CONTROL), st.text(string.ascii_letters, max_size=8))


def _yaml(value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


malformed = st.one_of(
    st.builds(lambda k, v: f"{k}={_yaml(v)}", st.sampled_from([f for f in INT_FIELDS if f not in NULLABLE]), bad_int),
    st.builds(lambda k, v: f"{k}={_yaml(v)}", st.sampled_from(sorted(NULLABLE)), bad_int_value),
    st.builds(lambda k, v: f"{k}={_yaml(v)}", st.sampled_from(FLOAT_FIELDS), bad_float),
    st.builds(lambda k, v: f"{k}={v}", st.sampled_from(TEXT_FIELDS), controlled_text),
    st.builds(lambda k: f"{k}=1", st.from_regex(r"\A(zz|swarm\.zz|task\.zz|sampling\.zz)[a-z]{0,6}\Z")),  # unknown keys
    st.builds(lambda n: "a." * n + "b=1", st.integers(33, 6000)),  # keys too deep
    st.builds(lambda n: "seed=" + "[" * n + "]" * n, st.integers(33, 3000)),  # values too deep
    st.builds(lambda s: s, st.text(string.ascii_letters + ".", min_size=1, max_size=12)),  # no '='
    st.sampled_from(["swarm.mode=diagonal", "grpo.loss_type=ppo", "attack.kind=nope", "swarm.transport=pigeon",
                     "defenses=[{kind: nope}]", "task.kind=chess", "swarm.malicious=[0, 1, 2, 3]",
                     "swarm.group_size=7", "model.dtype=int8", "model.device=tpu"]),
)
config_text = st.one_of(st.binary(max_size=200).map(lambda b: b.decode("latin-1")),
                        st.builds(lambda n: "a:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, n)), st.integers(33, 200)),
                        st.builds(lambda k, v: f"{k.replace('.', ': {')}: {_yaml(v)}" + "}" * k.count("."),
                                  st.sampled_from([f for f in INT_FIELDS if f not in NULLABLE]), bad_int),
                        st.builds(lambda k, v: f"{k}: {_yaml(v)}", st.sampled_from(sorted(NULLABLE)), bad_int_value))


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(command=st.sampled_from(["run", "run", "run", "federated", "ensemble"]),
       safe=st.lists(st.sampled_from(SAFE_OVERRIDES), max_size=3), bad=malformed, file_text=st.none() | config_text)
def test_generated_malformed_inputs_end_in_one_line(tmp_path, capsys, refuse_runs, command, safe, bad, file_text):
    argv = [command]
    if file_text is not None:
        path = tmp_path / "config.yaml"
        path.write_text(file_text, encoding="latin-1")
        argv += ["--config", str(path)]
    start = time.perf_counter()
    rc = main(argv + [f"out_dir={tmp_path / 'runs'}", *safe, bad])  # the malformed override last: nothing masks it
    err = capsys.readouterr().err
    assert rc == 2, (argv, bad, err)
    _one_error_line(err)
    assert time.perf_counter() - start < 10, (argv, bad)  # (no hang; measured: well under 1 s each)
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("value", ["a\nb", "a\rb", "a\x85b", "a\u2028b", "a\n"])
def test_an_override_with_a_control_character_is_refused_not_folded(value):
    # YAML would read "a\nb" as "a b": the run would start under another name
    from dgrpo.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="control character"):
        load_config(overrides=[f"name={value}"])


def test_run_takes_set_like_paper_and_a_validator_error_is_one_clean_line(capsys):
    # found by a review: `dgrpo run --set KEY=VALUE` (dgrpo paper's form) was "unrecognized arguments"
    assert main(["run", "--set", "attack.kind=seed_grinding", "--set", "swarm.malicious=[3]", "--set", "attack.prompt_tries=4"]) == 2
    err = capsys.readouterr().err
    assert err == ("dgrpo: error: invalid config: attack.prompt_tries > 1 needs swarm.mode=vertical (horizontal prompts "
                   "are the swarm's, shared by every node); set attack.prompt_tries=1 or swarm.mode=vertical\n")


@pytest.mark.parametrize("override, shown", [
    ("seed=", "seed: Input should be a valid integer (got null: no value)"),
    ("eval.every=0", "eval.every: Input should be greater than or equal to 1 (got 0)"),
    ("seed=\uff13", "(got '\uff13', '\uff13' is U+FF13, not an ASCII digit or space)"),
    ("grpo.lr=abc", "grpo.lr: Input should be a valid number, unable to parse string as a number (got 'abc')"),
])
def test_a_wrong_value_is_shown_as_read(override, shown, capsys, refuse_runs, tmp_path):
    """A value that fails a type or bound check is quoted as the config read it, so an empty value, a
    fullwidth digit or a bound is visible in the one line (a validator's own message already quotes it)."""
    rc, err, _ = _cli(["run", override, f"out_dir={tmp_path}"], capsys)
    assert rc == 2 and shown in _one_error_line(err)
