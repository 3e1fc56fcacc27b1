"""Byzantine-robust aggregation of shared updates (robust FRL: Fang, Wang & Gong 2025; docs/robust.md).

Every rule maps the stacked updates of n nodes to one update:

    aggregator(updates: (n, d), f: int, **kw) -> (d,)

Notation: n nodes, d parameters, f = the number of Byzantine (malicious) nodes the rule must
tolerate, x_i = updates[i]. Rules that do not need f (average, median) accept it and ignore it
so that every entry of :data:`AGGREGATORS` has the same call shape. Each rule registers as an
``aggregator`` kind (``federated.aggregator``) with the node condition it needs (``fits``, ``needs``)
and, where it has any, the options it takes in a round of the federated recipe (``options``).

Only swarms that exchange updates (gradients, weight deltas, LoRA deltas) need these; the
paper's swarm exchanges strings only. Callers should drop non-finite updates
before aggregating (a NaN is trivially rejected); :func:`aggregate` raises on them instead of
letting one NaN silently poison a sort.
"""

from __future__ import annotations

from typing import Callable

from dgrpo.registry import LazyModule, Table, lookup, register

torch = LazyModule("torch")  # imported on first use: config checks import this module for its names
Aggregator = Callable[..., "torch.Tensor"]


def _check(updates: torch.Tensor, f: int) -> tuple[int, int]:
    """Validate an (n, d) float tensor and 0 ≤ f < n; return (n, d)."""
    if not isinstance(updates, torch.Tensor) or updates.dim() != 2:
        raise ValueError(f"updates must be a 2-D (nodes, parameters) tensor, got {getattr(updates, 'shape', type(updates))}")
    if not updates.is_floating_point():
        raise ValueError(f"updates must be floating point, got {updates.dtype}")
    n, d = updates.shape
    if n == 0 or d == 0:
        raise ValueError(f"updates must be non-empty, got shape {tuple(updates.shape)}")
    if not isinstance(f, int) or isinstance(f, bool) or f < 0:
        raise ValueError(f"f must be a non-negative int, got {f!r}")
    if f >= n:
        raise ValueError(f"f = {f} Byzantine nodes out of n = {n}: need f < n")
    return n, d


@register("aggregator", "average")
def average(updates: torch.Tensor, f: int = 0) -> torch.Tensor:
    """Plain mean (1/n) Σ_i x_i — FedAvg, not robust (one node can move it arbitrarily).

    Shape: (n, d) -> (d,). ``f`` is ignored.
    """
    _check(updates, f)
    return updates.mean(dim=0)


