"""A swarm that exchanges policy updates and aggregates them robustly (robust FRL, MISSION §5).

One round (``federated_round``), following the FRL protocol of Fang, Wang & Gong 2025 with the
vertical schedule of Alg. 2:

    L3-5  every honest node k picks B/m local prompts and samples G completions of each
    L6    k rewards its own completions and takes a local GRPO step from θ_t: its update u_k is
          the parameter delta θ_k − θ_t (update=delta) or its clipped gradient (update=gradient)
    L7    the f malicious nodes send poisoned updates computed from all honest ones
          (omniscient, colluding: Normalized / sign flipping / ALIE)
    L8    all m updates are aggregated with the configured rule
    L9    every honest node applies the aggregate: θ_{t+1} = θ_t + agg (delta), or one AdamW
          step with agg as the gradient (gradient)

Honest nodes start from the same weights and apply the same aggregate, so their weights stay
identical: this process keeps one copy of the weights and gives each node its own optimizer
state (delta mode), which is exactly m separate copies at a fraction of the memory. With
``federated.lora`` only LoRA adapter weights (peft) are trained and travel.
"""

from __future__ import annotations

import logging
import math
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch.nn.utils import parameters_to_vector

from dgrpo.config import RunConfig
from dgrpo.experiments.rounds import evaluate
from dgrpo.experiments.setup import build_run_dir, build_task, grpo_params, seed_everything
from dgrpo.grpo.learner import Learner
from dgrpo.metrics.logger import MetricsLogger
from dgrpo.metrics.plots import plot_run
from dgrpo.policy.loading import load_policy
from dgrpo.policy.policy import Policy
from dgrpo.policy.sampling import SamplingParams
from dgrpo.robust.aggregators import AGGREGATORS, aggregate
from dgrpo.robust.plots import plot_federated
from dgrpo.robust.update_attacks import a_little_is_enough, normalized_attack_search, sign_flipping
from dgrpo.swarm.schedule import vertical_prompts, vertical_slots
from dgrpo.swarm.swarm import Swarm
from dgrpo.swarm.validation import Limits
from dgrpo.tasks.base import Task

log = logging.getLogger(__name__)

UPDATE_ATTACK_NAMES = ("normalized", "sign_flipping", "alie")


class GradientCapture:
    """Stands in for a node's optimizer when updates are gradients: ``step`` records the
    (already clipped) gradient of the trainable parameters instead of moving them."""

    def __init__(self, params: list[torch.Tensor]):
        self.params = params
        self.vector: torch.Tensor | None = None

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None

    def step(self) -> None:
        self.vector = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).detach().reshape(-1)
                                 for p in self.params])


@torch.no_grad()
def load_vector(vec: torch.Tensor, params: list[torch.Tensor]) -> None:
    """Copy a flat vector into the parameters, in place.

    (``torch.nn.utils.vector_to_parameters`` rebinds ``param.data`` to views of ``vec``, so a later
    in-place optimizer step would write into ``vec`` itself — here θ_t, which must stay intact.)
    """
    offset = 0
    for p in params:
        p.copy_(vec[offset: offset + p.numel()].view_as(p))
        offset += p.numel()
    if offset != vec.numel():
        raise ValueError(f"vector has {vec.numel()} entries, parameters {offset}")


def add_lora(model, rank: int, alpha: float, targets: list[str]):
    """Wrap ``model`` with peft LoRA adapters on ``targets``; only adapter weights stay trainable."""
    from peft import LoraConfig, get_peft_model

    return get_peft_model(model, LoraConfig(r=rank, lora_alpha=alpha, target_modules=list(targets),
                                            lora_dropout=0.0, bias="none"))


@dataclass
class Federation:
    """Everything a federated run holds (duck-types :class:`dgrpo.experiments.setup.Run` for ``evaluate``)."""

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
    seed_everything(cfg.seed)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    run_dir = run_dir or build_run_dir(cfg)
    task = task if task is not None else build_task(cfg)
    fed = cfg.federated
    model, tokenizer = load_policy(cfg.model.name, cfg.model.dtype, trainable=True)
    if fed.lora:
        model = add_lora(model, fed.lora_rank, fed.lora_alpha, fed.lora_targets)
    params = [p for p in model.parameters() if p.requires_grad]
    sampling = SamplingParams(cfg.sampling.top_k, cfg.sampling.temperature, cfg.sampling.max_new_tokens)
    policy = Policy(cfg.model.name, model, tokenizer, sampling, None)
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
    max_tokens = max(256, 4 * cfg.sampling.max_new_tokens)
    swarm = Swarm(task, {k: policy for k in honest}, {}, {}, {}, cfg.seed, cfg.swarm.group_size,
                  Limits(max_chars=max(8192, 16 * max_tokens), max_tokens=max_tokens), "vertical")
    log.info("federated run: %d trainable parameters (%s), aggregator %s, attack %s", sum(p.numel() for p in params),
             "LoRA" if fed.lora else "all", fed.aggregator, fed.attack)
    return Federation(cfg, run_dir, task, policy, swarm, params, learners, server,
                      MetricsLogger(run_dir, cfg.tensorboard), honest, malicious)


