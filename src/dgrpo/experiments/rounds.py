"""The steps of a round shared by Algorithms 1 and 2 after the all-gather, and their metrics."""

from __future__ import annotations

import json
import statistics
import time
from collections import defaultdict
from typing import Sequence

from dgrpo.experiments.setup import Run
from dgrpo.policy.sampling import SamplingParams, completion_seed
from dgrpo.rewards.format import format_reward
from dgrpo.swarm.messages import Message
from dgrpo.swarm.swarm import ReceiveReport, rejection_counts
from dgrpo.tasks.base import is_correct

EVAL_ROUND = -1  # sampling seeds of evaluation completions: fixed across evaluations


def _mean(xs: Sequence[float]) -> float | None:
    return statistics.fmean(xs) if xs else None


def round_record(run: Run, round_idx: int, messages: Sequence[Message], reports: dict[int, ReceiveReport],
                 times: dict[str, float]) -> dict:
    """Metrics of one round: rewards per node, update statistics, defense rates, phase times."""
    rec: dict = {"round": round_idx}
    rec.update({f"time/{k}": round(v, 3) for k, v in times.items()})
    owner = min(reports)
    report = reports[owner]  # rewards are the same for every honest receiver (same task)
    by_node: dict[int, list[float]] = defaultdict(list)
    for r in report.rollouts:
        by_node[r.sender].append(r.reward)
    for node in range(run.cfg.swarm.nodes):
        rec[f"train/reward/node{node}"] = _mean(by_node.get(node, []))
    honest = [r for r in report.rollouts if r.sender not in run.cfg.swarm.malicious]
    rec["train/reward_honest"] = _mean([r.reward for r in honest])
    rec["train/completion_tokens"] = _mean([len(r.completion_ids) for r in honest])
    # The think/answer format alone: it is learnt long before arithmetic, so it shows learning early.
    rec["train/format_rate"] = _mean([format_reward(run.task.completion_prefix + r.text) for r in honest])
    rec["swarm/messages"] = len(messages)
    rec["swarm/invalid"] = sum(len(r.invalid) for r in reports.values())
    for own, rep in reports.items():
        suffix = "" if len(reports) == 1 else f"/node{own}"
        if rep.update is not None:
            rec[f"train/loss{suffix}"] = rep.update.loss
            rec[f"train/grad_norm{suffix}"] = rep.update.grad_norm
            rec[f"train/used{suffix}"] = rep.update.used
        rec[f"time/defense{suffix}"] = round(rep.defense_seconds, 3)
        for name, secs in rep.defense_times.items():
            rec[f"time/defense/{name}{suffix}"] = round(secs, 4)
    if run.cfg.defenses:
        rec.update(defense_record(report))
        rec["time/defense_fraction"] = report.defense_seconds / times["round"] if times.get("round") else None
    return rec


def defense_record(report: ReceiveReport) -> dict:
    """Rejections per defense, detection rate on poisoned and false-positive rate on honest rollouts."""
    counts = rejection_counts(report.rollouts)
    total = counts.pop("_total")
    rec = {"defense/received": sum(total.values())}
    rejected_any = defaultdict(int)
    for r in report.rollouts:
        if r.verdicts:
            rejected_any[r.label] += 1
    counts["any"] = rejected_any
    for name, by_label in counts.items():
        rec[f"defense/{name}/rejected"] = sum(by_label.values())
        if total.get("poisoned"):
            rec[f"defense/{name}/detection_rate"] = by_label.get("poisoned", 0) / total["poisoned"]
        if total.get("honest"):
            rec[f"defense/{name}/false_positive_rate"] = by_label.get("honest", 0) / total["honest"]
    rec["defense/poisoned_received"] = total.get("poisoned", 0)
    rec["defense/honest_received"] = total.get("honest", 0)
    return rec


def evaluate(run: Run, round_idx: int, samples_path=None) -> dict:
    """Validation accuracy (and attack success) of every distinct honest policy.

    Completions use the swarm's sampling strategy (temperature from ``eval.temperature`` when set)
    with seeds fixed across evaluations, so changes between evaluations reflect the weights.
    """
    cfg, task, swarm = run.cfg, run.task, run.swarm
    start = time.perf_counter()
    rec: dict = {}
    problems = list(task.val[: cfg.eval.n_prompts])
    attack = next(iter(swarm.attacks.values()), None) if swarm.attacks else None
    if attack is None and cfg.attack.kind != "none":
        from dgrpo.attacks import build_attack  # a process hosting only honest nodes still measures ASR

        attack = build_attack(cfg.attack, cfg)
    accs, tokens, formats, attack_recs = [], [], [], []
    for owner, policy in swarm.honest_policies.items():
        sampling = policy.sampling
        if cfg.eval.temperature is not None:
            policy.sampling = SamplingParams(sampling.top_k, cfg.eval.temperature, sampling.max_new_tokens)
        try:
            seeds = [completion_seed(cfg.seed, EVAL_ROUND, owner, p.prompt_id, 0) for p in problems]
            outs = policy.generate(task, problems, seeds)
            texts = [t for _, t in outs]
            accs.append(statistics.fmean(is_correct(task, t, p) for t, p in zip(texts, problems)))
            formats.append(statistics.fmean(format_reward(task.completion_prefix + t) for t in texts))
            tokens.append(statistics.fmean(len(ids) for ids, _ in outs))
            if attack is not None:
                targets = attack.eval_problems(task.val)[: cfg.eval.n_prompts]
                if targets != problems:
                    seeds_t = [completion_seed(cfg.seed, EVAL_ROUND, owner, p.prompt_id, 0) for p in targets]
                    t_texts = [t for _, t in policy.generate(task, targets, seeds_t)]
                else:
                    targets, t_texts = problems, texts
                attack_recs.append(attack.evaluate(t_texts, targets, task))
            if samples_path is not None:
                with open(samples_path, "a") as fh:
                    for p, t in list(zip(problems, texts))[:4]:
                        fh.write(json.dumps({"round": round_idx, "node": owner, "prompt_id": p.prompt_id,
                                             "question": p.question, "completion": t,
                                             "reward": task.reward(t, p)}) + "\n")
        finally:
            policy.sampling = sampling
    rec["eval/accuracy"] = statistics.fmean(accs)
    rec["eval/completion_tokens"] = statistics.fmean(tokens)
    rec["eval/format_rate"] = statistics.fmean(formats)
    if len(accs) > 1:
        rec.update({f"eval/accuracy/node{o}": a for o, a in zip(swarm.honest_policies, accs)})
    for key in (attack_recs[0] if attack_recs else {}):
        vals = [r[key] for r in attack_recs if r.get(key) is not None]
        rec[f"attack/{key}"] = statistics.fmean(vals) if vals else None
    rec["time/eval"] = round(time.perf_counter() - start, 3)
    return rec
