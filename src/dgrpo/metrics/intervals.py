"""Confidence intervals of rates measured on finite samples (accuracy, ASR, detection, false positives).

Wilson's score interval (Wilson 1927, "Probable inference, the law of succession, and statistical
inference", JASA 22): for s successes in n trials, p̂ = s/n and z the normal quantile,

    centre = (p̂ + z²/2n) / (1 + z²/n)
    half   = z · sqrt(p̂(1 − p̂)/n + z²/4n²) / (1 + z²/n)

It stays inside [0, 1] and keeps its coverage near the nominal level for small n and for p̂ near 0
or 1, where the normal (Wald) interval collapses to a point. Every rate dgrpo logs with an
interval uses it (``…_ci95_low`` / ``…_ci95_high``).
"""

from __future__ import annotations

import math

Z95 = 1.959963984540054  # standard normal quantile of 0.975


def wilson(successes: float, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a proportion.

    Args:
        successes: s, 0 ≤ s ≤ n (a float is rounded: rates averaged over policies give s = rate·n).
        n: trials, > 0.
        z: normal quantile (1.96 for 95%).

    Returns:
        (low, high), both in [0, 1].

    Raises:
        ValueError: n ≤ 0 or s outside [0, n].
    """
    if n <= 0:
        raise ValueError(f"a Wilson interval needs n > 0 trials, got {n}")
    s = round(successes)
    if not 0 <= s <= n:
        raise ValueError(f"successes must lie in [0, n={n}], got {successes}")
    p, z2 = s / n, z * z
    denom = 1 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denom
    low = 0.0 if s == 0 else max(0.0, centre - half)  # exactly 0 at s = 0 (the formula leaves rounding noise)
    high = 1.0 if s == n else min(1.0, centre + half)
    return low, high


def with_interval(rec: dict, key: str, n: int) -> dict:
    """Add ``{key}_ci95_low`` / ``{key}_ci95_high`` to ``rec`` for the rate ``rec[key]`` measured on
    ``n`` trials (nothing when the rate is missing or n is 0); returns ``rec``."""
    rate = rec.get(key)
    if rate is not None and n > 0:
        rec[f"{key}_ci95_low"], rec[f"{key}_ci95_high"] = wilson(rate * n, n)
    return rec