# ---------------------------------------------------------------------------------------- pieces
def aggregator_kwargs(name: str, fed_cfg, honest: torch.Tensor, previous: torch.Tensor | None) -> dict:
    """The rule's own options for this round (centered clipping's τ and reference, Multi-Krum's m)."""
    if name == "centered_clipping":
        tau = fed_cfg.cc_tau
        if tau is None:  # median norm of the honest updates that moved (a zero update says nothing about scale)
            norms = honest.norm(dim=1)
            tau = float(norms[norms > 0].median()) if bool((norms > 0).any()) else 1e-12
        return {"tau": tau, "reference": previous, "iterations": fed_cfg.cc_iterations}
    if name == "multi_krum" and fed_cfg.multi_krum_m is not None:
        return {"m": fed_cfg.multi_krum_m}
    return {}


def poison_updates(attack: str, honest: torch.Tensor, f: int, aggregator: str, f_agg: int, agg_kw: dict,
                   fed_cfg, seed: int) -> tuple[torch.Tensor, str | None]:
    """The (f, d) updates the malicious nodes send, and the Normalized attack's chosen candidate.

    An all-zero honest mean leaves nothing to deviate from: the attackers then send zeros.
    """
    mu = honest.mean(dim=0)
    if attack == "none" or f == 0:
        return honest.new_zeros(0, honest.shape[1]), None
    if mu.norm() == 0:
        return honest.new_zeros(f, honest.shape[1]), "zero"
    if attack == "sign_flipping":
        return sign_flipping(honest, f, scale=fed_cfg.sign_flip_scale), None
    if attack == "alie":
        if honest.shape[0] < 2:
            raise ValueError("ALIE needs at least 2 honest updates (a standard deviation)")
        z = fed_cfg.alie_z
        if z is None:  # z^max for the n nodes of the aggregate
            from dgrpo.robust.update_attacks import alie_z

            z = alie_z(honest.shape[0] + f, f)
        return a_little_is_enough(honest, f, z=z), None
    if attack == "normalized":
        # The attacker evaluates its candidates against the aggregate the swarm will compute
        # (same n, same f parameter, same options): the omniscient attacker of the paper.
        choice = normalized_attack_search(honest, f, aggregator, scales=tuple(fed_cfg.normalized_scales),
                                          n_random=fed_cfg.normalized_random, seed=seed, agg_kwargs=agg_kw,
                                          agg_f=f_agg)
        return choice.poisoned, choice.candidate
    raise ValueError(f"unknown update attack {attack!r}")


def stack_in_node_order(honest: torch.Tensor, poisoned: torch.Tensor, honest_ids: list[int], malicious_ids: list[int]) -> torch.Tensor:
    """(n, d): row i is node i's update (honest rows from ``honest``, malicious from ``poisoned``)."""
    rows = {k: honest[i] for i, k in enumerate(honest_ids)}
    rows.update({k: poisoned[i] for i, k in enumerate(malicious_ids)})
    return torch.stack([rows[k] for k in sorted(rows)])


def cosine(a: torch.Tensor, b: torch.Tensor) -> float | None:
    """cos(a, b) in float64 (angles near 0° need it), None when either is zero."""
    a, b = a.double(), b.double()
    denom = float(a.norm() * b.norm())
    return None if denom == 0 else max(-1.0, min(1.0, float(a @ b) / denom))


def update_stats(honest: torch.Tensor, poisoned: torch.Tensor, agg: torch.Tensor) -> dict:
    """Norms and angles of a round's updates (namespace ``fed/``)."""
    mu = honest.mean(dim=0)
    norms = honest.norm(dim=1)
    rec = {"fed/honest_norm": float(norms.mean()), "fed/honest_mean_norm": float(mu.norm()),
           "fed/aggregate_norm": float(agg.norm()), "fed/zero_updates": int((norms == 0).sum())}
    pair = [cosine(honest[i], honest[j]) for i in range(len(honest)) for j in range(i + 1, len(honest))]
    pair = [c for c in pair if c is not None]
    rec["fed/honest_pairwise_cos"] = statistics.fmean(pair) if pair else None
    if len(poisoned):
        rec["fed/poisoned_norm"] = float(poisoned.norm(dim=1).mean())
    cos = cosine(agg, mu)
    if cos is None and float(mu.norm()) > 0:  # a zero aggregate makes no progress: 90° (as deviation_angle)
        cos = 0.0
    rec["fed/cos_aggregate_honest_mean"] = cos
    rec["fed/angle"] = None if cos is None else math.degrees(math.acos(cos))
    # progress along the honest direction relative to the unattacked honest mean (1 = FedAvg of honest nodes)
    mu64 = mu.double()
    rec["fed/progress"] = None if float(mu.norm()) == 0 else float(agg.double() @ mu64) / float(mu64 @ mu64)
    return rec


