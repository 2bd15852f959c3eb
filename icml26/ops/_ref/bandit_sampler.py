"""NumPy twin of ``icml26/csrc/cpu/bandit_sampler.h`` (vectorised over runs).

The reward of the j-th pull (0-based) of arm k in run ``seed`` is a pure function of
(seed, k, j). Arm kinds: 0 bernoulli (p), 1 gaussian (mean, std), 2 student_t
(mean, scale, df; Bailey's polar method), 3 lognormal (mean, sigma; location
log(mean) - sigma^2/2 so that the mean is ``mean``), 4 empirical (uniform resampling).
"""

from __future__ import annotations

import numpy as np

ALGO_STREAM = np.uint64(1 << 40)
_M1 = np.uint64(0x9E3779B97F4A7C15)
_M2 = np.uint64(0xBF58476D1CE4E5B9)
_M3 = np.uint64(0x94D049BB133111EB)
_MS = np.uint64(0xD1B54A32D192ED03)
_TWO_M53 = 2.0**-53


def splitmix64(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.uint64)
    with np.errstate(over="ignore"):
        x = x + _M1
        x = (x ^ (x >> np.uint64(30))) * _M2
        x = (x ^ (x >> np.uint64(27))) * _M3
    return x ^ (x >> np.uint64(31))


def key(seed, stream, idx, c) -> np.ndarray:
    """sm(sm(sm(seed) ^ (stream * M + c)) ^ idx), broadcast over arrays (uint64)."""
    seed = np.asarray(seed, dtype=np.uint64)
    stream = np.asarray(stream, dtype=np.uint64)
    idx = np.asarray(idx, dtype=np.uint64)
    c = np.asarray(c, dtype=np.uint64)
    with np.errstate(over="ignore"):
        b = splitmix64(splitmix64(seed) ^ (stream * _MS + c))
    return splitmix64(b ^ idx)


def u01(h: np.ndarray) -> np.ndarray:
    return (h >> np.uint64(11)).astype(np.float64) * _TWO_M53


def u01_open(h: np.ndarray) -> np.ndarray:
    return ((h >> np.uint64(11)).astype(np.float64) + 0.5) * _TWO_M53


def std_normal(seed, stream, idx) -> np.ndarray:
    u1 = u01_open(key(seed, stream, idx, 0))
    u2 = u01(key(seed, stream, idx, 1))
    return np.sqrt(-2.0 * np.log(u1)) * np.cos(6.283185307179586 * u2)


def std_student_t(seed, stream, idx, df) -> np.ndarray:
    seed, stream, idx, df = np.broadcast_arrays(
        np.asarray(seed, np.uint64),
        np.asarray(stream, np.uint64),
        np.asarray(idx, np.uint64),
        np.asarray(df, np.float64),
    )
    out = np.zeros(seed.shape, dtype=np.float64)
    todo = np.ones(seed.shape, dtype=bool)
    for a in range(64):
        if not todo.any():
            break
        s, st, i, d = seed[todo], stream[todo], idx[todo], df[todo]
        U = 2.0 * u01(key(s, st, i, 2 + 2 * a)) - 1.0
        V = 2.0 * u01(key(s, st, i, 3 + 2 * a)) - 1.0
        W = U * U + V * V
        ok = (W > 0.0) & (W <= 1.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            t = U * np.sqrt(d * (np.power(W, -2.0 / d) - 1.0) / W)
        pos = np.flatnonzero(todo)
        out[pos[ok]] = t[ok]
        todo[pos[ok]] = False
    return out


def sample(
    kind: np.ndarray,
    params: np.ndarray,
    emp_values: np.ndarray,
    emp_offsets: np.ndarray,
    seeds: np.ndarray,
    arms: np.ndarray,
    idx: np.ndarray,
) -> np.ndarray:
    """Rewards for runs ``seeds`` (S,), arms ``arms`` (S,), pull indices ``idx`` (S,) -> (S,) float64."""
    seeds = np.asarray(seeds, dtype=np.uint64)
    arms = np.asarray(arms, dtype=np.int64)
    idx = np.asarray(idx, dtype=np.uint64)
    k = kind[arms]
    p = params[arms]  # (S, 3)
    st = arms.astype(np.uint64)
    out = np.zeros(arms.shape, dtype=np.float64)
    m = k == 0
    if m.any():
        out[m] = (u01(key(seeds[m], st[m], idx[m], 0)) < p[m, 0]).astype(np.float64)
    m = k == 1
    if m.any():
        out[m] = p[m, 0] + p[m, 1] * std_normal(seeds[m], st[m], idx[m])
    m = k == 2
    if m.any():
        out[m] = p[m, 0] + p[m, 1] * std_student_t(seeds[m], st[m], idx[m], p[m, 2])
    m = k == 3
    if m.any():
        out[m] = np.exp(np.log(p[m, 0]) - 0.5 * p[m, 1] ** 2 + p[m, 1] * std_normal(seeds[m], st[m], idx[m]))
    m = k == 4
    if m.any():
        lo = emp_offsets[arms[m]]
        n = emp_offsets[arms[m] + 1] - lo
        r = np.minimum((u01(key(seeds[m], st[m], idx[m], 0)) * n).astype(np.int64), n - 1)
        out[m] = emp_values[lo + r]
    return out


def tie_rank(seeds: np.ndarray, K: int) -> np.ndarray:
    """(S, K) random priorities used to break exact ties (larger wins)."""
    seeds = np.asarray(seeds, dtype=np.uint64)[:, None]
    return u01(key(seeds, ALGO_STREAM, np.arange(K, dtype=np.uint64)[None, :], 0))
