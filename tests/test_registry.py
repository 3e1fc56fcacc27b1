"""One registry for every kind: register, look up by name, reach a new kind from a config."""

import dataclasses
from typing import Literal

import pytest

from dgrpo import config_yaml, registry
from dgrpo.attacks import ATTACKS, build_attack
from dgrpo.attacks.base import Attack, PoisoningConfig
from dgrpo.config import load_config
from dgrpo.errors import ConfigError, UnknownKind
from dgrpo.registry import Table, lookup, names, register


@pytest.fixture()
def scratch_attack():
    """A new attack registered here, as a new module would register it; removed afterwards."""

    class LoudAttackConfig(PoisoningConfig):
        kind: Literal["loud_test"] = "loud_test"
        volume: int = 3

        def check(self, run) -> None:
            super().check(run)
            if self.volume > run.swarm.group_size:
                raise ValueError("attack.volume must not exceed swarm.group_size")

    @register("attack", "loud_test", config=LoudAttackConfig)
    class LoudAttack(Attack):
        def __init__(self, cfg, run_cfg):
            self.volume = cfg.volume

    yield LoudAttack
    del registry._ENTRIES["attack"]["loud_test"]


def test_a_registered_kind_is_reachable_from_a_config_and_checks_its_own_rules(scratch_attack):
    cfg = load_config(overrides=["attack.kind=loud_test", "attack.volume=5", "swarm.malicious=[3]"])
    assert type(cfg.attack).__name__ == "LoudAttackConfig" and cfg.attack.volume == 5
    assert isinstance(build_attack(cfg.attack, cfg), scratch_attack) and "loud_test" in ATTACKS
    assert cfg.model_dump(mode="json")["attack"] == {"poisoned_per_group": None, "duplicate": False, "kind": "loud_test",
                                                      "volume": 5}
    with pytest.raises(ConfigError, match="attack.volume must not exceed swarm.group_size"):
        load_config(overrides=["attack.kind=loud_test", "attack.volume=9", "swarm.malicious=[3]"])
    with pytest.raises(ConfigError, match="attack 'loud_test' needs at least one node in swarm.malicious"):
        load_config(overrides=["attack.kind=loud_test"])  # the rule every attack inherits


def test_an_attack_declares_its_capabilities_by_subclassing_attack(scratch_attack):
    """The swarm reads what an attack declares (routes, wants_seen, ...), never probes it: a class that
    does not subclass Attack is refused when built, with the fix; a subclass gets the defaults."""
    cfg = load_config(overrides=["attack.kind=loud_test", "swarm.malicious=[3]"])
    attack = build_attack(cfg.attack, cfg)
    assert (attack.routes, attack.wants_alternative, attack.wants_seen, dict(attack.stats)) == (False, False, False, {})
    entries = registry._ENTRIES["attack"]
    entries["loud_test"] = dataclasses.replace(entries["loud_test"], builder=lambda cfg, run_cfg: object())
    with pytest.raises(ConfigError, match=r"attack.kind=loud_test: object does not subclass dgrpo.attacks.base.Attack; "
                                          r"declare it as `class object\(Attack\)`"):
        build_attack(cfg.attack, cfg)


def test_lookup_imports_the_module_of_the_name_and_lists_the_known_ones():
    assert lookup("defense", "topk").builder.__module__ == "dgrpo.defenses.topk"
    assert lookup("aggregator", "krum").meta["needs"] == "n > 2f + 2"
    assert names("transport") == ["distributed", "hivemind", "inprocess"]
    with pytest.raises(UnknownKind, match=r"unknown defense 'moat'; known: ") as err:
        lookup("defense", "moat")
    listed = str(err.value).split("known: ")[1].split(", ")
    # every shipped defense, in order (a test may have registered its own beside them: user kinds)
    shipped = ["judge", "replay", "reward_outlier", "step_checker", "tolerant_replay", "topk", "toploc"]
    assert [n for n in listed if n in shipped] == shipped and listed == sorted(listed)
    table = Table("task")
    shipped_tasks = ["arithmetic", "dataset", "gsm8k", "python_math"]  # (and any a test registered: user kinds)
    assert [n for n in sorted(table) if n in shipped_tasks] == shipped_tasks and len(table) == len(list(table))
    with pytest.raises(KeyError):
        table["chess"]


def test_a_config_names_a_kind_once_and_defaults_the_rest():
    cfg = load_config(overrides=["task.n_train=5", "defenses=[{kind: replay, method: regenerate}]"])
    assert cfg.task.kind == "arithmetic" and cfg.task.n_train == 5  # the default kind keeps its other fields
    assert cfg.attack.kind == "none" and cfg.defenses[0].method == "regenerate"
    with pytest.raises(ConfigError, match="defenses.0: a defense needs a `kind`"):
        load_config(overrides=["defenses=[{method: fast}]"])
    with pytest.raises(ConfigError, match="unknown attack 'phishing'"):
        load_config(overrides=["attack.kind=phishing"])


