"""Ensemble of swarms decided by majority vote (ensemble FRL, Fang, Wang & Gong 2025; MISSION §5).

    split   the m nodes into K disjoint groups (dgrpo.robust.ensemble.split_groups)
    train   each group is an ordinary swarm (Alg. 1 or 2 with the run's settings) holding the
            malicious nodes that fall into it; the K swarms advance in lockstep, round by round
    vote    every ``eval.every`` rounds each group's policy answers the validation prompts; the
            ensemble's answer is the majority of the K parsed answers (ties → lowest group)
    compare optionally (``ensemble.baseline``) the single swarm of all m nodes is trained under
            the same attack (run directory ``single/``)

Run directory: ``metrics.jsonl`` (ensemble evaluations: ``ensemble/…`` and ``group{g}/…``),
``group{g}/`` (each group's ordinary round records), ``single/``, ``summary.json``, ``ensemble.png``.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import torch

from dgrpo.config import RunConfig
from dgrpo.experiments.rounds import EVAL_ROUND, round_record
from dgrpo.experiments.setup import Run, build_run, build_run_dir, seed_everything
from dgrpo.metrics.logger import MetricsLogger, read_metrics
from dgrpo.policy.sampling import SamplingParams, completion_seed
from dgrpo.robust.ensemble import corrupted_groups, is_tolerated, split_groups, tolerance
from dgrpo.robust.plots import plot_ensemble
from dgrpo.robust.voting import parsed_answer, vote_metrics

log = logging.getLogger(__name__)


def group_seed(run_seed: int, g: int) -> int:
    """Run seed of group g (groups sample different prompts and completions)."""
    return run_seed * 1000 + g + 1


def group_config(cfg: RunConfig, members: list[int], g: int, out_dir: Path) -> RunConfig:
    """The ordinary swarm config of group g: its nodes renumbered 0..len−1, its malicious nodes, the
    attack only if it holds one, the task split of the whole run (same validation questions)."""
    data = cfg.model_dump(mode="json")
    local_bad = [i for i, node in enumerate(members) if node in set(cfg.swarm.malicious)]
    data.update(ensemble=None, seed=group_seed(cfg.seed, g), out_dir=str(out_dir), name=f"group{g}")
    data["swarm"].update(nodes=len(members), malicious=local_bad)
    if not local_bad:
        data["attack"] = {"kind": "none"}
    if data["task"].get("kind") == "arithmetic" and data["task"].get("seed") is None:
        data["task"]["seed"] = cfg.seed
    return RunConfig.model_validate(data)


def single_config(cfg: RunConfig, out_dir: Path) -> RunConfig:
    """The single swarm of all m nodes under the same attack (the comparison)."""
    return cfg.model_copy(update={"ensemble": None, "out_dir": str(out_dir), "name": "single"})


def _write_round(mode: str):
    if mode == "horizontal":
        from dgrpo.experiments.alg1_horizontal import write_round
    else:
        from dgrpo.experiments.alg2_vertical import write_round
    return write_round


def evaluate_ensemble(cfg: RunConfig, runs: list[Run], attack) -> dict:
    """Each group's policy answers the first ``eval.n_prompts`` validation prompts; vote; score."""
    start = time.perf_counter()
    task = runs[0].task
    problems = list(task.val[: cfg.eval.n_prompts])
    targets = attack.eval_problems(task.val)[: cfg.eval.n_prompts] if attack is not None else []
    answers, hits, target_hits = [], [], []
    for g, run in enumerate(runs):
        policy = next(iter(run.swarm.honest_policies.values()))
        sampling = policy.sampling
        if cfg.eval.temperature is not None:
            policy.sampling = SamplingParams(sampling.top_k, cfg.eval.temperature, sampling.max_new_tokens)
        try:
            seeds = [completion_seed(cfg.seed, EVAL_ROUND, g, p.prompt_id, 0) for p in problems]
            texts = [t for _, t in policy.generate(task, problems, seeds)]
            answers.append([parsed_answer(t, task.completion_prefix) for t in texts])
            if attack is not None:
                if targets != problems:
                    seeds_t = [completion_seed(cfg.seed, EVAL_ROUND, g, p.prompt_id, 0) for p in targets]
                    t_texts = [t for _, t in policy.generate(task, targets, seeds_t)]
                else:
                    t_texts = texts
                target_hits.append([attack.evaluate([t], [p], task).get("asr") for t, p in zip(t_texts, targets)])
        finally:
            policy.sampling = sampling
    if attack is not None and targets == problems:
        hits = target_hits
    votes = vote_metrics(answers, [p.answer for p in problems], hits or None)
    rec = {"ensemble/accuracy": votes["accuracy"], "ensemble/abstain": votes["abstain"]}
    for g, acc in enumerate(votes["group_accuracy"]):
        rec[f"group{g}/accuracy"] = acc
    if attack is not None:
        if targets != problems:  # the payload is measured on its own prompts: vote over those
            tv = vote_metrics([[None] * len(targets)] * len(runs), [p.answer for p in targets], target_hits)
        else:
            tv = votes
        rec["ensemble/asr_vote"], rec["ensemble/asr_any"] = tv["asr_vote"], tv["asr_any"]
        for g, a in enumerate(tv["group_asr"]):
            rec[f"group{g}/asr"] = a
    rec["time/eval"] = round(time.perf_counter() - start, 3)
    return rec


