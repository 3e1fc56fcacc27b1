"""Norms and angles of one round's updates in a federated swarm (metrics ``fed/…`` and ``probe/…``)."""

from __future__ import annotations

import math
import statistics

import torch

from dgrpo.registry import names
from dgrpo.robust.aggregators import aggregate, aggregator_kwargs, fits
from dgrpo.robust.update_attacks import RoundContext, poison_round


def cosine(a: torch.Tensor, b: torch.Tensor) -> float | None:
    """cos(a, b) in float64 (angles near 0° need it), None when either is zero."""
    a, b = a.double(), b.double()
    denom = float(a.norm() * b.norm())
    return None if denom == 0 else max(-1.0, min(1.0, float(a @ b) / denom))


def update_stats(honest: torch.Tensor, poisoned: torch.Tensor, agg: torch.Tensor) -> dict:
    """Norms and angles of a round's updates: honest (n_h, d), poisoned (f, d), aggregate (d,)."""
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
    """Deviation angle of every registered aggregator that fits n = n_h + f under every registered
    update attack, on these honest updates (f attackers, each rule told f)."""
    rec = {}
    if f == 0 or float(honest.mean(dim=0).norm()) == 0:
        return rec
    n = honest.shape[0] + f
    mu = honest.mean(dim=0)
    for name in names("aggregator"):
        if not fits(name, n, f):
            continue
        kw = aggregator_kwargs(name, fed_cfg, honest, previous)
        for attack in names("update_attack"):
            try:
                poisoned, _ = poison_round(attack, honest, f, RoundContext(fed_cfg, name, f, kw, seed))
            except ValueError:  # e.g. ALIE with one honest node
                continue
            cos = cosine(aggregate(name, torch.cat([honest, poisoned]), f, **kw), mu)
            rec[f"probe/{name}/{attack}/angle"] = 90.0 if cos is None else math.degrees(math.acos(cos))
    return rec
