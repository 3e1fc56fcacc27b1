"""Regression: tiny-model runs of every recipe reproduce the metrics the code made before the
restructure of issue 17 (``golden_metrics.json``: metrics.jsonl, summary.json and groups.json of each
run directory, ``time/*`` left out).

The values were recorded by the pre-restructure code (commit 8ae387a) and compared exactly; 30 of
the 1,035 floats were re-recorded when the update's scoring pass began to pack completions and
run on oneDNN (float32 summation order only: every token, reward, verdict and count stayed; the
commit that re-recorded them compares both against float64 runs). Here
floats are compared to a relative 1e-6 so that another CPU's rounding does not fail the test, while
a changed sampled token, reward, verdict or count still does. The runs cover horizontal and vertical
swarms, a heterogeneous one, attacks with top-k / replay (fast and regenerate) / judge / reward
outlier defenses with drop and zero, batch scaling, β > 0, two iterations, four federated runs,
two ensembles and the TokenBuncher phases. ``even_length`` (``tests/even_length.py``) is a task
registered here: a random tiny model gets it half right, so groups have mixed rewards and every
update moves the weights.
"""

import json
from pathlib import Path

import pytest
import torch

from dgrpo import registry
from dgrpo.cli import main
from tests.even_length import EvenLengthTask, EvenLengthTaskConfig

GOLDEN = json.loads((Path(__file__).with_name("golden_metrics.json")).read_text())
EVEN = "task.kind=even_length"


# The runs were recorded before the protocol's length rule was on by default; their attackers send the
# paper's unshortened poisons (longer than the tiny runs' max_new_tokens), so the rule is off here.
OLD_RULES = "swarm.protocol.enforce_length=false"
BASE = ["threads=1", "sampling.max_new_tokens=12", "eval.every=2", "eval.n_prompts=3", "grpo.lr=0.01",
        "task.n_train=20", "task.n_val=5", "task.few_shot=0", OLD_RULES]
EVEN_BASE = ["threads=1", "sampling.max_new_tokens=10", "eval.every=2", "eval.n_prompts=3", "grpo.lr=0.01", OLD_RULES]
ATT = ["swarm.malicious=[1]", "attack.kind=injection", "attack.poisoned_per_group=1", "sampling.max_new_tokens=24"]

