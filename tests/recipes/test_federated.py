"""Update exchange with tiny models: what nodes send, how it is aggregated and applied."""

import copy
import math

import numpy as np
import pytest
import torch
from torch.nn.utils import parameters_to_vector

from dgrpo.cli import main
from dgrpo.config import ConfigError, load_config
from dgrpo.grpo.learner import Learner
from dgrpo.recipes.federated import build_federation, federated_round
from dgrpo.training.build import grpo_params
from dgrpo.metrics.logger import read_metrics
from dgrpo.swarm.schedule import vertical_prompts, vertical_slots

from tests.even_length import EvenLengthTask


def _cfg(tmp_path, model_dir, *extra):
    return load_config(overrides=[
        f"model.name={model_dir}", f"out_dir={tmp_path}", "name=f", "rounds=1", "swarm.mode=vertical",
        "swarm.nodes=4", "swarm.prompts_per_round=4", "swarm.group_size=4", "sampling.max_new_tokens=5",
        "grpo.lr=1e-3", "grpo.max_grad_norm=1e6", "eval.n_prompts=2", *extra])


def _vec(params):
    return parameters_to_vector(params).detach().clone()


def test_delta_round_applies_the_coordinate_median_of_honest_and_sign_flipped_updates(tmp_path, tiny_model_dir):
    cfg = _cfg(tmp_path, tiny_model_dir, "swarm.malicious=[2]", "federated.aggregator=median",
               "federated.attack=sign_flipping")
    fed = build_federation(cfg, task=EvenLengthTask())
    theta0 = _vec(fed.params)
    out = federated_round(fed, 0)
    honest = out.honest.numpy()
    assert honest.shape == (3, theta0.numel())
    # a node whose group rewards are all equal has no GRPO signal and sends exactly zero
    flat = [out.record[f"train/reward/node{k}"] in (0.0, 1.0) for k in (0, 1, 3)]
    assert [bool(np.abs(row).sum() == 0) for row in honest] == flat and not all(flat)
    # one AdamW step from θ0 (no weight decay): every coordinate moves by at most lr
    assert np.abs(honest).max() <= 1e-3 + 1e-6  # (+ float32 rounding of θ_after − θ_t)
    # node order: 0, 1 honest; 2 malicious sends −mean(honest); 3 honest
    stacked = out.stacked.numpy()
    np.testing.assert_allclose(stacked[[0, 1, 3]], honest, rtol=0, atol=0)
    np.testing.assert_allclose(stacked[2], -honest.mean(0), rtol=1e-6, atol=1e-12)
    expected = theta0.numpy() + np.median(stacked, axis=0)  # numpy's median: mean of the middle two (n = 4)
    np.testing.assert_allclose(_vec(fed.params).numpy(), expected, rtol=0, atol=1e-7)
    mu = honest.astype(np.float64).mean(0)
    agg = np.median(stacked, axis=0).astype(np.float64)
    cos = float(agg @ mu / (np.linalg.norm(agg) * np.linalg.norm(mu)))
    assert out.record["fed/cos_aggregate_honest_mean"] == pytest.approx(cos, rel=1e-5)
    assert out.record["fed/angle"] == pytest.approx(math.degrees(math.acos(cos)), abs=1e-3)
    assert out.record["fed/poisoned_norm"] == pytest.approx(float(np.linalg.norm(mu)), rel=1e-4)  # float32 mean


def test_gradient_updates_are_the_grpo_gradient_and_the_aggregate_takes_one_adam_step(tmp_path, tiny_model_dir):
    cfg = _cfg(tmp_path, tiny_model_dir, "federated.update=gradient", "federated.aggregator=average")
    task = EvenLengthTask()
    fed = build_federation(cfg, task=task)
    theta0 = _vec(fed.params)
    # independently: node 0's rollouts, and its gradient from a copy of the model with plain SGD(lr = 1)
    ref_model = copy.deepcopy(fed.policy.model)
    slots = {0: vertical_slots(vertical_prompts(task.train, 1, cfg.seed, 0, 0), 4)}
    messages = fed.swarm.write(slots, 0)[0]
    rollouts = fed.swarm.reward(fed.swarm.receive(fed.policy, messages, 0).rollouts)
    ref = Learner(ref_model, grpo_params(cfg), fed.policy.tokenizer.eos_token_id, fed.policy.tokenizer.pad_token_id)
    ref.optimizer = torch.optim.SGD(ref_model.parameters(), lr=1.0)
    ref.step(rollouts)
    expected_grad = theta0 - parameters_to_vector(ref_model.parameters()).detach()
    out = federated_round(fed, 0)
    torch.testing.assert_close(out.honest[0], expected_grad, rtol=1e-4, atol=1e-7)
    # the aggregate (plain mean) is applied by AdamW's first step: Δθ = −lr · g / (|g| + eps)
    g = out.honest.mean(0)
    torch.testing.assert_close(out.aggregate, g)
    step = _vec(fed.params) - theta0
    torch.testing.assert_close(step, -1e-3 * g / (g.abs() + 1e-8), rtol=1e-4, atol=1e-9)


