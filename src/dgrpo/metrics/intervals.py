"""Confidence intervals of rates (detection rate, false-positive rate) measured on n samples."""

from __future__ import annotations

import math


def wilson(successes: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion (Wilson 1927; Brown, Cai & DasGupta 2001, eq. 4).

        centre = (p̂ + z²/2n) / (1 + z²/n),  half = z / (1 + z²/n) · √(p̂(1−p̂)/n + z²/4n²)

    Unlike the normal interval it stays inside [0, 1] and is not empty at p̂ = 0 or 1
    (0 of 1,000 → [0, 0.0038]).

    Args:
        successes: count of events (rejected completions), 0 ≤ successes ≤ n.
        n: number of trials; z: normal quantile (default 1.96, a 95% interval).

    Returns:
        (low, high) in [0, 1]; (0.0, 1.0) when n = 0.

    Raises:
        ValueError: successes outside 0..n or n negative.
    """
    if n < 0 or not 0 <= successes <= n:
        raise ValueError(f"wilson needs 0 ≤ successes ≤ n, got successes={successes}, n={n}")
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    low = 0.0 if successes == 0 else max(0.0, centre - half)  # exact bounds at p̂ = 0 and 1 (no rounding residue)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return low, high
