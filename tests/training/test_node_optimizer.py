"""Per-node optimiser settings of a heterogeneous swarm (issue 37): each ``swarm.models`` item may set
its node's own ``lr`` and ``lora_rank``; unset, the node trains with ``grpo``'s. Read back from each
node's AdamW (``param_groups``) in 2-node tiny swarms built in process, on one rank of a distributed
swarm, after a CLI run and after its resume."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import dgrpo.recipes
from dgrpo.cli import main
from dgrpo.config import load_config, read_config_file
from dgrpo.metrics.logger import read_metrics
from dgrpo.training import build
from dgrpo.training.build import build_swarm, build_task
from dgrpo.training.run_identity import identity
from tests.conftest import build_model

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["threads=1", "swarm.nodes=2", "swarm.group_size=4", "swarm.prompts_per_round=2", "sampling.max_new_tokens=16",
         "eval.n_prompts=2", "task.n_train=20", "task.n_val=5", "task.few_shot=0", "grpo.lr=0.01"]


def models(a: str, b: str, first: str = "", second: str = "") -> str:
    """The ``swarm.models`` override of two nodes, each entry's extra fields (``lr: 0.003``) appended."""
    return f"swarm.models=[{{name: {a}{', ' + first if first else ''}}}, {{name: {b}{', ' + second if second else ''}}}]"


def lrs(swarm) -> dict[int, list[float]]:
    """Node id → the learning rate of each param group of its learner's AdamW."""
    return {n: [g["lr"] for g in swarm.learners[p].optimizer.param_groups] for n, p in swarm.policies.items()}


def test_the_config_reads_each_node_override_and_writes_only_those_set():
    cfg = load_config(None, ["swarm.nodes=2", models("smollm2-135m-instruct", "smollm2-135m-instruct", "lr: 1.0e-5, lora_rank: 8")])
    first, second = cfg.swarm.models
    assert (first.lr, first.lora_rank, second.lr, second.lora_rank) == (1e-5, 8, None, None)
    dumped = cfg.model_dump(mode="json")["swarm"]["models"]
    assert dumped == [{"name": "smollm2-135m-instruct", "dtype": "float32", "device": "auto", "lr": 1e-5, "lora_rank": 8},
                      {"name": "smollm2-135m-instruct", "dtype": "float32", "device": "auto"}]


def test_a_run_written_before_the_overrides_keeps_its_config_and_checkpoint_identity():
    """The committed 12-round run's config.yaml (written before the fields existed) loads and dumps to the
    same dict, so its checkpoints' config hash is the one they were saved with."""
    path = ROOT / "results" / "heterogeneous_qwen_smollm2" / "twelve_rounds" / "config.yaml"
    saved = read_config_file(path)
    assert load_config(path).model_dump(mode="json") == saved
    assert identity(load_config(path).model_dump(mode="json"), 3)["config_sha256"] == identity(saved, 3)["config_sha256"]


def test_the_lr_config_is_the_twelve_round_config_with_qwen_at_1e5():
    """configs/heterogeneous_qwen_smollm2_lr.yaml differs from the committed run's config in Qwen's lr and
    eval.every only (the committed run was launched with eval.every=6: its command.txt)."""
    def flat(d, p=""):
        if isinstance(d, dict):
            return {k: v for key, value in d.items() for k, v in flat(value, f"{p}{key}.").items()}
        if isinstance(d, list) and d and all(isinstance(x, dict) for x in d):
            return {k: v for i, x in enumerate(d) for k, v in flat(x, f"{p}{i}.").items()}
        return {p[:-1]: d}

    base, lr = (flat(load_config(ROOT / "configs" / f).model_dump(mode="json"))
                for f in ("heterogeneous_qwen_smollm2.yaml", "heterogeneous_qwen_smollm2_lr.yaml"))
    assert {k: (base.get(k), lr.get(k)) for k in base.keys() | lr.keys() if base.get(k) != lr.get(k)} == {
        "swarm.models.1.lr": (None, 1e-5), "eval.every": (3, 6)}
    assert (lr["grpo.lr"], lr["swarm.models.1.name"]) == (1e-4, "qwen2.5-coder-0.5b-instruct")
    assert "eval.every=6" in (ROOT / "results" / "heterogeneous_qwen_smollm2" / "twelve_rounds" / "command.txt").read_text()