def test_lora_updates_hold_only_adapter_weights(tmp_path, tiny_model_dir):
    cfg = _cfg(tmp_path, tiny_model_dir, "federated.lora=true", "federated.lora_rank=4", "swarm.nodes=5",
               "swarm.prompts_per_round=5", "swarm.malicious=[4]", "federated.attack=normalized",
               "federated.aggregator=krum")
    fed = build_federation(cfg, task=EvenLengthTask())
    base_before = {n: p.detach().clone() for n, p in fed.policy.model.named_parameters() if "lora_" not in n}
    out = federated_round(fed, 0)
    # the tiny Llama: 2 layers, q_proj 64→64, v_proj 64→32 (2 kv heads × 16): r·(in + out) each
    assert out.honest.shape[1] == 2 * (4 * (64 + 64) + 4 * (64 + 32))
    for n, p in fed.policy.model.named_parameters():
        if "lora_" not in n:
            assert torch.equal(p, base_before[n]), n
    # the Normalized attacker's update has at most the median honest norm
    honest_norms = out.honest.norm(dim=1)
    assert out.poisoned.norm(dim=1).max() <= honest_norms.median() * (1 + 1e-6)
    assert out.record["fed/normalized_candidate"].split("@")[0] in {"reverse_mean", "reverse_sign"} | {
        f"orthogonal_{k}" for k in range(8)}
    # Krum returns one node's update as is
    assert any(torch.equal(out.aggregate, row) for row in out.stacked)


def test_federated_command_runs_and_logs(tmp_path, tiny_model_dir):
    rc = main(["federated", f"model.name={tiny_model_dir}", f"out_dir={tmp_path}", "name=run", "rounds=2",
               "swarm.mode=vertical", "swarm.nodes=5", "swarm.prompts_per_round=5", "swarm.group_size=2",
               "sampling.max_new_tokens=4", "eval.every=1", "eval.n_prompts=2", "task.n_train=20", "task.n_val=4",
               "task.few_shot=0", "swarm.malicious=[1]", "federated.attack=alie", "federated.lora=true",
               "federated.aggregator=centered_clipping", "federated.probe=true"])
    assert rc == 0
    records = read_metrics(tmp_path / "run")
    assert [r["round"] for r in records] == [0, 1, 2]
    assert {"fed/angle", "fed/honest_norm", "train/reward_honest", "eval/accuracy", "time/aggregate"} <= records[0].keys()
    assert (tmp_path / "run" / "federated.png").stat().st_size > 1000


