"""build_defense checks what a defense's builder made (issue 32, review #5): a defense defined here,
outside src/dgrpo, with a stage ``defend`` never runs or of a class that is no ``Defense`` is refused
in one line; ``counters`` is declared on the base with an empty default."""

from __future__ import annotations

from typing import Literal

import pytest

from dgrpo import registry
from dgrpo.config import load_config
from dgrpo.defenses import build_defense, defense_counters
from dgrpo.defenses.base import Defense, DefenseConfig
from dgrpo.errors import ConfigError
from dgrpo.types import ACCEPT


class TypoConfig(DefenseConfig):
    kind: Literal["typo_stage"] = "typo_stage"


class TypoStage(Defense):
    name = "typo_stage"
    stage = "logit"  # a typo of "logits": defend would run it at no stage

    def __init__(self, cfg, run_cfg, policy, task):
        pass

    def inspect(self, rollouts, logits=None):
        return [ACCEPT for _ in rollouts]


class GoodConfig(DefenseConfig):
    kind: Literal["good_stage"] = "good_stage"


class GoodStage(TypoStage):
    name = "good_stage"
    stage = "rollouts"


class NotADefenseConfig(DefenseConfig):
    kind: Literal["not_a_defense"] = "not_a_defense"


class NotADefense:  # has name, stage and inspect but does not subclass Defense
    name, stage = "not_a_defense", "rollouts"

    def __init__(self, cfg, run_cfg, policy, task):
        pass


@pytest.fixture
def kinds():
    made = {"typo_stage": (TypoConfig, TypoStage), "good_stage": (GoodConfig, GoodStage),
            "not_a_defense": (NotADefenseConfig, NotADefense)}
    for kind, (config, cls) in made.items():
        registry.register("defense", kind, config=config)(cls)
    yield
    for kind in made:
        registry._ENTRIES["defense"].pop(kind, None)


def test_a_stage_defend_never_runs_is_refused_naming_kind_stage_and_the_allowed_ones(kinds):
    cfg = load_config(None, [])
    with pytest.raises(ConfigError) as err:
        build_defense(TypoConfig(), cfg, None, None)
    line = str(err.value)
    assert "\n" not in line and "typo_stage" in line and "'logit'" in line
    assert "'rollouts'" in line and "'logits'" in line


def test_a_class_that_is_no_defense_is_refused(kinds):
    with pytest.raises(ConfigError, match=r"not_a_defense: NotADefense does not subclass dgrpo\.defenses\.base\.Defense"):
        build_defense(NotADefenseConfig(), load_config(None, []), None, None)


def test_a_good_defense_is_built_and_counters_default_to_empty(kinds):
    d = build_defense(GoodConfig(), load_config(None, []), None, None)
    assert isinstance(d, GoodStage) and dict(d.counters) == {}
    assert defense_counters([d]) == {}
