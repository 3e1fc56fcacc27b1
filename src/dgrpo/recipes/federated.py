"""A swarm that exchanges policy updates and aggregates them robustly (robust FRL, docs/robust.md).

One round (:func:`federated_round`), following the FRL protocol of Fang, Wang & Gong 2025 with the
vertical schedule of Alg. 2::

    L3-5  every honest node k picks B/m local prompts and samples G completions of each
    L6    k validates and rewards its own completions and takes a local GRPO step from θ_t: its
          update u_k is the parameter delta θ_k − θ_t (update=delta) or its clipped gradient
          (update=gradient)
    L7    the f malicious nodes send poisoned updates computed from all honest ones
          (omniscient, colluding: a registered update attack, dgrpo.robust.update_attacks)
    L8    all m updates are aggregated with the configured rule (dgrpo.robust.aggregators)
    L9    every honest node applies the aggregate: θ_{t+1} = θ_t + agg (delta), or one AdamW
          step with agg as the gradient (gradient)
    then  the round's metrics (dgrpo.robust.stats)

Honest nodes start from the same weights and apply the same aggregate, so their weights stay
identical: this process keeps one copy of the weights and gives each node its own optimizer
state (delta mode), which is exactly m separate copies at a fraction of the memory. With
``federated.lora`` only LoRA adapter weights (peft) are trained and travel.
"""

from __future__ import annotations

import logging
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch.nn.utils import parameters_to_vector

from dgrpo.config import RunConfig
from dgrpo.grpo.learner import Learner
from dgrpo.metrics.logger import MetricsLogger
from dgrpo.metrics.plots import plot_run
from dgrpo.policy.loading import load_policy
from dgrpo.policy.policy import Policy
from dgrpo.robust.aggregators import aggregate, aggregator_kwargs
from dgrpo.robust.plots import plot_federated
from dgrpo.robust.stats import probe_angles, update_stats
from dgrpo.robust.update_attacks import RoundContext, poison_round
from dgrpo.robust.updates import GradientCapture, add_lora, load_vector, set_gradient, stack_in_node_order
from dgrpo.swarm.schedule import vertical_prompts, vertical_slots
from dgrpo.training.loop import evaluation_round
from dgrpo.swarm.swarm import Swarm
from dgrpo.swarm.validation import Limits
from dgrpo.tasks.base import Task
from dgrpo.errors import CheckpointError
from dgrpo.training.build import build_run_dir, build_task, grpo_params, prepare, sampling_params
from dgrpo.training.checkpoint import load_state_folder, save_state_folder
from dgrpo.training.evaluate import evaluate
from dgrpo.training.resume import keep_logs_before, write_config

log = logging.getLogger(__name__)


@dataclass
class Federation:
    """Everything a federated run holds (what :func:`dgrpo.training.evaluate.evaluate` reads of a run:
    cfg, task, swarm)."""

    cfg: RunConfig
    run_dir: Path
    task: Task
    policy: Policy
    swarm: Swarm
    params: list[torch.Tensor]                 # trainable parameters, in flattening order
    learners: dict[int, Learner]               # honest node → its learner (own optimizer state)
    server: torch.optim.Optimizer | None       # update=gradient: the step applying the aggregate
    logger: MetricsLogger
    honest: list[int]
    malicious: list[int]
    previous: torch.Tensor | None = None       # last aggregate (centered clipping's reference)

    @property
    def f_agg(self) -> int:
        f = self.cfg.federated.f
        return len(self.malicious) if f is None else f


@dataclass
class RoundUpdates:
    """The tensors of one round: honest (n_h, d), poisoned (f, d), all (n, d) in node order, aggregate (d,)."""

    honest: torch.Tensor
    poisoned: torch.Tensor
    stacked: torch.Tensor
    aggregate: torch.Tensor
    record: dict = field(default_factory=dict)


