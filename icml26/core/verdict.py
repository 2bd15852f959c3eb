"""Verdicts from intervals: which method is best, and which are tied with it.

One rule for every summary. ``best_<metric>`` names a method only when its 95% interval is
separated from every other method's interval; otherwise it is None and ``tied_with_best_<metric>``
lists the methods whose intervals overlap the leader's (the leader first). Rows that diverged
(``diverged: true``) or have no value are left out. When nothing scored, or when every method
scored the same value (for example 0 needles everywhere), no method is named.

A row without an interval (one seed) cannot be separated from anything: with two or more
methods, no winner is named from single-seed rows unless ``exact=True`` (deterministic metrics,
where a point value is the whole answer and only exact equality ties).
"""

from __future__ import annotations

import math
from typing import Any, Sequence


def _num(v: Any) -> float | None:
    if v is None or isinstance(v, bool):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _interval(row: dict, ci_key: str | None) -> tuple[float, float] | None:
    if ci_key is None:
        return None
    ci = row.get(ci_key)
    if not isinstance(ci, (list, tuple)) or len(ci) != 2:
        return None
    lo, hi = _num(ci[0]), _num(ci[1])
    if lo is None or hi is None or hi < lo:
        return None
    return lo, hi


def verdict(
    rows: Sequence[dict],
    key: str,
    name: str,
    *,
    lower: bool = True,
    ci_key: str | None = None,
    metric: str | None = None,
    exact: bool = False,
) -> dict:
    """The verdict on ``rows`` for ``row[key]``, as two summary fields.

    rows: result records; ``row[name]`` names the method, ``row[key]`` its score (lower is better
    unless ``lower=False``), ``row[ci_key]`` an optional ``[low, high]`` 95% interval (None or
    missing with one seed). metric: suffix of the fields (default ``key``).
    Returns ``{"best_<metric>": str | None, "tied_with_best_<metric>": list[str]}``: best is the
    leader when its interval is disjoint from every other interval (or, with ``exact``, when no
    other method has the same value); tied lists the leader and every method it cannot be
    separated from (empty when nothing scored, a single name when the leader is separated).
    """
    metric = metric or key
    scored = []
    for r in rows:
        if r.get("diverged") is True:
            continue
        v = _num(r.get(key))
        if v is None or r.get(name) is None:
            continue
        scored.append((v, _interval(r, ci_key), str(r[name])))
    out: dict = {f"best_{metric}": None, f"tied_with_best_{metric}": []}
    if not scored:
        return out
    sign = 1.0 if lower else -1.0
    lead_v, lead_ci, lead_name = min(scored, key=lambda t: sign * t[0])
    tied = [lead_name]
    for v, ci, n in scored:
        if n == lead_name:
            continue
        if v == lead_v:
            tied.append(n)
        elif exact:
            continue
        elif ci is None or lead_ci is None:
            tied.append(n)
        elif ci[0] <= lead_ci[1] and lead_ci[0] <= ci[1]:
            tied.append(n)
    if len(set(v for v, _, _ in scored)) == 1 and len(scored) > 1:
        tied = [n for _, _, n in scored]
    out[f"tied_with_best_{metric}"] = list(dict.fromkeys(tied))
    if len(out[f"tied_with_best_{metric}"]) == 1:
        out[f"best_{metric}"] = lead_name
    return out


def seed_interval(values: Sequence[float], level: float = 0.95) -> list[float] | None:
    """Student-t interval of the mean over seeds, ``[low, high]``; None with fewer than two
    finite values (one seed has no interval, never a zero-width one)."""
    v = [float(x) for x in values if _num(x) is not None]
    if len(v) < 2:
        return None
    from scipy import stats

    m = sum(v) / len(v)
    sd = math.sqrt(sum((x - m) ** 2 for x in v) / (len(v) - 1))
    half = float(stats.t.ppf(0.5 + level / 2, len(v) - 1)) * sd / math.sqrt(len(v))
    return [m - half, m + half]