def test_every_shipped_kinds_saved_config_loads_again(tmp_path):
    """A run's config.yaml holds every field of every kind, at its default where not set (training/build.py);
    `dgrpo resume` loads it again: each shipped defense and attack, written and read back, is the same config."""
    extra = {"code_injection": ["task.kind=python_math"], "equation": ["swarm.mode=vertical"],
             "equation_sampled": ["swarm.mode=vertical"]}
    cases = [[f"defenses=[{{kind: {k}}}]"] for k in names("defense")]
    cases += [[f"attack.kind={k}", "swarm.malicious=[3]", *extra.get(k, [])] for k in names("attack") if k != "none"]
    for overrides in cases:
        cfg = load_config(overrides=overrides)
        saved = tmp_path / "config.yaml"
        saved.write_text(config_yaml.dump(cfg.model_dump(mode="json")))
        assert load_config(saved) == cfg, overrides
    assert len(cases) >= 7 + 15  # every shipped defense and attack but none (a test may have registered more)


def test_every_config_refuses_infinite_and_missing_numbers():
    for override in ("defenses=[{kind: topk, atol: .inf}]", "attack.kind=dos", "hardening.noiser_sigma=.nan"):
        extra = ["swarm.malicious=[3]", "attack.target_fraction=.nan"] if override == "attack.kind=dos" else []
        with pytest.raises(ConfigError, match="finite"):
            load_config(overrides=[override, *extra])


def test_registration_mistakes_are_refused():
    with pytest.raises(ValueError, match="unknown kind 'widget'"):
        register("widget", "x")
    with pytest.raises(ValueError, match="must default to 'other'"):
        register("attack", "other", config=PoisoningConfig.__subclasses__()[0])(lambda cfg, run_cfg: None)
    with pytest.raises(ValueError, match="attack 'injection' registered twice"):
        register("attack", "injection")(lambda cfg, run_cfg: None)


def test_a_kind_in_the_users_own_module_is_reached_by_import_path(tmp_path, monkeypatch):
    (tmp_path / "userkinds_reg.py").write_text(
        "from typing import Literal\n"
        "from dgrpo.attacks.base import PoisoningConfig\n"
        "from dgrpo.registry import register\n"
        "class WhisperConfig(PoisoningConfig):\n"
        "    kind: Literal['whisper'] = 'whisper'\n"
        "@register('attack', 'whisper', config=WhisperConfig)\n"
        "class Whisper:\n"
        "    def __init__(self, cfg, run_cfg):\n"
        "        self.cfg = cfg\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        by_name, by_object = lookup("attack", "userkinds_reg:whisper"), lookup("attack", "userkinds_reg:Whisper")
        assert by_name is by_object and by_name.builder.__module__ == "userkinds_reg" and by_name.name == "whisper"
        assert "userkinds_reg:whisper" not in names("attack")  # a path is an alias, not a second kind
        cfg = load_config(overrides=["attack.kind=userkinds_reg:WhisperConfig", "swarm.malicious=[3]"])
        assert cfg.attack.kind == "userkinds_reg:WhisperConfig" and type(cfg.attack).__name__ == "WhisperConfig"
        with pytest.raises(UnknownKind, match="userkinds_reg registers no defense 'whisper'"):
            lookup("defense", "userkinds_reg:whisper")
        with pytest.raises(UnknownKind, match="an import path is module:Name"):
            lookup("attack", ":whisper")
    finally:
        registry._ENTRIES["attack"].pop("whisper", None)
        for path in [p for p in registry._PATHS["attack"] if p.startswith("userkinds_reg:")]:
            del registry._PATHS["attack"][path]


@pytest.mark.parametrize("transport, extra", [("distributed", []), ("hivemind", ["swarm.hivemind.node=3"])])
def test_a_plugin_routing_attack_built_by_a_function_is_refused_off_the_in_process_swarm(transport, extra):
    """Review r31h: the config check reads ``routes`` on the registered builder, which a builder function does not
    carry, so a plugin routing attack registered by one (as ``code_injection`` is) passed over torch.distributed or
    hivemind, where a malicious process sends what it wrote unchanged: a silent plain injection. The built attack's
    ``routes`` is what the swarm reads (``Swarm.route``); build_attack refuses it there in one line."""

    class RouteTestConfig(PoisoningConfig):
        kind: Literal["route_test"] = "route_test"

    class RouteTestAttack(Attack):
        routes = True

    register("attack", "route_test", config=RouteTestConfig)(lambda cfg, run_cfg: RouteTestAttack())
    try:
        here = load_config(overrides=["attack.kind=route_test", "swarm.malicious=[3]"])
        assert build_attack(here.attack, here).routes  # (in process: routed by Swarm.route)
        cfg = load_config(overrides=["attack.kind=route_test", "swarm.malicious=[3]", f"swarm.transport={transport}",
                                     *extra])  # (the builder is a function: the config check cannot read routes)
        with pytest.raises(ConfigError) as err:
            build_attack(cfg.attack, cfg)
        line = str(err.value)
        assert "\n" not in line and "attack.kind=route_test is routed by the in-process swarm only" in line
        assert f"over swarm.transport={transport}" in line and "set swarm.transport=inprocess" in line
    finally:
        del registry._ENTRIES["attack"]["route_test"]