RUNS = {
  "h_even": (EVEN, ["run", "MA", *EVEN_BASE, "rounds=3", "swarm.nodes=2", "swarm.group_size=4", "swarm.prompts_per_round=2"]),
  "v_even_bnpo_batch_beta": (EVEN, ["run", "MA", *EVEN_BASE, "rounds=3", "swarm.mode=vertical", "swarm.nodes=2", "swarm.group_size=4",
        "swarm.prompts_per_round=2", "grpo.loss_type=bnpo", "grpo.scale_rewards=batch", "grpo.beta=0.1", "grpo.num_iterations=2"]),
  "h_even_drgrpo_outlier_zero": (EVEN, ["run", "MA", *EVEN_BASE, "rounds=3", "swarm.nodes=2", "swarm.group_size=4", "swarm.prompts_per_round=2",
        "grpo.loss_type=dr_grpo", "grpo.scale_rewards=none", "defenses=[{kind: reward_outlier, z: 0.9, action: zero}]"]),
  "hetero_even_outlier": (EVEN, ["run", "MODELS", *EVEN_BASE, "rounds=3", "swarm.nodes=2",
        "swarm.group_size=4", "swarm.prompts_per_round=2", "defenses=[{kind: reward_outlier, z: 0.9}]"]),
  "h_even_attack_topk_replay": (EVEN, ["run", "MA", *EVEN_BASE, *ATT, "rounds=3", "swarm.nodes=2", "swarm.group_size=4", "swarm.prompts_per_round=2",
        "defenses=[{kind: topk}, {kind: replay}]"]),
  "h_even_attack_zero_regen_iter2": (EVEN, ["run", "MA", *EVEN_BASE, *ATT, "rounds=3", "swarm.nodes=2", "swarm.group_size=4", "swarm.prompts_per_round=2",
        "swarm.reject_mode=zero", "grpo.num_iterations=2", "defenses=[{kind: topk, k: 50}, {kind: replay, method: regenerate}]"]),
  "h_even_attack_topk_zero_batch": (EVEN, ["run", "MA", *EVEN_BASE, *ATT, "rounds=3", "swarm.nodes=2", "swarm.group_size=4", "swarm.prompts_per_round=2",
        "grpo.scale_rewards=batch", "grpo.loss_type=bnpo", "defenses=[{kind: reward_outlier, z: 0.9}, {kind: topk, action: zero}, {kind: replay}]"]),
  "v_even_attack_replay_beta": (EVEN, ["run", "MA", *EVEN_BASE, "rounds=3", "swarm.mode=vertical", "swarm.nodes=2", "swarm.group_size=4",
        "swarm.prompts_per_round=2", "swarm.malicious=[1]", "attack.kind=injection", "grpo.beta=0.05", "grpo.loss_type=dr_grpo",
        "defenses=[{kind: replay, action: drop}, {kind: topk}]"]),
  "h_attack_topk_replay": (None, ["run", "MA", *BASE, *ATT, "rounds=3", "swarm.nodes=2", "swarm.group_size=4", "swarm.prompts_per_round=2",
        "defenses=[{kind: topk}, {kind: replay}]"]),
  "h_attack_nodefense": (None, ["run", "MA", *BASE, *ATT, "rounds=3", "swarm.nodes=2", "swarm.group_size=4", "swarm.prompts_per_round=2"]),
  "h_attack_zero_regen": (None, ["run", "MA", *BASE, *ATT, "rounds=3", "swarm.nodes=2", "swarm.group_size=4", "swarm.prompts_per_round=2",
        "swarm.reject_mode=zero", "defenses=[{kind: topk, k: 50}, {kind: replay, method: regenerate}]"]),
  "h_attack_topk_scalebatch": (None, ["run", "MA", *BASE, *ATT, "rounds=3", "swarm.nodes=2", "swarm.group_size=4", "swarm.prompts_per_round=2",
        "grpo.scale_rewards=batch", "defenses=[{kind: topk, k: 80, action: zero}]"]),
  "v_equation_judge": (None, ["run", "MA", *BASE, "rounds=2", "swarm.mode=vertical", "swarm.nodes=2", "swarm.group_size=4",
        "swarm.prompts_per_round=2", "swarm.malicious=[1]", "attack.kind=equation", "task.two_two_rate=0.5",
        "JUDGES"]),
  "v_dos": (None, ["run", "MA", *BASE, "rounds=2", "swarm.mode=vertical", "swarm.nodes=2", "swarm.group_size=4",
        "swarm.prompts_per_round=2", "swarm.malicious=[1]", "attack.kind=dos", "defenses=[{kind: topk}]"]),
  "fed_median_signflip": (EVEN, ["federated", "MA", *EVEN_BASE, "rounds=2", "swarm.mode=vertical", "swarm.nodes=4", "swarm.prompts_per_round=4",
        "swarm.group_size=4", "grpo.max_grad_norm=1e6", "swarm.malicious=[2]", "federated.aggregator=median", "federated.attack=sign_flipping"]),
  "fed_gradient_avg": (EVEN, ["federated", "MA", *EVEN_BASE, "rounds=2", "swarm.mode=vertical", "swarm.nodes=4", "swarm.prompts_per_round=4",
        "swarm.group_size=4", "federated.update=gradient", "federated.aggregator=average"]),
  "fed_lora_krum_normalized_probe": (EVEN, ["federated", "MA", *EVEN_BASE, "rounds=2", "swarm.mode=vertical", "swarm.nodes=5",
        "swarm.prompts_per_round=5", "swarm.group_size=4", "swarm.malicious=[4]", "federated.lora=true", "federated.lora_rank=4",
        "federated.attack=normalized", "federated.aggregator=krum", "federated.probe=true"]),
  "fed_cc_alie": (EVEN, ["federated", "MA", *EVEN_BASE, "rounds=2", "swarm.mode=vertical", "swarm.nodes=5", "swarm.prompts_per_round=5",
        "swarm.group_size=2", "swarm.malicious=[1]", "federated.attack=alie", "federated.aggregator=centered_clipping"]),
  "ensemble_hail": (None, ["ensemble", "MA", *BASE, *ATT, "rounds=2", "swarm.nodes=4", "swarm.group_size=4", "swarm.prompts_per_round=2",
        "ensemble.groups=3", "eval.every=1"]),
  "ensemble_even_vertical": (EVEN, ["ensemble", "MA", *EVEN_BASE, "rounds=2", "swarm.mode=vertical", "swarm.nodes=4", "swarm.group_size=4",
        "swarm.prompts_per_round=4", "ensemble.groups=2", "eval.every=1"]),
  "harden": (None, ["harden", "MA", "threads=1", "sampling.max_new_tokens=6", "eval.every=1", "eval.n_prompts=2", "task.n_train=20",
        "task.n_val=4", "task.few_shot=0", "swarm.nodes=1", "swarm.group_size=2", "swarm.prompts_per_round=2",
        "hardening.steps=2", "hardening.attack_rounds=2", "hardening.benign_rounds=1", "hardening.n_train=8",
        "hardening.n_val=2", "hardening.group_size=3", "hardening.prompts_per_step=2", "hardening.lr=1e-3"]),
}


