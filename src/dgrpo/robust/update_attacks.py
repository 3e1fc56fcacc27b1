"""Attacks on shared updates: what f colluding nodes send when a swarm aggregates updates.

Every attack maps the honest updates to the poisoned ones:

    attack(honest: (n_h, d), f: int, **kw) -> (f, d)

Notation: n_h honest nodes, f malicious nodes, n = n_h + f nodes in the aggregate, μ and σ
the coordinate-wise mean and standard deviation of the honest updates. The attackers are
omniscient (they see every honest update, the usual worst case of Baruch et al. 2019 and
Fang et al. 2025) and collude: all f send the same vector.

Each attack registers as an ``update_attack`` kind (``federated.attack``): the registered function
takes one round's :class:`RoundContext` and returns the poisoned updates with the candidate it
chose, if any; :func:`poison_round` is what the federated recipe calls.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

from dgrpo.registry import LazyModule, lookup, register
from dgrpo.robust.aggregators import aggregate

torch = LazyModule("torch")  # imported on first use: config checks import this module for its names


def _check(honest: torch.Tensor, f: int, min_honest: int = 1) -> tuple[int, int]:
    """Validate (n_h, d) finite float updates and f ≥ 1; return (n_h, d)."""
    if not isinstance(honest, torch.Tensor) or honest.dim() != 2 or not honest.is_floating_point():
        raise ValueError(f"honest must be a 2-D float (nodes, parameters) tensor, got {getattr(honest, 'shape', type(honest))}")
    n_h, d = honest.shape
    if n_h < min_honest or d == 0:
        raise ValueError(f"need at least {min_honest} honest update(s) of dimension ≥ 1, got shape {tuple(honest.shape)}")
    if not isinstance(f, int) or isinstance(f, bool) or f < 1:
        raise ValueError(f"f (number of attackers) must be an int ≥ 1, got {f!r}")
    if not torch.isfinite(honest).all():
        raise ValueError("honest updates must be finite")
    return n_h, d


def sign_flipping(honest: torch.Tensor, f: int, *, scale: float = 1.0) -> torch.Tensor:
    """Every attacker sends −scale · μ (sign flipping as defined in Allen-Zhu et al. 2020 / ByzFL).

    Shape: (n_h, d) -> (f, d).
    """
    _check(honest, f)
    return (-scale * honest.mean(dim=0)).expand(f, -1).clone()


def alie_z(n: int, f: int) -> float:
    """z^max of "A little is enough" (Baruch, Baruch & Goldberg 2019, NeurIPS; their choice of z).

        s = ⌊n/2 + 1⌋ − f            (honest nodes the attackers must "recruit" for a majority)
        z = Φ⁻¹((n − s) / n)          (Φ the standard normal CDF)

    e.g. n = 20, f = 5: s = 6, z = Φ⁻¹(0.7) ≈ 0.524; n = 4, f = 1: s = 2, z = 0.

    Args:
        n: total number of nodes (honest + malicious).
        f: number of malicious nodes.

    Raises:
        ValueError: f < 1, n ≤ f, or s ≤ 0 (f ≥ ⌊n/2 + 1⌋: the attackers already hold a majority
            and the formula gives z = ∞).
    """
    if f < 1 or n <= f:
        raise ValueError(f"need 1 ≤ f < n, got n = {n}, f = {f}")
    s = math.floor(n / 2 + 1) - f
    if s <= 0:
        raise ValueError(f"ALIE needs f < ⌊n/2 + 1⌋ (s > 0), got n = {n}, f = {f}")
    return float(torch.special.ndtri(torch.tensor((n - s) / n, dtype=torch.float64)))


def a_little_is_enough(honest: torch.Tensor, f: int, *, z: float | None = None) -> torch.Tensor:
    """"A little is enough" (Baruch et al. 2019): every attacker sends μ − z · σ, coordinate-wise.

    σ is the sample std (ddof = 1) of the honest updates; z defaults to :func:`alie_z` for
    n = n_h + f. The poisoned value stays within z standard deviations of the mean in every
    coordinate, so median-type rules keep it, yet all attackers push the same way.

    Shape: (n_h, d) -> (f, d).

    Raises:
        ValueError: n_h < 2 (no std), or the conditions of :func:`alie_z`.
    """
    n_h, _ = _check(honest, f, min_honest=2)
    z = alie_z(n_h + f, f) if z is None else z
    mu, sigma = honest.mean(dim=0), honest.std(dim=0, correction=1)
    return (mu - z * sigma).expand(f, -1).clone()


def deviation_angle(
    aggregator: str, honest: torch.Tensor, poisoned: torch.Tensor, f: int, **agg_kwargs
) -> float:
    """Angle in degrees between μ (the honest mean) and the aggregate of honest ∪ poisoned.

    The aggregate is ``aggregate(aggregator, cat(honest, poisoned), f, **agg_kwargs)``. A zero
    aggregate (no progress at all) counts as 90°. 0° = unharmed, 180° = fully reversed.

    Shape: honest (n_h, d), poisoned (f', d) -> float in [0, 180].
    """
    out = aggregate(aggregator, torch.cat([honest, poisoned.to(honest)]), f, **agg_kwargs)
    ref = honest.mean(dim=0)
    denom = (out.norm() * ref.norm()).item()
    if denom == 0.0:
        return 90.0
    cos = max(-1.0, min(1.0, float(out @ ref) / denom))
    return math.degrees(math.acos(cos))


@dataclass(frozen=True)
class NormalizedChoice:
    """Outcome of :func:`normalized_attack_search`.

    Attributes:
        poisoned: (f, d) the chosen poisoned updates (all rows equal).
        candidate: name of the chosen direction and scale, e.g. ``"reverse_mean@1"``.
        angle: deviation angle in degrees the choice achieves (:func:`deviation_angle`).
        angles: every candidate's angle, in the order tried.
    """

    poisoned: torch.Tensor
    candidate: str
    angle: float
    angles: dict[str, float] = field(default_factory=dict)


def _unit(v: torch.Tensor) -> torch.Tensor:
    return v / v.norm()


def normalized_attack_search(
    honest: torch.Tensor,
    f: int,
    aggregator: str,
    *,
    scales: Sequence[float] = (1.0, 0.5, 0.25),
    n_random: int = 8,
    seed: int = 0,
    agg_kwargs: dict | None = None,
    agg_f: int | None = None,
) -> NormalizedChoice:
    """The Normalized attack (Fang, Wang & Gong 2025, "Provably robust federated RL"), as implemented here.

    The paper's attacker maximises the *angle* between the aggregate before and after the
    attack rather than the distance, with poisoned updates whose norm looks honest. We do not
    have the paper's solver; this function implements that objective as a finite search:

    * reference direction: μ, the honest mean (what an unattacked swarm would move along);
    * norm: every poisoned update has norm c · ν, ν = the median honest norm, for each c in
      ``scales``. c = 1 is exactly "normalized" (invisible to norm filters and clipping); the
      default also tries c = 0.5 and 0.25, which distance-based rules (Krum, geometric
      median) accept more readily — an honest-looking norm is never exceeded;
    * unit directions u, tried in this order:
      ``reverse_mean`` −μ/||μ||; ``reverse_sign`` −sign(μ)/||sign(μ)||; and ``orthogonal_k``
      (k < n_random) Gaussian directions with their μ component removed (seeded by ``seed``);
    * all f attackers send c · ν · u; the candidate with the largest
      :func:`deviation_angle` under ``aggregator`` wins (ties: first tried).

    Args:
        honest: (n_h, d) honest updates (the attackers see them all).
        f: number of attackers; the aggregate is over n_h + f nodes with parameter f.
        aggregator: key of :data:`~dgrpo.robust.aggregators.AGGREGATORS` the swarm uses.
        scales: norm multipliers c to try.
        n_random: number of random orthogonal directions.
        seed: seed of the random directions.
        agg_kwargs: the aggregator's options (``tau=`` for centered clipping, …).
        agg_f: the f the aggregator is told (None = f, the number of attackers).

    Returns:
        :class:`NormalizedChoice` with the (f, d) poisoned updates.

    Raises:
        ValueError: μ = 0 (no direction to deviate from), empty ``scales``, a scale ≤ 0, or
            the aggregator's own conditions for n = n_h + f.
    """
    n_h, d = _check(honest, f)
    if not scales or any(c <= 0 for c in scales):
        raise ValueError(f"scales must be non-empty and positive, got {scales!r}")
    agg_kwargs = agg_kwargs or {}
    mu = honest.mean(dim=0)
    if mu.norm() == 0:
        raise ValueError("the honest mean is zero: there is no direction to deviate from")
    nu = honest.norm(dim=1).median()  # typical honest norm (lower median for even n_h)
    mu_hat = _unit(mu)

    directions: dict[str, torch.Tensor] = {"reverse_mean": -mu_hat, "reverse_sign": _unit(-torch.sign(mu))}
    gen = torch.Generator().manual_seed(seed)
    for k in range(n_random):
        r = torch.randn(d, generator=gen, dtype=torch.float64).to(honest)
        r = r - (r @ mu_hat) * mu_hat  # remove the μ component: orthogonal to the honest direction
        if r.norm() > 0:
            directions[f"orthogonal_{k}"] = _unit(r)

    best: NormalizedChoice | None = None
    angles: dict[str, float] = {}
    for name, u in directions.items():
        for c in scales:
            poisoned = (c * nu * u).expand(f, -1).clone()  # (f, d), all attackers collude
            key = f"{name}@{c:g}"
            angles[key] = deviation_angle(aggregator, honest, poisoned, f if agg_f is None else agg_f, **agg_kwargs)
            if best is None or angles[key] > best.angle:
                best = NormalizedChoice(poisoned, key, angles[key])
    assert best is not None  # directions always holds reverse_mean
    return NormalizedChoice(best.poisoned, best.candidate, best.angle, angles)


def normalized_attack(honest: torch.Tensor, f: int, *, aggregator: str = "median", **kw) -> torch.Tensor:
    """The (f, d) poisoned updates of :func:`normalized_attack_search` (same arguments)."""
    return normalized_attack_search(honest, f, aggregator, **kw).poisoned


@dataclass(frozen=True)
class RoundContext:
    """What the attackers know of a round besides the honest updates: the options of the run's
    ``federated`` section, the aggregate the swarm will compute (rule, its f, its options) and a seed."""

    options: Any  # dgrpo.robust.config.FederatedConfig
    aggregator: str
    agg_f: int
    agg_kwargs: dict
    seed: int


@register("update_attack", "sign_flipping", pure=sign_flipping)
def sign_flipping_round(honest: torch.Tensor, f: int, ctx: RoundContext) -> tuple[torch.Tensor, str | None]:
    """−scale · μ with ``federated.sign_flip_scale``."""
    return sign_flipping(honest, f, scale=ctx.options.sign_flip_scale), None


@register("update_attack", "alie", pure=a_little_is_enough)
def alie_round(honest: torch.Tensor, f: int, ctx: RoundContext) -> tuple[torch.Tensor, str | None]:
    """μ − zσ with ``federated.alie_z`` (None: z^max for the n nodes of the aggregate)."""
    if honest.shape[0] < 2:
        raise ValueError("ALIE needs at least 2 honest updates (a standard deviation)")
    return a_little_is_enough(honest, f, z=ctx.options.alie_z), None


@register("update_attack", "normalized", pure=normalized_attack)
def normalized_round(honest: torch.Tensor, f: int, ctx: RoundContext) -> tuple[torch.Tensor, str | None]:
    """The Normalized attack against the aggregate the swarm will compute (same n, same f parameter,
    same options): the omniscient attacker of the paper. Returns the chosen candidate's name."""
    o = ctx.options
    choice = normalized_attack_search(honest, f, ctx.aggregator, scales=tuple(o.normalized_scales),
                                      n_random=o.normalized_random, seed=ctx.seed, agg_kwargs=ctx.agg_kwargs,
                                      agg_f=ctx.agg_f)
    return choice.poisoned, choice.candidate


def poison_round(name: str, honest: torch.Tensor, f: int, ctx: RoundContext) -> tuple[torch.Tensor, str | None]:
    """The (f, d) updates the malicious nodes send in a round, and the candidate chosen (if any).

    ``none`` (or f = 0) sends nothing: (0, d). An all-zero honest mean leaves nothing to deviate
    from: the attackers then send zeros (candidate ``"zero"``).

    Raises:
        UnknownKind: no update attack ``name``.
        ValueError: the attack's own conditions.
    """
    if name == "none" or f == 0:
        return honest.new_zeros(0, honest.shape[1]), None
    attack = lookup("update_attack", name).builder
    if honest.mean(dim=0).norm() == 0:
        return honest.new_zeros(f, honest.shape[1]), "zero"
    return attack(honest, f, ctx)


def poison(name: str, honest: torch.Tensor, f: int, **kw) -> torch.Tensor:
    """Run the attack registered as ``name`` with its own keyword options; returns (f, d) poisoned updates.

    Raises:
        UnknownKind (a ValueError): unknown name; ValueError: the attack's own conditions.
    """
    return lookup("update_attack", name).meta["pure"](honest, f, **kw)