@pytest.mark.parametrize("override, line", [
    ("model.lr=1e-5", "model.lr: the top-level model has no lr (every node of a homogeneous swarm trains one policy "
                      "with grpo.lr); set grpo.lr, or give each node its own model and swarm.models.N.lr"),
    ("model.lora_rank=4", "model.lora_rank: the top-level model has no lora_rank"),
    (models("smollm2-135m-instruct", "smollm2-135m-instruct", "lr: -1.0e-5"), "swarm.models.0.lr: Input should be greater than 0 (got -1.0e-5)"),
    (models("smollm2-135m-instruct", "smollm2-135m-instruct", "", "lr: 0"), "swarm.models.1.lr: Input should be greater than 0 (got 0)"),
    (models("smollm2-135m-instruct", "smollm2-135m-instruct", "", "lora_rank: -2"), "swarm.models.1.lora_rank: Input should be greater than or equal to 0"),
    (models("smollm2-135m-instruct", "smollm2-135m-instruct", "lrr: 1.0e-5"), "swarm.models.0.lrr: Extra inputs are not permitted; did you mean swarm.models.0.lr"),
])
def test_bad_node_overrides_are_one_line_naming_the_field(override, line, capsys, monkeypatch):
    monkeypatch.setattr(dgrpo.recipes, "run", lambda *a, **k: pytest.fail("accepted a bad config"))
    assert main(["run", "swarm.nodes=2", override]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and line in err, err


def test_each_node_learner_has_its_own_lr_and_a_node_without_one_has_grpo_lr(tiny_model_dir, tiny_model_dir_b):
    cfg = load_config(None, [*SMALL, models(tiny_model_dir, tiny_model_dir_b, "lr: 0.003")])
    swarm = build_swarm(cfg, build_task(cfg), [0, 1])
    assert lrs(swarm) == {0: [0.003], 1: [0.01]}
    assert {n: swarm.learners[p].params.lr for n, p in swarm.policies.items()} == {0: 0.003, 1: 0.01}


def test_one_rank_of_a_distributed_swarm_builds_its_node_with_its_own_lr(tiny_model_dir, tiny_model_dir_b):
    """torchrun rank k builds only node k (``transport.local_nodes == [k]``): build_swarm as rank 1 calls it."""
    cfg = load_config(None, [*SMALL, models(tiny_model_dir, tiny_model_dir_b, "lr: 0.003", "lr: 0.0005")])
    assert lrs(build_swarm(cfg, build_task(cfg), [1])) == {1: [0.0005]}
    assert lrs(build_swarm(cfg, build_task(cfg), [0])) == {0: [0.003]}


def test_a_node_lora_rank_overrides_grpo_lora_rank(tiny_model_dir, tiny_model_dir_b, tokenizer):
    """Node 0 trains rank-4 adapters, node 1 (grpo.lora_rank=0) all its weights; the adapter count is
    rank × (in + out) of every targeted Linear, counted on a plain copy of the model."""
    cfg = load_config(None, [*SMALL, "grpo.lora_targets=[q_proj, v_proj]", models(tiny_model_dir, tiny_model_dir_b, "lora_rank: 4")])
    swarm = build_swarm(cfg, build_task(cfg), [0, 1])
    trained = {n: sum(p.numel() for g in swarm.learners[pol].optimizer.param_groups for p in g["params"])
               for n, pol in swarm.policies.items()}
    plain = build_model(len(tokenizer))
    want = sum(4 * (m.in_features + m.out_features) for name, m in plain.named_modules() if name.endswith(("q_proj", "v_proj")))
    assert trained == {0: want, 1: sum(p.numel() for p in build_model(len(tokenizer), seed=1, hidden=32).parameters())}


@pytest.mark.slow
def test_a_resumed_run_trains_each_node_at_its_own_lr(tmp_path, tiny_model_dir, tiny_model_dir_b, monkeypatch):
    """Warm-up over 4 rounds: round r trains at lr · (r + 1) / 4, so after round 2 of a run resumed at round 2
    node 0 holds 0.004 · 3/4 and node 1 (no override) 0.01 · 3/4; and the resumed run's metrics are the
    straight run's (node 2 sends a full-reward poison beside a sampled completion, so every round moves
    the weights, and the last evaluation's drift shows each node's update: a resume that forgot node 0's
    lr moved eval/kl_to_start of round 3 from 0.2455 to 0.2854 when tried, 2026-12-05)."""
    built = []
    original = build.build_swarm
    monkeypatch.setattr(build, "build_swarm", lambda *a: built.append(original(*a)) or built[-1])
    three = (f"swarm.models=[{{name: {tiny_model_dir}, lr: 0.004}}, {{name: {tiny_model_dir_b}}}, "
             f"{{name: {tiny_model_dir}, lr: 0.5}}]")  # (an attacker's lr is unused: it does not train)
    args = [*SMALL, "swarm.nodes=3", "swarm.group_size=6", "swarm.prompts_per_round=2", three, "grpo.warmup_rounds=4",
            "eval.every=1", "swarm.malicious=[2]", "attack.kind=injection", "attack.poisoned_per_group=1",
            "swarm.protocol.enforce_length=false", f"out_dir={tmp_path}"]
    assert main(["run", *args, "rounds=3", "name=straight"]) == 0
    assert main(["run", *args, "rounds=2", "name=part"]) == 0
    assert lrs(built[-1]) == {0: [pytest.approx(0.004 * 2 / 4)], 1: [pytest.approx(0.01 * 2 / 4)]}
    written = yaml.safe_load((tmp_path / "part" / "config.yaml").read_text())["swarm"]["models"]
    assert [m.get("lr") for m in written] == [0.004, None, 0.5]
    assert main(["resume", str(tmp_path / "part"), "rounds=3"]) == 0
    assert lrs(built[-1]) == {0: [pytest.approx(0.004 * 3 / 4)], 1: [pytest.approx(0.01 * 3 / 4)]}
    straight, part = (read_metrics(tmp_path / n) for n in ("straight", "part"))
    assert all(r[f"train/grad_norm/node{n}"] > 0 for r in straight[:3] for n in (0, 1))
    strip = lambda records: [{k: v for k, v in r.items() if not k.startswith("time/")} for r in records]  # noqa: E731
    assert strip(part) == strip(straight)