# the judge's cumulative counters came after the golden record (issue 16); the verdicts they count are
# still compared (defense/judge/rejected, the rates), and test_judge_counters_match_the_verdicts checks them.
# v_equation_judge's second judge is named judge_2 since a kind listed twice is named apart: it is asked about
# nothing (the first rejects every completion), so it adds only counters, never a verdict key.
COUNTERS = tuple(f"defense/{j}/{c}" for j in ("judge", "judge_2") for c in ("calls", "yes", "no", "unparseable", "failed"))


def _strip(value):
    if isinstance(value, list):
        return [{k: v for k, v in rec.items() if not k.startswith("time/") and k not in COUNTERS} for rec in value]
    return value


def _collect(run_dir: Path) -> dict:
    out = {}
    for f in sorted(run_dir.rglob("metrics.jsonl")):
        out[str(f.relative_to(run_dir))] = _strip([json.loads(line) for line in f.read_text().splitlines() if line.strip()])
    for pattern in ("summary.json", "groups.json"):
        for f in sorted(run_dir.rglob(pattern)):
            out[str(f.relative_to(run_dir))] = json.loads(f.read_text())
    return out


# Evaluation figures added after the golden values were recorded (issue 21: greedy decoding, Wilson
# intervals, drift): allowed beside the recorded keys, which must keep their values.
ADDED = ("n", "greedy/", "kl_to_start", "entropy")  # as metrics.jsonl keys (eval/…) and summary.json keys


def _added(key: str) -> bool:
    key = key.removeprefix("eval/")
    return key.startswith(ADDED) or key.endswith(("_ci95_low", "_ci95_high"))


# Float tolerance. The golden values were recorded on one CPU; float32 kernels take other reduction
# orders on others (AVX2 vs AVX-512/AMX paths of ATen, oneDNN and MKL; pinning ATEN_CPU_CAPABILITY or
# ONEDNN_MAX_CPU_ISA did not reproduce the recording machine), and training carries the difference on.
# Measured on a Sapphire Rapids machine against these values (103 floats differ of all the runs):
# all but five within 4.2e-6 relative; harden round 2 grad_norm 3.2e-5 relative and pg_loss 8.3e-5
# absolute (a mean of advantage-weighted ratios near 0); two probe angles of the coordinate-wise
# median and trimmed mean under the normalized attack 0.064-0.088 degrees (the median switches
# between nearly tied coordinates); fed/angle 1e-5 vs 0 degrees (acos of a float32 cosine near 1 is
# known only to ~0.02 degrees). A change of logic moves these by far more; counts, labels, texts and
# key sets stay exact.
REL = 1e-4
ABS = 1e-4
ANGLE_ABS = 0.25  # degrees


