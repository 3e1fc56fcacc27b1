import pytest

from dgrpo.config import ConfigError, load_config


def test_defaults_are_the_embedded_run():
    cfg = load_config()
    assert cfg.model.name == "smollm2-135m-instruct"
    assert cfg.task.kind == "arithmetic"
    assert (cfg.swarm.nodes, cfg.swarm.mode, cfg.swarm.malicious) == (4, "horizontal", [])
    assert cfg.sampling.top_k == 10


def test_yaml_plus_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("rounds: 3\nswarm:\n  nodes: 2\n  group_size: 4\n")
    cfg = load_config(path, ["grpo.lr=1e-5", "swarm.mode=vertical"])
    assert (cfg.rounds, cfg.swarm.nodes, cfg.grpo.lr, cfg.swarm.mode) == (3, 2, 1e-5, "vertical")


def test_group_size_must_divide_by_nodes():
    with pytest.raises(ConfigError, match="divisible by m"):
        load_config(overrides=["swarm.nodes=3", "swarm.group_size=8"])


def test_vertical_batch_must_divide_by_nodes():
    with pytest.raises(ConfigError, match="prompts_per_round"):
        load_config(overrides=["swarm.mode=vertical", "swarm.nodes=3", "swarm.group_size=6", "swarm.prompts_per_round=4"])


def test_typos_and_bad_values_are_named():
    with pytest.raises(ConfigError) as err:
        load_config(overrides=["grpo.lrr=1", "grpo.loss_type=ppo"])
    assert "grpo.lrr" in str(err.value) and "grpo.loss_type" in str(err.value)


def test_malicious_ids_checked():
    with pytest.raises(ConfigError, match="not in 0..3"):
        load_config(overrides=["swarm.malicious=[7]"])


def test_gsm8k_needs_a_source():
    with pytest.raises(ConfigError, match="path"):
        load_config(overrides=["task.kind=gsm8k"])


def test_unreadable_file(tmp_path):
    with pytest.raises(ConfigError):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("- a list\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(bad)


def test_every_config_class_is_strict():
    """One strict base: unknown keys, inf and NaN are refused in every section and every kind's config."""
    from pydantic import BaseModel

    from dgrpo.registry import StrictConfig, names

    for kind in ("task", "attack", "defense"):
        names(kind)  # import every kind module
    import dgrpo.config  # noqa: F401

    def subclasses(cls):
        for sub in cls.__subclasses__():
            yield sub
            yield from subclasses(sub)

    # A peer's round record is a wire format, not a config: it ignores keys the main does not merge on purpose,
    # and its refusals (null, NaN, wrong types) are tested in tests/transports/test_round_records.py.
    wire = {"dgrpo.training.peer_records"}
    ours = [c for c in subclasses(BaseModel) if c.__module__.startswith("dgrpo.") and c.__module__ not in wire]
    assert len(ours) > 20 and all(issubclass(c, StrictConfig) for c in ours)
    assert all(c.model_config.get("allow_inf_nan") is False and c.model_config.get("extra") == "forbid" for c in ours)


def test_lora_and_warmup_belong_to_swarm_runs():
    cfg = load_config(overrides=["grpo.lora_rank=8", "grpo.warmup_rounds=3"])
    assert (cfg.grpo.lora_rank, cfg.grpo.lora_alpha, cfg.grpo.warmup_rounds) == (8, 32.0, 3)
    with pytest.raises(ConfigError, match="federated.lora=true"):
        load_config(overrides=["grpo.lora_rank=8", "federated.aggregator=average"])
    with pytest.raises(ConfigError, match="grpo.lora_rank"):
        load_config(overrides=["grpo.lora_rank=-1"])
