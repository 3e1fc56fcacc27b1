"""The CLI documents every config field from the pydantic models; overrides address list items."""

import typing

import pytest

from dgrpo.cli import main
from dgrpo.config import RunConfig, apply_overrides, load_config
from dgrpo.config_doc import lookup_rows, rows
from dgrpo.errors import ConfigError
from dgrpo.registry import lookup, names


def _keys(model, prefix=""):
    """The leaf keys of a plain section model (no kind sections), walked independently of config_doc."""
    from pydantic import BaseModel

    out = []
    for name, f in model.model_fields.items():
        ann = f.annotation
        args = [a for a in typing.get_args(ann) if a is not type(None)]
        ann = args[0] if typing.get_origin(ann) in (typing.Union, __import__("types").UnionType) and len(args) == 1 else ann
        if isinstance(ann, type) and issubclass(ann, BaseModel) and name not in ("task", "attack"):
            out += _keys(ann, f"{prefix}{name}.")
        else:
            out.append(prefix + name)
    return out


def test_every_field_of_every_section_and_kind_is_documented():
    documented = {(r.key, r.when): r for r in rows()}
    keys = {k for k, _ in documented}
    for key in _keys(RunConfig):
        assert key in keys, key
    for kind, prefix in (("task", "task."), ("attack", "attack."), ("defense", "defenses.N.")):
        for name in names(kind):
            cfg = lookup(kind, name).config
            for field in cfg.model_fields:
                row = documented[(prefix + field, f"{prefix}kind={name}")]
                assert field == "kind" or row.description, f"{prefix}{field} of {name} has no description"
    assert len(documented) > 100


def test_rows_give_type_default_bounds():
    (nodes,) = lookup_rows("swarm.nodes")
    assert (nodes.type, nodes.default, nodes.bounds) == ("int", "4", "≥ 1, ≤ 1024")
    (difficulty,) = [r for r in lookup_rows("task.difficulty") if r.when == "task.kind=arithmetic"]
    assert difficulty.bounds == "≥ 1, ≤ 4"
    (dtype,) = lookup_rows("model.dtype")
    assert dtype.type == "float32|bfloat16|float16" and dtype.default == "'float32'"
    atol = lookup_rows("defenses.0.atol")  # an index is the N of the help
    assert sorted(r.when for r in atol) == ["defenses.N.kind=replay", "defenses.N.kind=step_checker", "defenses.N.kind=topk"]
    with pytest.raises(ConfigError, match="did you mean swarm.nodes"):
        lookup_rows("swarm.node")


def test_run_help_and_config_help_print_the_fields(capsys):
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    out = capsys.readouterr().out
    assert "swarm.nodes  int = 4  [≥ 1, ≤ 1024]" in out and "m: number of nodes" in out
    assert all(r.key in out for r in rows())
    assert main(["config", "--help", "grpo.beta"]) == 0
    out = capsys.readouterr().out
    assert "grpo.beta  float = 0.0  [≥ 0]" in out and "swarm.nodes" not in out


def test_overrides_index_and_append_list_items():
    cfg = load_config(None, ["defenses=[{kind: topk}]", "defenses.0.atol=0.0001", "defenses.1.kind=replay",
                             "defenses.1.method=regenerate"])
    assert [d.kind for d in cfg.defenses] == ["topk", "replay"]
    assert cfg.defenses[0].atol == 1e-4 and cfg.defenses[1].method == "regenerate"
    assert apply_overrides({}, ["a.0.b=1", "a.0.c=2", "a.1=x"]) == {"a": [{"b": 1, "c": 2}, "x"]}
    with pytest.raises(ConfigError, match="defenses.2 indexes a list of 1 items"):
        load_config(None, ["defenses=[{kind: topk}]", "defenses.2.kind=replay"])


def test_pydantic_settings_cli_cannot_address_kind_fields_or_list_items():
    """Why dgrpo keeps its override parser (docs/config.md): pydantic-settings builds its CLI from the
    static schema, where a kind section is opaque and list items have no index, and it hands every
    value over as text, which dgrpo's configs refuse for numbers (``seed: "017"`` is never 17)."""
    ps = pytest.importorskip("pydantic_settings")

    class Settings(RunConfig, ps.BaseSettings):
        model_config = ps.SettingsConfigDict(extra="forbid")

    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="swarm.nodes\n.*must be a number, not the text '2'"):
        ps.CliApp.run(Settings, cli_args=["--swarm.nodes", "2"])  # it hands over text, which a config never converts
    for args in (["--task.n_train", "5"], ["--defenses.0.atol", "1e-4"]):
        with pytest.raises(SystemExit):
            ps.CliApp.run(Settings, cli_args=args)
    assert load_config(None, ["task.n_train=5"]).task.n_train == 5