def _close(got, want, where=""):
    """Equal, floats to :data:`REL`/:data:`ABS` (angles to :data:`ANGLE_ABS` degrees); returns the first
    difference's path, or None."""
    if isinstance(want, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
        tol = ANGLE_ABS if where.endswith("angle") else ABS
        return None if got == pytest.approx(want, rel=REL, abs=tol) else f"{where}: {got!r} != {want!r}"
    if isinstance(want, dict) and isinstance(got, dict):
        if not set(want) <= set(got) or {k for k in got if not _added(k)} != {k for k in want if not _added(k)}:
            return f"{where}: keys {sorted(set(got) ^ set(want))} differ"
        return next((d for k in want if (d := _close(got[k], want[k], f"{where}/{k}"))), None)
    if isinstance(want, list) and isinstance(got, list):
        if len(got) != len(want):
            return f"{where}: {len(got)} items != {len(want)}"
        return next((d for i, (g, w) in enumerate(zip(got, want)) if (d := _close(g, w, f"{where}[{i}]"))), None)
    return None if got == want else f"{where}: {got!r} != {want!r}"


@pytest.fixture(scope="module")
def even_length_task():
    registry.register("task", "even_length", config=EvenLengthTaskConfig)(lambda: EvenLengthTask())
    yield
    del registry._ENTRIES["task"]["even_length"]


@pytest.mark.parametrize("name", sorted(RUNS))
def test_recipe_reproduces_the_metrics_of_the_code_before_the_restructure(name, tmp_path, tiny_model_dir,
                                                                         tiny_model_dir_b, even_length_task):
    task, args = RUNS[name]
    models = f"swarm.models=[{{name: {tiny_model_dir}}}, {{name: {tiny_model_dir_b}}}]"
    judges = (f"defenses=[{{kind: judge, model: {tiny_model_dir}, max_new_tokens: 2}}, "
              f"{{kind: judge, model: {tiny_model_dir}, mode: logits, threshold: 0.5, action: zero}}]")
    args = [{"MA": f"model.name={tiny_model_dir}", "MODELS": models, "JUDGES": judges}.get(a, a) for a in args]
    torch.manual_seed(12345)
    assert main([*args, *([task] if task else []), f"out_dir={tmp_path}", f"name={name}"]) == 0
    assert _close(_collect(tmp_path / name), GOLDEN[name], name) is None
    if name == "v_equation_judge":  # (COUNTERS: the second judge is asked about nothing, the first about every text)
        first = json.loads((tmp_path / name / "metrics.jsonl").read_text().splitlines()[0])
        assert first["defense/judge_2/calls"] == 0 and first["defense/judge/calls"] >= 1


def test_judge_counters_match_the_verdicts(tmp_path, tiny_model_dir):
    """A random tiny judge never says YES or NO: every judgment is unparseable, rejected by default."""
    task, args = RUNS["v_equation_judge"]
    judge = f"defenses=[{{kind: judge, model: {tiny_model_dir}, max_new_tokens: 2}}]"
    args = [{"MA": f"model.name={tiny_model_dir}", "JUDGES": judge}.get(a, a) for a in args]
    assert main([*args, *([task] if task else []), f"out_dir={tmp_path}", "name=c"]) == 0
    records = [json.loads(line) for line in (tmp_path / "c" / "metrics.jsonl").read_text().splitlines()]
    rec = records[0]
    assert rec["defense/judge/rejected"] == rec["defense/received"]
    assert rec["defense/judge/unparseable"] == rec["defense/judge/calls"] >= 1
    assert rec["defense/judge/yes"] == rec["defense/judge/no"] == rec["defense/judge/failed"] == 0
    later = [r for r in records if "defense/judge/calls" in r]
    assert [r["defense/judge/calls"] for r in later] == sorted(r["defense/judge/calls"] for r in later)  # cumulative


@pytest.mark.parametrize("name", ["v_even_bnpo_batch_beta", "v_even_attack_replay_beta"])
def test_shared_prompt_prefix_keeps_the_golden_metrics(name, tmp_path, tiny_model_dir, monkeypatch, even_length_task):
    """The update's shared prompt prefix (issue 38) on runs whose prompts share only 8 tokens, below the
    16-token minimum (forced on here): β > 0 with its reference model, two iterations, replay and top-k
    verdicts, vertical groups; the same metrics. The arithmetic runs above use it by default (123 tokens)."""
    from dgrpo.grpo import learner
    from dgrpo.policy import prefix

    built = []
    monkeypatch.setattr(learner, "common_prefix", lambda prompts: prefix.common_prefix(prompts, minimum=1))
    original = prefix.SharedPrefix.__init__
    monkeypatch.setattr(prefix.SharedPrefix, "__init__", lambda self, *a, **k: (built.append(a[1]), original(self, *a, **k))[1])
    task, args = RUNS[name]
    args = [f"model.name={tiny_model_dir}" if a == "MA" else a for a in args]
    torch.manual_seed(12345)
    assert main([*args, task, f"out_dir={tmp_path}", f"name={name}"]) == 0
    assert built and all(len(ids) >= 1 for ids in built)
    assert _close(_collect(tmp_path / name), GOLDEN[name], name) is None
