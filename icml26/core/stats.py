"""Small statistics helpers shared by evaluation code."""

from __future__ import annotations

import math


def wilson_interval(successes: float, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (Wilson 1927), 95% by default.

    successes: count in [0, n]; n: trials (> 0). Returns (low, high) within [0, 1].
    Raises ValueError for n <= 0 or successes outside [0, n]."""
    if n <= 0:
        raise ValueError(f"n must be > 0, got {n}")
    if not 0 <= successes <= n:
        raise ValueError(f"successes must be in [0, {n}], got {successes}")
    p = successes / n
    z2 = z * z
    den = 1.0 + z2 / n
    centre = (p + z2 / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / den
    lo = 0.0 if successes == 0 else max(0.0, centre - half)
    hi = 1.0 if successes == n else min(1.0, centre + half)
    return lo, hi


def bootstrap_mean_ci(values, n_boot: int = 2000, seed: int = 0, level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``values`` (Efron & Tibshirani 1993, ch. 13),
    resampling the values with replacement ``n_boot`` times with a seeded generator.

    values: 1-D numbers (e.g. one KL per haystack). Returns (low, high); (nan, nan) for no values
    and a zero-width interval for one value."""
    import numpy as np

    v = np.asarray(list(values), dtype=float)
    if v.size == 0:
        return float("nan"), float("nan")
    if v.size == 1:
        return float(v[0]), float(v[0])
    rng = np.random.default_rng(seed)
    means = v[rng.integers(0, v.size, size=(n_boot, v.size))].mean(1)
    a = (1 - level) / 2
    return float(np.quantile(means, a)), float(np.quantile(means, 1 - a))


def best_of(rows, key: str, name: str, *, lower: bool = True):
    """``row[name]`` of the row with the lowest (``lower``) or highest ``row[key]``, skipping rows
    where it is None or NaN; None when no row has a value or when several rows tie at the best
    (so that a summary never names a winner among equals)."""
    vals = [(r[key], r[name]) for r in rows if r.get(key) is not None and r[key] == r[key]]
    if not vals:
        return None
    best = min(v for v, _ in vals) if lower else max(v for v, _ in vals)
    winners = [n for v, n in vals if v == best]
    return winners[0] if len(winners) == 1 else None