def probe_angles(honest: torch.Tensor, f: int, fed_cfg, previous: torch.Tensor | None, seed: int) -> dict:
    """Deviation angle of every applicable aggregator under every update attack, on these honest updates."""
    rec = {}
    if f == 0 or float(honest.mean(dim=0).norm()) == 0:
        return rec
    n = honest.shape[0] + f
    for name in AGGREGATORS:
        if (name == "trimmed_mean" and n <= 2 * f) or (name in ("krum", "multi_krum") and n <= 2 * f + 2):
            continue
        kw = aggregator_kwargs(name, fed_cfg, honest, previous)
        mu = honest.mean(dim=0)
        for attack in UPDATE_ATTACK_NAMES:
            try:
                poisoned, _ = poison_updates(attack, honest, f, name, f, kw, fed_cfg, seed)
            except ValueError:  # e.g. ALIE with one honest node
                continue
            agg = aggregate(name, torch.cat([honest, poisoned]), f, **kw)
            cos = cosine(agg, mu)
            rec[f"probe/{name}/{attack}/angle"] = 90.0 if cos is None else math.degrees(math.acos(cos))
    return rec


def apply_aggregate(fed: Federation, theta0: torch.Tensor, agg: torch.Tensor) -> None:
    """L9: θ_{t+1} = θ_t + agg (delta), or an AdamW step with agg as the gradient (gradient)."""
    if fed.server is None:
        load_vector(theta0 + agg, fed.params)
        return
    load_vector(theta0, fed.params)
    offset = 0
    for p in fed.params:
        p.grad = agg[offset: offset + p.numel()].view_as(p).clone()
        offset += p.numel()
    fed.server.step()
    fed.server.zero_grad(set_to_none=True)


# ----------------------------------------------------------------------------------------- round
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
        rollouts = fed.swarm.receive(fed.policy, written.get(k, []), round_idx).rollouts
        rewards = [r.reward for r in rollouts]
        rec[f"train/reward/node{k}"] = statistics.fmean(rewards) if rewards else None
        rewards_all += rewards
        load_vector(theta0, fed.params)
        learner = fed.learners[k]
        if fcfg.update == "gradient":
            learner.optimizer.vector = None
        stats = learner.step(rollouts)
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
    poisoned, candidate = poison_updates(fcfg.attack, honest, len(fed.malicious), fcfg.aggregator, fed.f_agg, kw,
                                         fcfg, cfg.seed * 100003 + round_idx)  # L7
    t3 = time.perf_counter()
    stacked = stack_in_node_order(honest, poisoned, fed.honest, fed.malicious)  # (n, d)
    agg = aggregate(fcfg.aggregator, stacked, fed.f_agg, **kw)                # L8
    apply_aggregate(fed, theta0, agg)                                          # L9
    t4 = time.perf_counter()
    fed.previous = agg.detach().clone()
    rec["train/reward_honest"] = statistics.fmean(rewards_all) if rewards_all else None
    rec["train/grad_norm"] = statistics.fmean(grad_norms)
    rec.update(update_stats(honest, poisoned, agg))
    if candidate is not None:
        rec["fed/normalized_candidate"] = candidate
    if fcfg.probe:
        rec.update(probe_angles(honest, max(1, len(fed.malicious)), fcfg, previous, cfg.seed * 100003 + round_idx))
    rec.update({"time/generate": round(t1 - t0, 3), "time/local_update": round(t2 - t1, 3),
                "time/attack": round(t3 - t2, 3), "time/aggregate": round(t4 - t3, 3), "time/round": round(t4 - t0, 3)})
    return RoundUpdates(honest, poisoned, stacked, agg, rec)


def run(cfg: RunConfig, run_dir: Path | None = None) -> Path:
    """Train a federated swarm for ``cfg.rounds`` rounds; evaluate every ``eval.every`` rounds and at the end."""
    fed = build_federation(cfg, run_dir)
    samples = fed.run_dir / "samples.jsonl"
    for r in range(cfg.rounds):
        rec = evaluate(fed, r, samples) if r % cfg.eval.every == 0 else {}
        out = federated_round(fed, r)
        rec.update(out.record)
        fed.logger.log(rec)
        log.info("round %d: reward %.3f, angle %s", r, rec.get("train/reward_honest") or 0.0, rec.get("fed/angle"))
    fed.logger.log({"round": cfg.rounds, **evaluate(fed, cfg.rounds, samples)})
    fed.logger.close()
    plot_run(fed.run_dir)
    plot_federated(fed.run_dir)
    return fed.run_dir