def tolerance_record(groups: list[list[int]], malicious: list[int]) -> dict:
    """The provable guarantee of this split (dgrpo.robust.ensemble): ⌊(K−1)/2⌋ malicious nodes in
    the worst placement, and whether this run's malicious set is tolerated."""
    return {"ensemble/K": len(groups), "ensemble/tolerance": tolerance(groups),
            "ensemble/corrupted_groups": len(corrupted_groups(groups, malicious)),
            "ensemble/tolerated": is_tolerated(groups, malicious)}


def run(cfg: RunConfig, run_dir: Path | None = None) -> Path:
    """Train the K group swarms in lockstep, evaluate the vote, then (optionally) the single swarm."""
    seed_everything(cfg.seed)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    run_dir = run_dir or build_run_dir(cfg)
    groups = split_groups(range(cfg.swarm.nodes), cfg.ensemble.groups)
    (run_dir / "groups.json").write_text(json.dumps({"groups": groups, "malicious": cfg.swarm.malicious}))
    static = tolerance_record(groups, cfg.swarm.malicious)
    log.info("ensemble: groups %s, malicious %s, tolerance %d, tolerated %s", groups, cfg.swarm.malicious,
             static["ensemble/tolerance"], static["ensemble/tolerated"])
    runs = [build_run(group_config(cfg, members, g, run_dir)) for g, members in enumerate(groups)]
    attack = None
    if cfg.attack.kind != "none":
        from dgrpo.attacks import build_attack

        attack = build_attack(cfg.attack, cfg)
    write_round = _write_round(cfg.swarm.mode)
    logger = MetricsLogger(run_dir, cfg.tensorboard)
    for r in range(cfg.rounds + 1):
        if r % cfg.eval.every == 0 or r == cfg.rounds:
            logger.log({"round": r, **static, **evaluate_ensemble(cfg, runs, attack)})
        if r == cfg.rounds:
            break
        for g, run in enumerate(runs):                 # one ordinary round of every group swarm
            t0 = time.perf_counter()
            local = write_round(run, r)
            t1 = time.perf_counter()
            messages = run.transport.all_gather(local)
            reports = run.swarm.update(messages, r)
            t2 = time.perf_counter()
            run.logger.log(round_record(run, r, messages, reports, {"generate": t1 - t0, "exchange": 0.0,
                                                                     "update": t2 - t1, "round": t2 - t0}))
        log.info("ensemble round %d done", r)
    logger.close()
    for run in runs:
        run.logger.close()
    del runs
    single_dir = None
    if cfg.ensemble.baseline:
        from dgrpo.experiments import run_experiment

        single_dir = run_experiment(single_config(cfg, run_dir))
    write_summary(run_dir, static, single_dir)
    plot_ensemble(run_dir)
    return run_dir


def write_summary(run_dir: Path, static: dict, single_dir: Path | None) -> dict:
    """``summary.json``: the last ensemble evaluation next to the single swarm's last one."""
    last = read_metrics(run_dir)[-1]
    summary = {k.split("/", 1)[1]: v for k, v in static.items()}
    summary["ensemble"] = {k.split("/", 1)[1]: v for k, v in last.items() if k.startswith("ensemble/") and k not in static}
    summary["groups"] = {k: v for k, v in last.items() if k.startswith("group")}
    if single_dir is not None:
        final = read_metrics(single_dir)[-1]
        summary["single"] = {k.split("/", 1)[1]: v for k, v in final.items() if k.startswith(("eval/", "attack/"))}
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=1, sort_keys=True))
    return summary