@register("aggregator", "median")
def median(updates: torch.Tensor, f: int = 0) -> torch.Tensor:
    """Coordinate-wise median (Yin et al. 2018, "Byzantine-robust distributed learning", Def. 1).

    For an even n the median of a coordinate is the mean of its two middle values (as
    ``numpy.median``; ``torch.median`` would return the lower one).

    Shape: (n, d) -> (d,). ``f`` is ignored.
    """
    n, _ = _check(updates, f)
    srt = updates.sort(dim=0).values  # (n, d), each column ascending
    if n % 2 == 1:
        return srt[n // 2].clone()
    return 0.5 * (srt[n // 2 - 1] + srt[n // 2])


@register("aggregator", "trimmed_mean", fits=lambda n, f: n > 2 * f, needs="n > 2f")
def trimmed_mean(updates: torch.Tensor, f: int) -> torch.Tensor:
    """Coordinate-wise trimmed mean (Yin et al. 2018, Def. 2, with β = f/n).

    Per coordinate, drop the f largest and the f smallest values and average the n − 2f left.
    Equals ``scipy.stats.trim_mean(x, f / n, axis=0)``.

    Shape: (n, d) -> (d,).

    Raises:
        ValueError: n ≤ 2f (nothing left to average).
    """
    n, _ = _check(updates, f)
    if n <= 2 * f:
        raise ValueError(f"trimmed_mean needs n > 2f, got n = {n}, f = {f}")
    srt = updates.sort(dim=0).values  # (n, d)
    return srt[f : n - f].mean(dim=0)


@register("aggregator", "geometric_median")
def geometric_median(
    updates: torch.Tensor,
    f: int = 0,
    *,
    eps: float = 1e-8,
    tol: float = 1e-7,
    max_iter: int = 500,
) -> torch.Tensor:
    """Geometric median argmin_z Σ_i ||z − x_i||₂ by the smoothed Weiszfeld iteration.

    Weiszfeld (1937); smoothing as in the smoothed Weiszfeld algorithm of Pillutla, Kakade &
    Harchaoui 2022 ("Robust aggregation for federated learning", RFA):

        z_0 = (1/n) Σ x_i,   w_i = 1 / max(eps, ||z_k − x_i||),   z_{k+1} = Σ w_i x_i / Σ w_i

    stopping when ||z_{k+1} − z_k|| ≤ tol (same units as the updates) or after ``max_iter``
    steps. ``eps`` keeps the weights finite when z lands on a data point. At the optimum the
    unit vectors (z − x_i)/||z − x_i|| sum to (nearly) zero. Breakdown point 1/2.

    Shape: (n, d) -> (d,). ``f`` is ignored (the rule needs no f).

    Raises:
        ValueError: eps ≤ 0, tol < 0 or max_iter < 1.
    """
    _check(updates, f)
    if eps <= 0 or tol < 0 or max_iter < 1:
        raise ValueError(f"need eps > 0, tol ≥ 0, max_iter ≥ 1; got {eps}, {tol}, {max_iter}")
    z = updates.mean(dim=0)
    for _ in range(max_iter):
        dist = (updates - z).norm(dim=1).clamp_min(eps)  # (n,)
        w = 1.0 / dist
        z_next = (w[:, None] * updates).sum(dim=0) / w.sum()
        step = (z_next - z).norm()
        z = z_next
        if step <= tol:
            break
    return z


def krum_scores(updates: torch.Tensor, f: int) -> torch.Tensor:
    """Krum score of each node (Blanchard et al. 2017, "Machine learning with adversaries").

    score(i) = Σ_{j ∈ N_i} ||x_i − x_j||², N_i = the n − f − 2 nodes closest to x_i (i ≠ j).

    Shape: (n, d) -> (n,).

    Raises:
        ValueError: n ≤ 2f + 2 (Krum's condition; then n − f − 2 ≤ f neighbours).
    """
    n, _ = _check(updates, f)
    if n <= 2 * f + 2:
        raise ValueError(f"Krum needs n > 2f + 2, got n = {n}, f = {f}")
    # exact pairwise distances (the matmul shortcut loses precision for near-equal updates)
    sq = torch.cdist(updates, updates, compute_mode="donot_use_mm_for_euclid_dist").pow(2)  # (n, n)
    sq.fill_diagonal_(float("inf"))  # never count a node as its own neighbour
    k = n - f - 2
    return sq.sort(dim=1).values[:, :k].sum(dim=1)  # (n,)


@register("aggregator", "krum", fits=lambda n, f: n > 2 * f + 2, needs="n > 2f + 2")
def krum(updates: torch.Tensor, f: int) -> torch.Tensor:
    """Krum (Blanchard et al. 2017): the single update with the lowest :func:`krum_scores`.

    Ties go to the lowest node index. Shape: (n, d) -> (d,).

    Raises:
        ValueError: n ≤ 2f + 2.
    """
    scores = krum_scores(updates, f)
    return updates[int(torch.argmin(scores))].clone()


def _multi_krum_options(fed_cfg, honest: torch.Tensor, previous: torch.Tensor | None) -> dict:
    return {} if fed_cfg.multi_krum_m is None else {"m": fed_cfg.multi_krum_m}


@register("aggregator", "multi_krum", fits=lambda n, f: n > 2 * f + 2, needs="n > 2f + 2", options=_multi_krum_options)
def multi_krum(updates: torch.Tensor, f: int, *, m: int | None = None) -> torch.Tensor:
    """Multi-Krum: the mean of the m updates with the lowest Krum scores (Blanchard et al. 2017).

    One pass of scoring (scores are not recomputed after each pick), m = n − f by default.
    Ties in score go to the lower node index. m = 1 is Krum.

    Shape: (n, d) -> (d,).

    Raises:
        ValueError: n ≤ 2f + 2, or m outside 1..n.
    """
    n, _ = _check(updates, f)
    m = n - f if m is None else m
    if not 1 <= m <= n:
        raise ValueError(f"multi_krum needs 1 ≤ m ≤ n = {n}, got m = {m}")
    scores = krum_scores(updates, f)
    chosen = torch.sort(scores, stable=True).indices[:m]
    return updates[chosen].mean(dim=0)


def _centered_clipping_options(fed_cfg, honest: torch.Tensor, previous: torch.Tensor | None) -> dict:
    """τ (``cc_tau``, else the median norm of the honest updates that moved: a zero update says nothing
    about scale), the previous round's aggregate as reference, L iterations."""
    tau = fed_cfg.cc_tau
    if tau is None:
        norms = honest.norm(dim=1)
        tau = float(norms[norms > 0].median()) if bool((norms > 0).any()) else 1e-12
    return {"tau": tau, "reference": previous, "iterations": fed_cfg.cc_iterations}


@register("aggregator", "centered_clipping", options=_centered_clipping_options)
def centered_clipping(
    updates: torch.Tensor,
    f: int = 0,
    *,
    tau: float | None = None,
    reference: torch.Tensor | None = None,
    iterations: int = 1,
) -> torch.Tensor:
    """Centered clipping (Karimireddy, He & Jaggi 2021, "Learning from history for Byzantine robust optimization").

        v_0 = reference,   v_{l+1} = v_l + (1/n) Σ_i (x_i − v_l) · min(1, τ / ||x_i − v_l||)

    returning v_L, L = ``iterations``. The paper uses the previous round's aggregate (momentum)
    as the reference and L = 1; the default reference here is the zero vector. A node at
    distance > τ from the reference moves the result by at most τ/n.

    Shape: (n, d) -> (d,); ``reference`` (d,). ``f`` is ignored.

    Raises:
        ValueError: tau missing or ≤ 0, iterations < 1, reference of the wrong shape.
    """
    _, d = _check(updates, f)
    if tau is None or tau <= 0:
        raise ValueError(f"centered_clipping needs a clipping radius tau > 0, got {tau!r}")
    if iterations < 1:
        raise ValueError(f"iterations must be ≥ 1, got {iterations}")
    v = torch.zeros(d, dtype=updates.dtype, device=updates.device) if reference is None else reference.to(updates)
    if v.shape != (d,):
        raise ValueError(f"reference must have shape ({d},), got {tuple(v.shape)}")
    for _ in range(iterations):
        diff = updates - v  # (n, d)
        norms = diff.norm(dim=1)  # (n,)
        # min(1, τ/||·||) with 0/0 → 1 for a node sitting exactly on the reference
        scale = torch.where(norms > tau, tau / norms.clamp_min(torch.finfo(norms.dtype).tiny), torch.ones_like(norms))
        v = v + (scale[:, None] * diff).mean(dim=0)
    return v


AGGREGATORS = Table("aggregator")  # rule name → function (every registered aggregator)


def fits(name: str, n: int, f: int) -> bool:
    """Whether rule ``name`` can aggregate n updates tolerating f Byzantine ones (Krum: n > 2f + 2, …)."""
    return lookup("aggregator", name).meta.get("fits", lambda n, f: True)(n, f)


def aggregator_kwargs(name: str, fed_cfg, honest: torch.Tensor, previous: torch.Tensor | None) -> dict:
    """The rule's own options for this round of a federated run (centered clipping's τ and
    reference, Multi-Krum's m); ``fed_cfg`` is the run's ``federated`` section, ``honest`` the (n_h, d)
    honest updates, ``previous`` the last aggregate."""
    options = lookup("aggregator", name).meta.get("options")
    return {} if options is None else options(fed_cfg, honest, previous)


def aggregate(name: str, updates: torch.Tensor, f: int = 0, **kw) -> torch.Tensor:
    """Aggregate (n, d) updates with the rule registered as ``name``; see :data:`AGGREGATORS`.

    Args:
        name: registry key.
        updates: (n, d) float updates, one row per node, all finite.
        f: number of Byzantine nodes to tolerate (0 ≤ f < n).
        **kw: the rule's own options (``tau=`` for centered_clipping, ``m=`` for multi_krum, …).

    Returns:
        (d,) aggregate in the updates' dtype.

    Raises:
        ValueError: unknown name, malformed or non-finite updates, f out of range, or the
            rule's own condition (trimmed mean n > 2f, Krum n > 2f + 2, CC tau > 0).
    """
    rule = lookup("aggregator", name).builder
    _check(updates, f)
    if not torch.isfinite(updates).all():
        bad = (~torch.isfinite(updates)).any(dim=1).nonzero().flatten().tolist()
        raise ValueError(f"non-finite updates from nodes {bad}: reject them before aggregating")
    return rule(updates, f, **kw)
