"""Construct everything a run needs from its config, in dependency order (``build_*``)."""

from __future__ import annotations

import logging
import random
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import yaml

from dgrpo.attacks import build_attack
from dgrpo.config import ModelConfig, RunConfig
from dgrpo.defenses import build_defense
from dgrpo.grpo.learner import GRPOParams, Learner
from dgrpo.metrics.logger import MetricsLogger
from dgrpo.policy.loading import load_policy
from dgrpo.policy.policy import Policy
from dgrpo.policy.sampling import SamplingParams
from dgrpo.swarm.swarm import Swarm
from dgrpo.swarm.transport import InProcessTransport, Transport
from dgrpo.swarm.validation import Limits
from dgrpo.tasks import TASKS, Task

log = logging.getLogger(__name__)


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (sampling does not depend on these: it uses per-completion seeds)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def run_name(cfg: RunConfig) -> str:
    """``{task}__{attack}__{defenses}__seed{n}__{time}`` (STYLE.md §7)."""
    defenses = "+".join(d.kind for d in cfg.defenses) or "nodefense"
    return f"{cfg.task.kind}__{cfg.attack.kind}__{defenses}__seed{cfg.seed}__{time.strftime('%Y%m%d-%H%M%S')}"


def build_run_dir(cfg: RunConfig) -> Path:
    """Create the run directory and write the resolved config into it.

    Raises:
        FileExistsError: the directory already holds a run (metrics.jsonl).
    """
    run_dir = Path(cfg.out_dir) / (cfg.name or run_name(cfg))
    if (run_dir / "metrics.jsonl").exists():
        raise FileExistsError(f"{run_dir} already holds a run; pick another name or use `dgrpo resume`")
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
    return run_dir


def build_task(cfg: RunConfig) -> Task:
    """The task of the run (its config minus ``kind``; a generator seed defaults to the run seed)."""
    args = cfg.task.model_dump(exclude={"kind"})
    if cfg.task.kind in ("arithmetic", "python_math") and args.get("seed") is None:
        args["seed"] = cfg.seed
    return TASKS[cfg.task.kind](**args)


def grpo_params(cfg: RunConfig) -> GRPOParams:
    g = cfg.grpo
    return GRPOParams(loss_type=g.loss_type, scale_rewards=g.scale_rewards, beta=g.beta, lr=g.lr,
                      weight_decay=g.weight_decay, max_grad_norm=g.max_grad_norm, num_iterations=g.num_iterations,
                      epsilon=g.epsilon, max_len=cfg.sampling.max_new_tokens, reject_mode=cfg.swarm.reject_mode)


def build_policy(model_cfg: ModelConfig, cfg: RunConfig, trainable: bool) -> Policy:
    """Load one model; attach a learner (and a reference model when β > 0) if it is trained."""
    sampling = SamplingParams(cfg.sampling.top_k, cfg.sampling.temperature, cfg.sampling.max_new_tokens)
    model, tokenizer = load_policy(model_cfg.name, model_cfg.dtype, trainable=trainable)
    learner = None
    if trainable:
        ref = load_policy(model_cfg.name, model_cfg.dtype, trainable=False)[0] if cfg.grpo.beta > 0 else None
        learner = Learner(model, grpo_params(cfg), tokenizer.eos_token_id, tokenizer.pad_token_id, ref)
    return Policy(model_cfg.name, model, tokenizer, sampling, learner)


def build_swarm(cfg: RunConfig, task: Task, local_nodes: list[int] | None = None) -> Swarm:
    """Policies, attacks and defenses of the nodes this process hosts (all nodes by default).

    Homogeneous: one trained policy shared by every honest node; attackers hold the same object
    (the paper's attacker may know the weights) but never update it (an attacker alone in its
    process mirrors the honest update instead). Heterogeneous: one policy per node, loaded from
    ``swarm.models``.
    """
    nodes = local_nodes if local_nodes is not None else list(range(cfg.swarm.nodes))
    malicious = set(cfg.swarm.malicious)
    policies, attacker_policies, attacks = {}, {}, {}
    if cfg.swarm.models is None:
        # Trained even when this process hosts only attackers (a distributed rank): the attacker
        # knows the weights, so it replays the honest update (Swarm.mirror_policies).
        shared = build_policy(cfg.model, cfg, trainable=True)
        for n in nodes:
            (attacker_policies if n in malicious else policies)[n] = shared
    else:
        for n in nodes:
            policy = build_policy(cfg.swarm.models[n], cfg, trainable=n not in malicious)
            (attacker_policies if n in malicious else policies)[n] = policy
    for n in nodes:
        if n in malicious:
            attacks[n] = build_attack(cfg.attack, cfg)
    defenses = {}
    distinct = {id(p): (n, p) for n, p in sorted(policies.items(), reverse=True)}
    for n, p in attacker_policies.items():  # a mirror runs the honest defenses too: same update
        if p.learner is not None and id(p) not in distinct:
            distinct[id(p)] = (n, p)
    for owner, policy in distinct.values():
        defenses[owner] = [build_defense(d, cfg, policy, task) for d in cfg.defenses]
    # Size limits protect the receiver (memory, time); they are not a defense, so they leave room
    # for completions longer than an honest node could sample (replay checks that rule).
    max_tokens = max(256, 4 * cfg.sampling.max_new_tokens)
    limits = Limits(max_chars=max(8192, 16 * max_tokens), max_tokens=max_tokens)
    return Swarm(task, policies, attacks, attacker_policies, defenses, cfg.seed, cfg.swarm.group_size, limits,
                 cfg.swarm.mode)


def build_transport(cfg: RunConfig) -> Transport:
    """In-process (default) or torch.distributed transport."""
    if cfg.swarm.transport == "inprocess":
        return InProcessTransport()
    from dgrpo.swarm.distributed import DistributedTransport

    return DistributedTransport.from_env(cfg)


@dataclass
class Run:
    """Everything a running experiment holds."""

    cfg: RunConfig
    run_dir: Path
    task: Task
    swarm: Swarm
    transport: Transport
    logger: MetricsLogger
    start_round: int = 0


def build_run(cfg: RunConfig, run_dir: Path | None = None) -> Run:
    """Set up a run: seed, threads, run dir, task, swarm, transport, metrics logger."""
    seed_everything(cfg.seed)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    transport = build_transport(cfg)
    if run_dir is None and cfg.name is None and cfg.swarm.transport == "distributed":
        cfg = cfg.model_copy(update={"name": transport.agree("name", run_name(cfg))})  # ranks start at different seconds
    fresh = run_dir is None
    run_dir = run_dir or build_run_dir(cfg)
    try:
        task = build_task(cfg)
        local = getattr(transport, "local_nodes", None)
        swarm = build_swarm(cfg, task, local)
    except BaseException:
        if fresh and not (run_dir / "metrics.jsonl").exists():  # nothing was run: leave no empty run directory
            shutil.rmtree(run_dir, ignore_errors=True)
        raise
    if cfg.swarm.transport == "distributed":
        transport.labels = swarm.labels  # simulation ground truth travels beside the messages (metrics only)
    return Run(cfg, run_dir, task, swarm, transport, MetricsLogger(run_dir, cfg.tensorboard))
