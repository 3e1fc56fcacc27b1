"""Ensemble of swarms decided by majority vote (ensemble FRL, Fang, Wang & Gong 2025; docs/robust.md).

    split   the m nodes into K disjoint groups (dgrpo.robust.ensemble.split_groups)
    train   each group is an ordinary swarm (Alg. 1 or 2 with the run's settings) holding the
            malicious nodes that fall into it; the K swarms advance in lockstep, round by round:
            one round of each is its recipe's ``one_round`` (dgrpo.recipes.horizontal / vertical)
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
import shutil
import time
from pathlib import Path

from dgrpo.config import RunConfig
from dgrpo.metrics.logger import MetricsLogger, read_metrics
from dgrpo.recipes import recipe
from dgrpo.robust.ensemble import corrupted_groups, is_tolerated, split_groups, tolerance
from dgrpo.robust.plots import plot_ensemble
from dgrpo.robust.voting import parsed_answer, vote_metrics
from dgrpo.errors import CheckpointError
from dgrpo.training.build import Run, build_run, build_run_dir, prepare
from dgrpo.training.checkpoint import load_checkpoint, read_state, save_checkpoint, write_state
from dgrpo.training.run_files import record_roster, run_files
from dgrpo.training.run_identity import identity
from dgrpo.training.evaluate import eval_attack, eval_texts
from dgrpo.training.loop import evaluation_round
from dgrpo.training.resume import keep_logs_before, keep_rounds_before, write_config

log = logging.getLogger(__name__)


def group_seed(run_seed: int, g: int) -> int:
    """Run seed of group g (groups sample different prompts and completions)."""
    return run_seed * 1000 + g + 1


def group_config(cfg: RunConfig, members: list[int], g: int, out_dir: Path) -> RunConfig:
    """The ordinary swarm config of group g: its nodes renumbered 0..len−1, their models (``swarm.models``,
    when set), its malicious nodes, the attack only if it holds one, the task split of the whole run (same
    validation questions)."""
    data = cfg.model_dump(mode="json")
    local_bad = [i for i, node in enumerate(members) if node in set(cfg.swarm.malicious)]
    data.update(ensemble=None, seed=group_seed(cfg.seed, g), out_dir=str(out_dir), name=f"group{g}")
    data["swarm"].update(nodes=len(members), malicious=local_bad)
    if data["swarm"].get("models") is not None:  # a heterogeneous swarm: each member keeps its own model
        data["swarm"]["models"] = [data["swarm"]["models"][node] for node in members]
    if not local_bad:
        data["attack"] = {"kind": "none"}
    data["task"] = cfg.task.seeded(cfg.seed).model_dump(mode="json")  # the run's problems, not the group seed's
    return RunConfig.model_validate(data)


def single_config(cfg: RunConfig, out_dir: Path) -> RunConfig:
    """The single swarm of all m nodes under the same attack (the comparison)."""
    return cfg.model_copy(update={"ensemble": None, "out_dir": str(out_dir), "name": "single"})


def evaluate_ensemble(cfg: RunConfig, runs: list[Run], attack) -> dict:
    """Each group's policy answers the first ``eval.n_prompts`` validation prompts; vote; score."""
    start = time.perf_counter()
    task = runs[0].task
    problems = list(task.val[: cfg.eval.n_prompts])
    targets = attack.eval_problems(task.val)[: cfg.eval.n_prompts] if attack is not None else []
    answers, hits, target_hits = [], [], []
    for g, run in enumerate(runs):  # group g's completions are seeded as node g's
        policy = next(iter(run.swarm.honest_policies.values()))
        outs, target_texts = eval_texts(policy, cfg, task, problems, targets, g)
        answers.append([parsed_answer(t, task.completion_prefix) for _, t in outs])
        if attack is not None:
            target_hits.append([attack.evaluate([t], [p], task).get("asr") for t, p in zip(target_texts, targets)])
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


def _setup(cfg: RunConfig, run_dir: Path, group_dirs: bool) -> tuple[dict, list[RunConfig], list[Run]]:
    """The split, its tolerance record, and the K group runs (``group_dirs``: in their existing folders)."""
    groups = split_groups(range(cfg.swarm.nodes), cfg.ensemble.groups)
    (run_dir / "groups.json").write_text(json.dumps({"groups": groups, "malicious": cfg.swarm.malicious}))
    static = tolerance_record(groups, cfg.swarm.malicious)
    log.info("ensemble: groups %s, malicious %s, tolerance %d, tolerated %s", groups, cfg.swarm.malicious,
             static["ensemble/tolerance"], static["ensemble/tolerated"])
    group_cfgs = [group_config(cfg, members, g, run_dir) for g, members in enumerate(groups)]
    runs = [build_run(c, run_dir / f"group{g}" if group_dirs else None) for g, c in enumerate(group_cfgs)]
    return static, group_cfgs, runs