def build_federation(cfg: RunConfig, run_dir: Path | None = None, task: Task | None = None) -> Federation:
    """Seed, run dir, task (the config's unless given), one shared copy of the weights (LoRA-wrapped
    if asked), a learner per honest node."""
    prepare(cfg)
    run_dir = run_dir or build_run_dir(cfg)
    task = task if task is not None else build_task(cfg)
    fed = cfg.federated
    model, tokenizer = load_policy(cfg.model.name, cfg.model.dtype, trainable=True, device=cfg.model.device)
    if fed.lora:
        model = add_lora(model, fed.lora_rank, fed.lora_alpha, fed.lora_targets)
    params = [p for p in model.parameters() if p.requires_grad]
    policy = Policy(cfg.model.name, model, tokenizer, sampling_params(cfg))
    malicious = sorted(cfg.swarm.malicious)
    honest = [k for k in range(cfg.swarm.nodes) if k not in malicious]
    learners = {}
    for k in honest:
        learners[k] = Learner(model, grpo_params(cfg), tokenizer.eos_token_id, tokenizer.pad_token_id)
        if fed.update == "gradient":
            learners[k].optimizer = GradientCapture(params)
    server = None
    if fed.update == "gradient":
        server = torch.optim.AdamW(params, lr=cfg.grpo.lr, weight_decay=cfg.grpo.weight_decay)
    swarm = Swarm(task, {k: policy for k in honest}, {}, {}, {}, {}, cfg.seed, cfg.swarm.group_size,
                  Limits.for_completions(cfg.sampling.max_new_tokens), "vertical")
    log.info("federated run: %d trainable parameters (%s), aggregator %s, attack %s", sum(p.numel() for p in params),
             "LoRA" if fed.lora else "all", fed.aggregator, fed.attack)
    return Federation(cfg, run_dir, task, policy, swarm, params, learners, server,
                      MetricsLogger.for_run(run_dir, cfg), honest, malicious)


def apply_aggregate(fed: Federation, theta0: torch.Tensor, agg: torch.Tensor) -> None:
    """L9: θ_{t+1} = θ_t + agg (delta), or an AdamW step with agg as the gradient (gradient)."""
    if fed.server is None:
        load_vector(theta0 + agg, fed.params)
        return
    load_vector(theta0, fed.params)
    set_gradient(agg, fed.params)
    fed.server.step()
    fed.server.zero_grad(set_to_none=True)


def federated_round(fed: Federation, round_idx: int) -> RoundUpdates:
    """One round of update exchange (module docstring, L3-L9); returns its tensors and metrics."""
    cfg, fcfg = fed.cfg, fed.cfg.federated
    per_node = cfg.swarm.prompts_per_round // cfg.swarm.nodes
    t0 = time.perf_counter()
    slots = {k: vertical_slots(vertical_prompts(fed.task.train, per_node, cfg.seed, round_idx, k), cfg.swarm.group_size)
             for k in fed.honest}                                              # L3-4: local prompts
    written = fed.swarm.write(slots, round_idx)                                # L5: G completions each
    t1 = time.perf_counter()
    theta0 = parameters_to_vector(fed.params).detach().clone()
    previous = fed.previous
    updates, rec = [], {"round": round_idx}
    rewards_all, grad_norms = [], []
    for k in fed.honest:                                                       # L6: local step on own data
        rollouts = fed.swarm.receive(fed.policy, written.get(k, []), round_idx).rollouts  # validate
        fed.swarm.reward(rollouts)                                             #   rewards
        rewards = [r.reward for r in rollouts]
        rec[f"train/reward/node{k}"] = statistics.fmean(rewards) if rewards else None
        rewards_all += rewards
        load_vector(theta0, fed.params)
        learner = fed.learners[k]
        if fcfg.update == "gradient":
            learner.optimizer.vector = None
        stats = learner.step(rollouts)                                         #   advantages, step
        grad_norms.append(stats.grad_norm)
        if fcfg.update == "gradient":
            vec = learner.optimizer.vector
            updates.append(vec if vec is not None else torch.zeros_like(theta0))
        else:
            updates.append(parameters_to_vector(fed.params).detach() - theta0)
    load_vector(theta0, fed.params)
    honest = torch.stack(updates)                                              # (n_h, d)
    t2 = time.perf_counter()
    kw = aggregator_kwargs(fcfg.aggregator, fcfg, honest, previous)
    seed = cfg.seed * 100003 + round_idx
    poisoned, candidate = poison_round(fcfg.attack, honest, len(fed.malicious),
                                       RoundContext(fcfg, fcfg.aggregator, fed.f_agg, kw, seed))  # L7
    t3 = time.perf_counter()
    stacked = stack_in_node_order(honest, poisoned, fed.honest, fed.malicious)  # (n, d)
    agg = aggregate(fcfg.aggregator, stacked, fed.f_agg, **kw)                # L8
    apply_aggregate(fed, theta0, agg)                                          # L9
    t4 = time.perf_counter()
    fed.previous = agg.detach().clone()
    rec["train/reward_honest"] = statistics.fmean(rewards_all) if rewards_all else None  # metrics
    rec["train/grad_norm"] = statistics.fmean(grad_norms)
    rec.update(update_stats(honest, poisoned, agg))
    if candidate is not None:
        rec["fed/normalized_candidate"] = candidate
    if fcfg.probe:
        rec.update(probe_angles(honest, max(1, len(fed.malicious)), fcfg, previous, seed))
    rec.update({"time/generate": round(t1 - t0, 3), "time/local_update": round(t2 - t1, 3),
                "time/attack": round(t3 - t2, 3), "time/aggregate": round(t4 - t3, 3), "time/round": round(t4 - t0, 3)})
    return RoundUpdates(honest, poisoned, stacked, agg, rec)