@pytest.mark.parametrize("overrides, message", [
    (["federated.aggregator=median"], "swarm.mode=vertical"),
    (["swarm.mode=vertical", "federated.attack=normalized"], "needs at least one node"),
    (["swarm.mode=vertical", "swarm.malicious=[1]", "federated.aggregator=krum", "federated.attack=sign_flipping"],
     "n > 2f \\+ 2"),
    (["swarm.mode=vertical", "swarm.malicious=[1]", "federated.attack=normalized", "attack.kind=injection"],
     "not completions"),
    (["swarm.mode=vertical", "federated.update=gradient", "grpo.num_iterations=2"], "num_iterations=1"),
])
def test_federated_config_errors(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(overrides=overrides)


def test_update_stats_of_a_zero_aggregate_and_a_reversed_one():
    from dgrpo.robust.stats import update_stats

    honest = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    zero = update_stats(honest, torch.zeros(1, 2), torch.zeros(2))
    assert zero["fed/angle"] == 90.0 and zero["fed/progress"] == 0.0  # no progress along μ = (0.5, 0.5)
    rev = update_stats(honest, torch.tensor([[-1.0, -1.0]]), torch.tensor([-1.0, -1.0]))
    assert rev["fed/angle"] == pytest.approx(180.0) and rev["fed/progress"] == pytest.approx(-2.0)
    assert rev["fed/honest_pairwise_cos"] == 0.0 and rev["fed/poisoned_norm"] == pytest.approx(2 ** 0.5)


def test_centered_clipping_radius_ignores_zero_updates():
    from dgrpo.config import load_config as lc
    from dgrpo.robust.aggregators import aggregator_kwargs

    fed_cfg = lc(overrides=["swarm.mode=vertical", "federated.aggregator=centered_clipping"]).federated
    honest = torch.tensor([[0.0, 0.0], [0.0, 0.0], [3.0, 4.0], [0.0, 1.0], [6.0, 8.0]])
    kw = aggregator_kwargs("centered_clipping", fed_cfg, honest, None)
    assert kw["tau"] == 5.0 and kw["reference"] is None  # median of the norms 1, 5, 10


@pytest.mark.slow
@pytest.mark.parametrize("mode", [["federated.lora=true", "federated.aggregator=centered_clipping", "federated.attack=alie"],
                                  ["federated.update=gradient", "federated.aggregator=median", "federated.attack=sign_flipping"]])
def test_a_federated_run_resumes_to_the_straight_runs_metrics(tmp_path, tiny_model_dir, monkeypatch, mode):
    from dgrpo.recipes import federated
    from dgrpo.tasks.arithmetic import ArithmeticTask

    # mixed rewards (EvenLengthTask's) so that every round moves the weights and the optimizer state
    monkeypatch.setattr(ArithmeticTask, "rewards", lambda self, cs, ps: [float(len(c) % 2 == 0) for c in cs])
    args = ["federated", f"model.name={tiny_model_dir}", f"out_dir={tmp_path}", "rounds=3", "checkpoint_every=1",
            "swarm.mode=vertical", "swarm.nodes=5", "swarm.prompts_per_round=5", "swarm.group_size=2", "grpo.lr=0.01",
            "sampling.max_new_tokens=4", "eval.every=2", "eval.n_prompts=2", "task.n_train=20", "task.n_val=4",
            "task.few_shot=0", "swarm.malicious=[1]", *mode]
    assert main([*args, "name=straight"]) == 0
    real = federated.federated_round

    def crash_at_2(fed, r):
        if r == 2:
            raise RuntimeError("power cut")
        return real(fed, r)

    monkeypatch.setattr(federated, "federated_round", crash_at_2)
    with pytest.raises(RuntimeError, match="power cut"):
        main([*args, "name=crash"])
    monkeypatch.setattr(federated, "federated_round", real)
    assert main(["resume", str(tmp_path / "crash")]) == 0
    strip = lambda recs: [{k: v for k, v in r.items() if not k.startswith("time/")} for r in recs]
    want = strip(read_metrics(tmp_path / "straight"))
    assert [r["round"] for r in want] == [0, 1, 2, 3] and all(r["fed/honest_norm"] > 0 for r in want[:3])
    assert strip(read_metrics(tmp_path / "crash")) == want
    assert main(["resume", str(tmp_path / "crash"), "rounds=4"]) == 0  # extending it goes on from round 3
    assert [r["round"] for r in read_metrics(tmp_path / "crash")] == [0, 1, 2, 3, 4]


def test_a_damaged_federated_checkpoint_is_one_line(tmp_path, tiny_model_dir, capsys):
    args = ["federated", f"model.name={tiny_model_dir}", f"out_dir={tmp_path}", "name=f", "rounds=1",
            "swarm.mode=vertical", "swarm.nodes=2", "swarm.prompts_per_round=2", "swarm.group_size=2",
            "sampling.max_new_tokens=4", "eval.n_prompts=1", "task.n_train=10", "task.n_val=2", "task.few_shot=0"]
    assert main(args) == 0
    path = tmp_path / "f" / "checkpoint" / "state" / "tensors.safetensors"
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    capsys.readouterr()
    assert main(["resume", str(tmp_path / "f"), "rounds=2"]) == 2
    err = capsys.readouterr().err.rstrip("\n").rsplit("\n", 1)[-1]
    assert err.startswith("dgrpo: error: ") and f"{path}: checksum differs" in err