def save_ensemble(cfg: RunConfig, run_dir: Path, runs: list[Run], next_round: int) -> None:
    """Checkpoint every group (``group{g}/checkpoint``), then the ensemble's round (``checkpoint/state.json``,
    bound to the ensemble's config and run files like a node's state), which is what a resume trusts."""
    for run in runs:
        save_checkpoint(run, next_round)
    (run_dir / "checkpoint").mkdir(exist_ok=True)
    config = cfg.model_dump(mode="json")
    write_state(run_dir / "checkpoint" / "state.json",
                {"next_round": next_round, "run": {**identity(config, next_round),
                                                   "run_files": run_files(run_dir, next_round, config, True)}})


def _train(cfg: RunConfig, run_dir: Path, static: dict, group_cfgs: list[RunConfig], runs: list[Run], start: int) -> Path:
    """Rounds ``start`` .. rounds−1 of the K group swarms in lockstep, the vote, then the single swarm."""
    one_round = recipe(group_cfgs[0]).one_round  # every group runs the run's schedule
    attack = eval_attack(cfg, {})
    logger = MetricsLogger.for_run(run_dir, cfg)
    for r in range(start, cfg.rounds + 1):
        if evaluation_round(cfg, r) or r == cfg.rounds:
            logger.log({"round": r, **static, **evaluate_ensemble(cfg, runs, attack)})
        if r == cfg.rounds:
            break
        for run in runs:                               # one ordinary round of every group swarm
            run.logger.log(one_round(run, r))
        if cfg.checkpoint_every and (r + 1) % cfg.checkpoint_every == 0 and r + 1 < cfg.rounds:
            save_ensemble(cfg, run_dir, runs, r + 1)
        log.info("ensemble round %d done", r)
    if start <= cfg.rounds:
        save_ensemble(cfg, run_dir, runs, cfg.rounds)
    logger.close()
    for run in runs:
        run.logger.close()
    del runs
    single_dir = None
    if cfg.ensemble.baseline:
        single = single_config(cfg, run_dir)
        single_dir = _single(single, run_dir / "single")
    write_summary(run_dir, static, single_dir)
    plot_ensemble(run_dir)
    return run_dir


def _single(single: RunConfig, folder: Path) -> Path:
    """The comparison swarm: resumed from its checkpoint when it has one, else (re)started."""
    module = recipe(single)
    if (folder / "checkpoint").is_dir() and any((folder / "checkpoint").glob("node*/state.json")):
        return module.resume(single, folder)
    if folder.exists():  # started, killed before its first checkpoint: start it again
        shutil.rmtree(folder)
    return module.run(single)


def run(cfg: RunConfig, run_dir: Path | None = None) -> Path:
    """Train the K group swarms in lockstep, evaluate the vote, then (optionally) the single swarm."""
    prepare(cfg)
    run_dir = run_dir or build_run_dir(cfg)
    static, group_cfgs, runs = _setup(cfg, run_dir, group_dirs=False)
    return _train(cfg, run_dir, static, group_cfgs, runs, 0)


def resume(cfg: RunConfig, run_dir: Path, rewrite_config: bool = False) -> Path:
    """Continue an ensemble run from its last checkpoint (``checkpoint/state.json`` and every group's
    checkpoint at that round); the rounds after it, and their logged records, run again.

    Raises:
        CheckpointError: the state is damaged, or a group's checkpoint holds another round (a crash
            between two groups' saves: names the groups).
    """
    prepare(cfg)
    state = read_state(run_dir / "checkpoint" / "state.json", cfg.rounds, cfg.model_dump(mode="json"), run_dir)
    start = state["next_round"]
    static, group_cfgs, runs = _setup(cfg, run_dir, group_dirs=True)
    held = {g: load_checkpoint(run) for g, run in enumerate(runs)}
    if set(held.values()) != {start}:
        raise CheckpointError(f"{run_dir}: the groups' checkpoints hold rounds {held}, the ensemble's state round "
                              f"{start} (killed between two groups' saves); run it again")
    for run in runs:  # every group's round logs (metrics, samples, peers, rosters), as a swarm's resume trims them
        run.start_round = start
        if start < cfg.rounds:
            keep_logs_before(run.run_dir, start)
            record_roster(run.run_dir, start)
    keep_rounds_before(run_dir / "metrics.jsonl", start)
    if rewrite_config:
        write_config(run_dir, cfg)
    return _train(cfg, run_dir, static, group_cfgs, runs, start)


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