def _optimizers(fed: Federation) -> dict:
    """The optimizer states a federated checkpoint holds: each honest node's AdamW (delta), or the
    server's step (gradient; the nodes' gradient captures hold none)."""
    if fed.server is not None:
        return {"server": fed.server}
    return {f"optimizer{k}": learner.optimizer for k, learner in fed.learners.items()}


def save(fed: Federation, next_round: int) -> None:
    """Checkpoint ``run_dir/checkpoint/state/``: the shared trainable parameters, the last aggregate,
    the optimizer states and the RNG states (dgrpo.training.checkpoint.save_state_folder)."""
    tensors = {"params": parameters_to_vector(fed.params).detach()}
    if fed.previous is not None:
        tensors["previous"] = fed.previous
    save_state_folder(fed.run_dir / "checkpoint", tensors, _optimizers(fed), next_round, fed.cfg.model_dump(mode="json"))


def _train(fed: Federation, start: int) -> Path:
    cfg, samples = fed.cfg, fed.run_dir / "samples.jsonl"
    for r in range(start, cfg.rounds):
        rec = evaluate(fed, r, samples) if evaluation_round(cfg, r) else {}
        out = federated_round(fed, r)
        rec.update(out.record)
        fed.logger.log(rec)
        log.info("round %d: reward %.3f, angle %s", r, rec.get("train/reward_honest") or 0.0, rec.get("fed/angle"))
        if cfg.checkpoint_every and (r + 1) % cfg.checkpoint_every == 0 and r + 1 < cfg.rounds:
            save(fed, r + 1)
    if start < cfg.rounds or not (fed.run_dir / "metrics.jsonl").exists():
        fed.logger.log({"round": cfg.rounds, **evaluate(fed, cfg.rounds, samples)})
    save(fed, cfg.rounds)
    fed.logger.close()
    plot_run(fed.run_dir)
    plot_federated(fed.run_dir)
    return fed.run_dir


def run(cfg: RunConfig, run_dir: Path | None = None) -> Path:
    """Train a federated swarm for ``cfg.rounds`` rounds; evaluate every ``eval.every`` rounds and at the end."""
    return _train(build_federation(cfg, run_dir), 0)


def resume(cfg: RunConfig, run_dir: Path, rewrite_config: bool = False) -> Path:
    """Continue a federated run from ``checkpoint/state/``; the rounds after it run again.

    Raises:
        CheckpointError: a damaged or mismatched checkpoint file (named).
    """
    fed = build_federation(cfg, run_dir)
    start, tensors = load_state_folder(run_dir / "checkpoint", cfg.rounds, _optimizers(fed), cfg.model_dump(mode="json"))
    size = sum(p.numel() for p in fed.params)
    if tensors.get("params") is None or tensors["params"].shape != (size,) or \
            ("previous" in tensors and tensors["previous"].shape != (size,)):
        raise CheckpointError(f"{run_dir / 'checkpoint' / 'state' / 'tensors.safetensors'}: does not hold {size} "
                              "trainable parameters (another model or federated.lora setting?)")
    load_vector(tensors["params"], fed.params)
    fed.previous = tensors.get("previous")
    if start < cfg.rounds:
        keep_logs_before(run_dir, start)
    if rewrite_config:
        write_config(run_dir, cfg)
    return _train(fed, start)
