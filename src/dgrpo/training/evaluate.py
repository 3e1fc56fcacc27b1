"""Validation of the honest policies: accuracy, format, length and attack success on held-out prompts.

Completions use the swarm's sampling strategy (temperature from ``eval.temperature`` when set) with
seeds fixed across evaluations (:data:`EVAL_ROUND`), so changes between evaluations reflect the
weights. The ensemble recipe votes over the same completions (:func:`eval_texts`).
"""

from __future__ import annotations

import json
import statistics
import time
from contextlib import contextmanager
from typing import Iterator, Sequence

from dgrpo.attacks import Attack, build_attack
from dgrpo.config import RunConfig
from dgrpo.policy.policy import Policy
from dgrpo.policy.sampling import SamplingParams, completion_seed
from dgrpo.rewards.format import format_reward
from dgrpo.tasks.base import Task, is_correct
from dgrpo.types import Problem

EVAL_ROUND = -1  # the round of every evaluation completion's sampling seed: fixed across evaluations
EVAL_MEANS = ("eval/accuracy", "eval/completion_tokens", "eval/format_rate")  # averaged over the honest policies


@contextmanager
def eval_sampling(policy: Policy, cfg: RunConfig) -> Iterator[Policy]:
    """Inside the block ``policy`` samples at ``eval.temperature`` (when set)."""
    sampling = policy.sampling
    if cfg.eval.temperature is not None:
        policy.sampling = SamplingParams(sampling.top_k, cfg.eval.temperature, sampling.max_new_tokens)
    try:
        yield policy
    finally:
        policy.sampling = sampling


def eval_completions(policy: Policy, task: Task, problems: Sequence[Problem], run_seed: int, owner: int) -> list[tuple[list[int], str]]:
    """One completion (ids, text) per problem, seeded by (run seed, :data:`EVAL_ROUND`, owner, prompt)."""
    seeds = [completion_seed(run_seed, EVAL_ROUND, owner, p.prompt_id, 0) for p in problems]
    return policy.generate(task, list(problems), seeds)


def eval_attack(cfg: RunConfig, hosted: dict[int, Attack]) -> Attack | None:
    """The attack whose success is measured: a hosted attacker's, else built from the config (a
    process hosting only honest nodes still measures ASR); None without an attack."""
    if hosted:
        return next(iter(hosted.values()))
    return build_attack(cfg.attack, cfg) if cfg.attack.kind != "none" else None


def eval_texts(policy: Policy, cfg: RunConfig, task: Task, problems: list[Problem], targets: list[Problem],
               owner: int) -> tuple[list[tuple[list[int], str]], list[str]]:
    """Completions of the validation ``problems`` and the texts of the attack's ``targets`` (the same
    completions when the targets are those problems), sampled as :func:`eval_sampling` says."""
    with eval_sampling(policy, cfg):
        outs = eval_completions(policy, task, problems, cfg.seed, owner)
        if targets and targets != problems:
            return outs, [t for _, t in eval_completions(policy, task, targets, cfg.seed, owner)]
        return outs, [t for _, t in outs] if targets else []


def evaluate(run, round_idx: int, samples_path=None) -> dict:
    """Validation accuracy, format rate, length and attack success of every distinct honest policy
    of ``run`` (a :class:`~dgrpo.training.build.Run`, or anything with its cfg, task and swarm).

    Four completions per policy go to ``samples_path`` (JSON lines) when given.
    """
    cfg, task, swarm = run.cfg, run.task, run.swarm
    start = time.perf_counter()
    problems = list(task.val[: cfg.eval.n_prompts])
    attack = eval_attack(cfg, swarm.attacks)
    targets = attack.eval_problems(task.val)[: cfg.eval.n_prompts] if attack is not None else []
    per_policy: dict[str, list[float]] = {key: [] for key in EVAL_MEANS}
    attack_recs = []
    for owner, policy in swarm.honest_policies.items():
        outs, target_texts = eval_texts(policy, cfg, task, problems, targets, owner)
        texts = [t for _, t in outs]
        per_policy["eval/accuracy"].append(statistics.fmean(is_correct(task, t, p) for t, p in zip(texts, problems)))
        per_policy["eval/format_rate"].append(statistics.fmean(format_reward(task.completion_prefix + t) for t in texts))
        per_policy["eval/completion_tokens"].append(statistics.fmean(len(ids) for ids, _ in outs))
        if attack is not None:
            attack_recs.append(attack.evaluate(target_texts, targets, task))
        if samples_path is not None:
            with open(samples_path, "a") as fh:
                for p, t in list(zip(problems, texts))[:4]:
                    fh.write(json.dumps({"round": round_idx, "node": owner, "prompt_id": p.prompt_id,
                                         "question": p.question, "completion": t,
                                         "reward": task.reward(t, p)}) + "\n")
    rec: dict = {key: statistics.fmean(values) for key, values in per_policy.items()}
    if len(swarm.honest_policies) > 1:
        rec.update({f"eval/accuracy/node{o}": a for o, a in zip(swarm.honest_policies, per_policy["eval/accuracy"])})
    for key in (attack_recs[0] if attack_recs else {}):
        vals = [r[key] for r in attack_recs if r.get(key) is not None]
        rec[f"attack/{key}"] = statistics.fmean(vals) if vals else None
    rec["time/eval"] = round(time.perf_counter() - start, 3)
    return rec
