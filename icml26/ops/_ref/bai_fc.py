"""NumPy twin of ``icml26/csrc/cpu/bai_fc_cpu.cpp``: fixed-confidence best-arm
identification, vectorised ACROSS runs (seeds).

All runs advance in lock step; a run leaves the batch when its stopping rule fires or its
pull limit is reached. Each step is a handful of NumPy operations on the ``(S', K)`` arrays
of the runs still active. It is the fallback when the C++ extension cannot be built and the
oracle of the parity tests, so every floating-point operation that decides a pull or a stop
is written in the same order as in the C++ kernel (sums over arms are sequential loops over
columns, the same Welford update, the same bisection iterates).

Rewards come only from :mod:`icml26.ops._ref.bandit_sampler`: the reward of the j-th pull
(0-based) of arm k in run ``seed`` is ``sample(seed, k, j)``. Exact ties in any
argmax/argmin are broken by ``tie_rank`` (larger rank wins), never by arm index.
Algorithm-internal randomness uses ``key(seed, ALGO_STREAM + purpose, counter, c)``.

The algorithms (steps, equations, sources) are documented in :mod:`icml26.ops.bai_fc`;
this module takes the already-validated, complete parameter dict.
"""

from __future__ import annotations

import math

import numpy as np

from icml26.ops._ref import bandit_sampler as bs

ALGO_CODES = {"varde": 0, "uniform": 1, "lucb": 2, "kl-lucb": 3, "track-and-stop": 4, "top-two-ts": 5}
THRESHOLDS = {"heuristic": 0, "theory": 1}
NOISE = {"bernoulli": 0, "gaussian": 1}

# algorithm-internal randomness: key(seed, ALGO_STREAM + purpose, counter, c), purpose >= 1
P_WARM = 1  # warm-start order: counter = round, c = arm
P_COIN = 2  # top-two coin: counter = t (pulls so far), c = 0
P_POST = 3  # top-two posterior draws: counter = t, c = see _post_c
P_CHAL = 4  # top-two gaussian challenger: counter = t, c = try * (4 + 2 TN_TRIES + 2 K) + see _gauss_challenger
TN_TRIES = 64

KL_EPS = 1e-12  # Bernoulli means are clipped to [eps, 1 - eps] inside KL divergences
KL_LUCB_ITERS = 32  # bisection steps of the KL confidence bounds (bracket / 2^32)
GAMMA_TRIES = 64  # Marsaglia-Tsang attempts per Gamma draw (acceptance >= 0.95 per try)
# theory thresholds (see icml26/ops/bai_fc.py):
LUCB_K1 = 1.25  # LUCB1 (Kalyanakrishnan et al. 2012): log(k1 K t^4 / delta)
KLLUCB_K1, KLLUCB_ALPHA = 405.5, 1.1  # KL-LUCB: log(k1 K t^alpha / delta), alpha > 1, k1 > 1 + 1/(alpha-1)


# ---------------------------------------------------------------------------- helpers
def rowsum(a: np.ndarray) -> np.ndarray:
    """Sequential sum over the last axis (same order as the C++ loop)."""
    acc = np.zeros(a.shape[:-1], dtype=np.float64)
    for k in range(a.shape[-1]):
        acc = acc + a[..., k]
    return acc


def pick_max(v: np.ndarray, tie: np.ndarray, eligible: np.ndarray | None = None) -> np.ndarray:
    """argmax over the last axis of v (S, K); exact ties -> larger tie rank."""
    if eligible is not None:
        v = np.where(eligible, v, -np.inf)
    best = v.max(axis=1, keepdims=True)
    cand = v == best
    if eligible is not None:
        cand &= eligible
    return np.argmax(np.where(cand, tie, -1.0), axis=1)


def kl_bern(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """d(x, y) = x log(x/y) + (1-x) log((1-x)/(1-y)), both clipped to [eps, 1-eps]."""
    x = np.minimum(np.maximum(x, KL_EPS), 1.0 - KL_EPS)
    y = np.minimum(np.maximum(y, KL_EPS), 1.0 - KL_EPS)
    return x * (np.log(x) - np.log(y)) + (1.0 - x) * (np.log(1.0 - x) - np.log(1.0 - y))


def plugin_var(N: np.ndarray, M2: np.ndarray, var_floor: float) -> np.ndarray:
    """max(M2 / (N - 1), var_floor); +inf where N < 2 (unknown)."""
    Nf = N.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        v = np.maximum(M2 / (Nf - 1.0), var_floor)
    return np.where(N < 2, np.inf, v)


def glr_threshold(t: np.ndarray, delta: float, K: int, kind: int) -> np.ndarray:
    """beta(t, delta): 0 heuristic log((1 + log t) / delta); 1 theory log(2 t (K-1) / delta)."""
    tf = t.astype(np.float64)
    if kind == 0:
        return np.log((1.0 + np.log(tf)) / delta)
    return np.log(2.0 * (K - 1) / delta) + np.log(tf)


def lucb_threshold(t: np.ndarray, delta: float, K: int, kind: int, kl: bool) -> np.ndarray:
    tf = t.astype(np.float64)
    if kind == 0:
        return np.log((1.0 + np.log(tf)) / delta)
    if kl:
        return np.log(KLLUCB_K1 * K / delta) + KLLUCB_ALPHA * np.log(tf)
    return np.log(LUCB_K1 * K / delta) + 4.0 * np.log(tf)


def glr_stat(N: np.ndarray, mean: np.ndarray, var: np.ndarray, best: np.ndarray, noise: int) -> np.ndarray:
    """Chernoff / GLR statistic Z(t) = min_{b != a} Z_{a,b} for a = empirical best (S,).

    bernoulli: Z_ab = N_a d(mu_a, m) + N_b d(mu_b, m), m = (N_a mu_a + N_b mu_b) / (N_a + N_b)
    (Garivier & Kaufmann 2016, Eq. 14 / Sec. 3.1);
    gaussian (plug-in variances): Z_ab = (mu_a - mu_b)^2 / (2 (s_a^2 / N_a + s_b^2 / N_b)).
    Z_ab = 0 when mu_b >= mu_a."""
    S, K = N.shape
    r = np.arange(S)
    Nf = N.astype(np.float64)
    Na, ma = Nf[r, best][:, None], mean[r, best][:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        if noise == 0:
            m = (Na * ma + Nf * mean) / (Na + Nf)
            z = Na * kl_bern(ma, m) + Nf * kl_bern(mean, m)
        else:
            va = var[r, best][:, None]
            g = ma - mean
            z = g * g / (2.0 * (va / Na + var / Nf))
    z = np.where(mean >= ma, 0.0, z)
    z[r, best] = np.inf
    return z.min(axis=1)


def kl_bounds(mean: np.ndarray, N: np.ndarray, beta: np.ndarray, upper: bool) -> np.ndarray:
    """KL confidence bound (Kaufmann & Kalyanakrishnan 2013, Eq. 2-3) by bisection:
    upper: max{q in [mu, 1] : N d(mu, q) <= beta}; lower: min{q in [0, mu] : ...}."""
    Nf = N.astype(np.float64)
    x = np.minimum(np.maximum(mean, KL_EPS), 1.0 - KL_EPS)
    lx, l1x = np.log(x), np.log(1.0 - x)
    lo = mean.copy() if upper else np.zeros_like(mean)
    hi = np.ones_like(mean) if upper else mean.copy()
    for _ in range(KL_LUCB_ITERS):
        q = 0.5 * (lo + hi)
        y = np.minimum(np.maximum(q, KL_EPS), 1.0 - KL_EPS)
        inside = Nf * (x * (lx - np.log(y)) + (1.0 - x) * (l1x - np.log(1.0 - y))) <= beta
        if upper:
            lo = np.where(inside, q, lo)
            hi = np.where(inside, hi, q)
        else:
            hi = np.where(inside, q, hi)
            lo = np.where(inside, lo, q)
    return lo if upper else hi


def wstar(mean: np.ndarray, var: np.ndarray, best: np.ndarray, noise: int, iters: int) -> np.ndarray:
    """Optimal proportions w*(mu) (S, K) of Garivier & Kaufmann 2016 (Thm. 5), by their nested
    bisection: with a = best arm, x_b = w_b / w_a solves g_b(x_b) = y, and y* solves
    F(y) = sum_{b != a} d_a(mu_a, m_b) / d_b(mu_b, m_b) = 1 on (0, min_b d_a(mu_a, mu_b)).

    bernoulli: g_b(x) = d(mu_a, m) + x d(mu_b, m), m = (mu_a + x mu_b)/(1 + x); the inner
    equation is solved by bisection on m in (mu_b, mu_a) (x = (mu_a - m)/(m - mu_b)).
    gaussian (heteroscedastic, d_k(u, v) = (u - v)^2 / (2 s_k^2)): closed form
    x_b(y) = 2 y s_b^2 / (gap_b^2 - 2 y s_a^2), F(y) = sum_b x_b^2 s_a^2 / s_b^2.
    Rows where another arm ties the best (gap <= 1e-12) get uniform proportions."""
    S, K = mean.shape
    r = np.arange(S)
    other = np.ones((S, K), dtype=bool)
    other[r, best] = False
    ma = mean[r, best][:, None]
    gap = ma - mean
    degenerate = (other & (gap <= 1e-12)).any(axis=1)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if noise == 0:
            mb = np.minimum(np.maximum(mean, KL_EPS), 1.0 - KL_EPS)
            mA = np.minimum(np.maximum(ma, KL_EPS), 1.0 - KL_EPS)
            dmax = np.where(other, kl_bern(mA, mb), np.inf)
            ymax = dmax.min(axis=1)

            lA, l1A = np.log(mA), np.log(1.0 - mA)
            lb, l1b = np.log(mb), np.log(1.0 - mb)

            def solve_x(y):  # y (S,) -> x, ratio (S, K); m stays inside (mb, mA): no clipping
                lo, hi = mb.copy(), np.broadcast_to(mA, mb.shape).copy()
                yy = y[:, None]
                for _ in range(iters):
                    m = 0.5 * (lo + hi)
                    lm, l1m = np.log(m), np.log(1.0 - m)
                    x = (mA - m) / (m - mb)
                    g = (mA * (lA - lm) + (1.0 - mA) * (l1A - l1m)) + x * (mb * (lb - lm) + (1.0 - mb) * (l1b - l1m))
                    big = g > yy
                    lo = np.where(big, m, lo)
                    hi = np.where(big, hi, m)
                m = 0.5 * (lo + hi)
                lm, l1m = np.log(m), np.log(1.0 - m)
                x = (mA - m) / (m - mb)
                ratio = (mA * (lA - lm) + (1.0 - mA) * (l1A - l1m)) / (mb * (lb - lm) + (1.0 - mb) * (l1b - l1m))
                return np.where(other, x, 0.0), np.where(other, ratio, 0.0)
        else:
            va = var[r, best][:, None]
            ymax = np.where(other, gap * gap / (2.0 * va), np.inf).min(axis=1)

            def solve_x(y):
                x = 2.0 * y[:, None] * var / (gap * gap - 2.0 * y[:, None] * va)
                ratio = x * x * va / var
                return np.where(other, x, 0.0), np.where(other, ratio, 0.0)

        lo = np.zeros(S)
        hi = np.where(degenerate, 1.0, ymax)
        for _ in range(iters):
            y = 0.5 * (lo + hi)
            _, ratio = solve_x(y)
            F = rowsum(ratio)
            small = F < 1.0
            lo = np.where(small, y, lo)
            hi = np.where(small, hi, y)
        x, _ = solve_x(0.5 * (lo + hi))
        x[r, best] = 1.0
        tot = rowsum(x)
        w = x / tot[:, None]
    return np.where(degenerate[:, None], 1.0 / K, w)


def _normal(seeds, t, c) -> np.ndarray:
    """Box-Muller standard normal from key(seed, ALGO+P_POST, t, c) and (.., c + 1)."""
    st = bs.ALGO_STREAM + np.uint64(P_POST)
    u1 = bs.u01_open(bs.key(seeds, st, t, c))
    u2 = bs.u01(bs.key(seeds, st, t, c + np.uint64(1)))
    return np.sqrt(-2.0 * np.log(u1)) * np.cos(6.283185307179586 * u2)


def _gamma(seeds, t, c0, shape) -> np.ndarray:
    """Gamma(shape, 1), shape >= 1, by Marsaglia & Tsang (2000); attempt j uses counters
    c0 + 3j, c0 + 3j + 1 (Box-Muller normal) and c0 + 3j + 2 (acceptance uniform).
    seeds, t, c0, shape broadcast together; returns their broadcast shape."""
    arrs = np.broadcast_arrays(
        np.asarray(seeds, np.uint64), np.asarray(t, np.uint64), np.asarray(c0, np.uint64), np.asarray(shape, np.float64)
    )
    outshape = arrs[0].shape
    seeds, t, c0, shape = (a.ravel() for a in arrs)
    st = bs.ALGO_STREAM + np.uint64(P_POST)
    d = shape - 1.0 / 3.0
    cc = 1.0 / np.sqrt(9.0 * d)
    out = d.copy()  # fallback after GAMMA_TRIES rejections (probability < 1e-80)
    todo = np.arange(d.size)
    for j in range(GAMMA_TRIES):
        if todo.size == 0:
            break
        cj = c0[todo] + np.uint64(3 * j)
        sd, tt, dd, ct = seeds[todo], t[todo], d[todo], cc[todo]
        z = _normal(sd, tt, cj)
        u = bs.u01_open(bs.key(sd, st, tt, cj + np.uint64(2)))
        v = 1.0 + ct * z
        v = v * v * v
        with np.errstate(invalid="ignore", divide="ignore"):
            ok = (v > 0.0) & (np.log(u) < 0.5 * z * z + dd - dd * v + dd * np.log(v))
        out[todo[ok]] = dd[ok] * v[ok]
        todo = todo[~ok]
    return out.reshape(outshape)


def _post_c(r: np.ndarray, K: int) -> np.ndarray:
    """Counter base of posterior draw r (..., 1) for each arm: (r K + k) * 2 * 3 * GAMMA_TRIES."""
    k = np.arange(K, dtype=np.uint64)
    return (np.asarray(r, np.uint64) * np.uint64(K) + k) * np.uint64(2 * 3 * GAMMA_TRIES)


def posterior_draw(seeds, t, r: np.ndarray, N, mean, M2, sums, noise: int, var_floor: float) -> np.ndarray:
    """Joint posterior samples theta (S', R, K) for top-two Thompson sampling, draws r (R,).

    bernoulli: theta_k ~ Beta(1 + S_k, 1 + N_k - S_k) (uniform prior; Russo 2016, Sec. 7),
    drawn as G1 / (G1 + G2) with G ~ Gamma; gaussian: theta_k ~ N(mu_k, s_k^2 / N_k)
    (flat prior, plug-in variance)."""
    S, K = N.shape
    sd = np.asarray(seeds, np.uint64)[:, None, None]
    tt = np.asarray(t).astype(np.uint64)[:, None, None]
    base = _post_c(np.asarray(r, np.uint64)[None, :, None], K)  # (1, R, K)
    if noise == 0:
        a = np.maximum(1.0 + sums, 1.0)[:, None, :]
        b = np.maximum(1.0 + N.astype(np.float64) - sums, 1.0)[:, None, :]
        g1 = _gamma(sd, tt, base, a)
        g2 = _gamma(sd, tt, base + np.uint64(3 * GAMMA_TRIES), b)
        return g1 / (g1 + g2)
    v = plugin_var(N, M2, var_floor)
    z = _normal(sd, tt, base)
    return mean[:, None, :] + np.sqrt(v / N.astype(np.float64))[:, None, :] * z


def _chal_normal(seeds, t, c) -> np.ndarray:
    """Box-Muller standard normal from key(seed, ALGO+P_CHAL, t, c) and (.., c + 1)."""
    st = bs.ALGO_STREAM + np.uint64(P_CHAL)
    u1 = bs.u01_open(bs.key(seeds, st, t, c))
    u2 = bs.u01(bs.key(seeds, st, t, c + np.uint64(1)))
    return np.sqrt(-2.0 * np.log(u1)) * np.cos(6.283185307179586 * u2)


_ERFC = np.frompyfunc(math.erfc, 1, 1)


def log_ndtr(x: np.ndarray) -> np.ndarray:
    """log Phi(x) = log(erfc(-x / sqrt 2) / 2); the asymptotic series below x = -30."""
    x = np.asarray(x, np.float64)
    hi = x > -30.0
    out = np.empty_like(x)
    out[hi] = np.log(0.5 * _ERFC(-x[hi] / 1.4142135623730951).astype(np.float64))
    xl = x[~hi]
    y = 1.0 / (xl * xl)
    out[~hi] = -0.5 * xl * xl - np.log(-xl) - 0.9189385332046728 + np.log1p(y * (-1.0 + y * (3.0 - 15.0 * y)))
    return out


def trunc_normal(seeds, t, c0, a) -> np.ndarray:
    """Z ~ N(0, 1) given Z > a (1-D arrays): normal rejection for a < 0.5, else the exponential
    proposal of Robert (1995, "Simulation of truncated normal variables"); attempt j uses
    counters c0 + 2j, c0 + 2j + 1 of stream P_CHAL; a after TN_TRIES rejections."""
    st = bs.ALGO_STREAM + np.uint64(P_CHAL)
    out = a.copy()
    small = a < 0.5
    al = 0.5 * (a + np.sqrt(a * a + 4.0))
    todo = np.arange(a.size)
    for j in range(TN_TRIES):
        if todo.size == 0:
            break
        cj = c0[todo] + np.uint64(2 * j)
        sd, tt, aa, sm = seeds[todo], t[todo], a[todo], small[todo]
        zn = _chal_normal(sd, tt, cj)
        ze = aa - np.log(bs.u01_open(bs.key(sd, st, tt, cj))) / al[todo]
        d = ze - al[todo]
        ok_e = bs.u01(bs.key(sd, st, tt, cj + np.uint64(1))) <= np.exp(-0.5 * d * d)
        z = np.where(sm, zn, ze)
        ok = np.where(sm, zn > aa, ok_e)
        out[todo[ok]] = z[ok]
        todo = todo[~ok]
    return out


def _gauss_challenger(sd, t, lead, n, mu, var, tr, cap: int) -> np.ndarray:
    """Top-two TS challenger, gaussian model: a posterior draw conditioned on argmax != lead
    (rows = runs), by the Karp-Luby-Madras union sampler (exact; see ops/bai_fc.py)."""
    M, K = n.shape
    rows = np.arange(M)
    s2 = var / n.astype(np.float64)
    s2l = s2[rows, lead]
    ml = mu[rows, lead]
    other = np.ones((M, K), dtype=bool)
    other[rows, lead] = False
    with np.errstate(divide="ignore", invalid="ignore"):
        lw = log_ndtr(((mu - ml[:, None]) / np.sqrt(s2 + s2l[:, None])).ravel()).reshape(M, K)
    lw = np.where(other, lw, -np.inf)
    lmax = lw.max(axis=1)
    w = np.where(other, np.exp(lw - lmax[:, None]), 0.0)
    tot = np.zeros(M)
    for k in range(K):
        tot = tot + w[:, k]
    st = bs.ALGO_STREAM + np.uint64(P_CHAL)
    stride = 4 + 2 * TN_TRIES + 2 * K
    out = lead.copy()
    todo = rows.copy()
    tu = t.astype(np.uint64)
    for r in range(cap):
        if todo.size == 0:
            break
        Mt = todo.size
        rr = np.arange(Mt)
        base = np.full(Mt, r * stride, dtype=np.uint64)
        sdt, tt, li = sd[todo], tu[todo], lead[todo]
        u = bs.u01(bs.key(sdt, st, tt, base)) * tot[todo]
        c = np.full(Mt, -1, dtype=np.int64)
        acc = np.zeros(Mt)
        done = np.zeros(Mt, dtype=bool)
        for k in range(K):
            el = other[todo, k] & ~done
            acc = np.where(el, acc + w[todo, k], acc)
            c = np.where(el, k, c)
            done = done | (el & (u < acc))
        m = mu[todo, c] - ml[todo]
        v = s2[todo, c] + s2l[todo]
        sv = np.sqrt(v)
        d = m + sv * trunc_normal(sdt, tt, base + np.uint64(1), -m / sv)
        z2 = _chal_normal(sdt, tt, base + np.uint64(1 + 2 * TN_TRIES))
        th = np.empty((Mt, K))
        kk = np.arange(K, dtype=np.uint64)[None, :]
        zk = _chal_normal(sdt[:, None], tt[:, None], base[:, None] + np.uint64(3 + 2 * TN_TRIES) + np.uint64(2) * kk)
        th[:] = mu[todo] + np.sqrt(s2[todo]) * zk
        thc = mu[todo, c] + s2[todo, c] / v * (d - m) + np.sqrt(s2[todo, c] * s2l[todo] / v) * z2
        th[rr, c] = thc
        th[rr, li] = thc - d
        cnt = ((th > th[rr, li][:, None]) & other[todo]).sum(axis=1)
        cnt = np.maximum(cnt, 1)
        ua = bs.u01(bs.key(sdt, st, tt, base + np.uint64(3 + 2 * TN_TRIES + 2 * K)))
        acc_ok = (ua * cnt.astype(np.float64) < 1.0) | (r + 1 == cap)
        if acc_ok.any():
            out[todo[acc_ok]] = pick_max(th[acc_ok], tr[todo[acc_ok]], other[todo[acc_ok]])
        todo = todo[~acc_ok]
    return out


# ---------------------------------------------------------------------------- main loop
def run(
    table,
    seeds: np.ndarray,
    algo: str,
    p: dict,
    noise: int,
    *,
    delta: float | None,
    budget: int | None,
    max_pulls: int,
    reward_range=(0.0, 1.0),
) -> dict:
    """Run ``algo`` on every seed. Exactly one of delta (stop by the algorithm's stopping
    rule, at most max_pulls) / budget (exactly ``budget`` pulls, no stopping).
    reward_range (lo, hi): rewards normalised to (x - lo) / (hi - lo) at the draw, scale 1;
    None: rewards as drawn, scale = max - min observed so far (1 while 0); var_floor is in
    units of scale^2 and tau of scale.
    Returns recommendation (S,), counts (S, K), pulls (S,), stopped (S,)."""
    kind = np.asarray(table[0], dtype=np.int32)
    params = np.asarray(table[1], dtype=np.float64)
    emp_values = np.asarray(table[2], dtype=np.float64)
    emp_offsets = np.asarray(table[3], dtype=np.int64)
    seeds = np.asarray(seeds, dtype=np.uint64)
    S, K = seeds.shape[0], kind.shape[0]
    code = ALGO_CODES[algo]
    fc = delta is not None
    limit = int(max_pulls) if fc else int(budget)
    thr = THRESHOLDS[p["threshold"]]
    warm = int(p["warm_start"])
    vf = float(p["var_floor"])

    N = np.zeros((S, K), dtype=np.int64)
    mean = np.zeros((S, K))
    M2 = np.zeros((S, K))
    sums = np.zeros((S, K))
    pending = np.full(S, -1, dtype=np.int64)
    stopped = np.zeros(S, dtype=bool)
    tie = bs.tie_rank(seeds, K)
    if reward_range is None:
        lo, width = 0.0, 0.0
    else:
        lo, width = float(reward_range[0]), float(reward_range[1]) - float(reward_range[0])
    obs_min = np.full(S, np.inf)
    obs_max = np.full(S, -np.inf)
    act = np.arange(S)
    while act.size:
        n, mu, m2 = N[act], mean[act], M2[act]
        sd, tr = seeds[act], tie[act]
        t = n.sum(axis=1)
        warming = n.min(axis=1) < warm
        pend = pending[act]
        nrow = act.size
        rr = np.arange(nrow)
        best = pick_max(mu, tr)
        if width > 0.0:
            sc = np.ones(nrow)
        else:
            rg = obs_max[act] - obs_min[act]
            sc = np.where(rg > 0.0, rg, 1.0)
        var = plugin_var(n, m2, (vf * sc * sc)[:, None])
        lucb = code in (2, 3)
        # 1. stopping rule (delta mode; after the warm start; LUCB only between rounds)
        stop = np.zeros(nrow, dtype=bool)
        chal = None
        if lucb:
            kl = code == 3
            beta = lucb_threshold(np.maximum(t, 1), delta if fc else p["budget_delta"], K, thr, kl)[:, None]
            if noise == 0 and kl:
                U = kl_bounds(mu, n, beta, True)
                L = kl_bounds(mu, n, beta, False)
            else:
                vv = np.full((nrow, K), 0.25) if noise == 0 else var
                with np.errstate(invalid="ignore", divide="ignore"):
                    rad = np.sqrt(2.0 * vv * beta / n.astype(np.float64))
                U, L = mu + rad, mu - rad
            notbest = np.ones((nrow, K), dtype=bool)
            notbest[rr, best] = False
            chal = pick_max(U, tr, notbest)
            if fc:
                stop = (~warming) & (pend < 0) & (L[rr, best] > U[rr, chal])
        elif fc and code not in (2, 3) and not warming.all():
            z = glr_stat(n, mu, var, best, noise)
            stop = (~warming) & (z > glr_threshold(np.maximum(t, 1), delta, K, thr))
        full = (~stop) & (t >= limit)
        leave = stop | full
        if leave.any():
            stopped[act[stop]] = True
            act = act[~leave]
            if act.size == 0:
                break
            keep = ~leave
            n, mu, m2, sd, tr, t = n[keep], mu[keep], m2[keep], sd[keep], tr[keep], t[keep]
            warming, pend, best, var, sc = warming[keep], pend[keep], best[keep], var[keep], sc[keep]
            if lucb:
                chal = chal[keep]
            nrow = act.size
            rr = np.arange(nrow)
        # 2. sampling rule
        arm = np.full(nrow, -1, dtype=np.int64)
        if warming.any():  # warm start: rounds in a per-run random order
            w = np.flatnonzero(warming)
            nw = n[w]
            rmin = nw.min(axis=1)
            pri = bs.u01(
                bs.key(
                    sd[w, None],
                    bs.ALGO_STREAM + np.uint64(P_WARM),
                    rmin[:, None].astype(np.uint64),
                    np.arange(K, dtype=np.uint64)[None, :],
                )
            )
            arm[w] = pick_max(pri, tr[w], nw == rmin[:, None])
        g = np.flatnonzero(~warming)
        if g.size:
            arm[g] = _choose(
                code, p, noise, g, n, mu, m2, var, sums[act], sd, tr, t, best, pend, chal if lucb else None, sc
            )
            if lucb:
                pending[act[g]] = np.where(pend[g] >= 0, -1, chal[g])
        # 3. pull and update (Welford)
        j = n[rr, arm]
        x = bs.sample(kind, params, emp_values, emp_offsets, sd, arm, j.astype(np.uint64))
        if width > 0.0:
            x = (x - lo) / width
        obs_min[act] = np.fmin(obs_min[act], x)
        obs_max[act] = np.fmax(obs_max[act], x)
        nn = j + 1
        mo = mu[rr, arm]
        d = x - mo
        mo = mo + d / nn.astype(np.float64)
        mean[act, arm] = mo
        M2[act, arm] = m2[rr, arm] + d * (x - mo)
        N[act, arm] = nn
        sums[act, arm] += x
    rec = pick_max(mean, tie)
    return {
        "recommendation": rec.astype(np.int64),
        "counts": N,
        "pulls": N.sum(axis=1).astype(np.int64),
        "stopped": stopped,
    }


def _choose(code, p, noise, g, n, mu, m2, var, sums, sd, tr, t, best, pend, chal, scale):
    """Arm to pull for the rows g (indices into the active arrays) past the warm start;
    scale: (rows,) reward scale (tau in its units, var_floor in its square)."""
    n, mu, m2, var, sums, sd, tr, t, best = n[g], mu[g], m2[g], var[g], sums[g], sd[g], tr[g], t[g], best[g]
    scale = scale[g][:, None]
    S, K = n.shape
    Nf = n.astype(np.float64)
    if code == 0:  # VarDE: w_i^2 max(s_i^2, var_floor)^ve / (N_i (N_i + 1)), w = softmax(mu / tau)
        w = np.exp((mu - mu.max(axis=1, keepdims=True)) / (p["tau"] * scale))
        with np.errstate(divide="ignore", invalid="ignore"):
            v = np.maximum(m2 / (Nf - 1.0), p["var_floor"] * scale * scale)
            if p["variance_exponent"] != 1.0:
                v = v ** p["variance_exponent"]
            sc = w * w * v / (Nf * (Nf + 1.0))
        sc = np.where(n < 2, np.inf, sc)
        return pick_max(sc, tr)
    if code == 1:  # uniform: least pulled
        return pick_max(-Nf, tr)
    if code in (2, 3):  # LUCB / KL-LUCB: round = (h, l); h now, l next step
        pe = pend[g]
        return np.where(pe >= 0, pe, best)
    if code == 4:  # Track-and-Stop, D-tracking with forced exploration (G&K 2016, Sec. 3.1)
        tf = t.astype(np.float64)
        under = Nf < (np.sqrt(tf) - 0.5 * K)[:, None]
        forced = under.any(axis=1)
        out = np.zeros(S, dtype=np.int64)
        if forced.any():
            out[forced] = pick_max(-Nf[forced], tr[forced], under[forced])
        f = ~forced
        if f.any():
            w = wstar(mu[f], var[f], best[f], noise, int(p["tas_bisection_iters"]))
            out[f] = pick_max(tf[f, None] * w - Nf[f], tr[f])
        return out
    # code == 5: top-two Thompson sampling (Russo 2016), beta = tts_beta
    vfs = p["var_floor"] * scale * scale  # (rows, 1): var_floor in units of scale^2
    th = posterior_draw(sd, t, np.zeros(1), n, mu, m2, sums, noise, vfs)[:, 0]
    lead = pick_max(th, tr)
    coin = bs.u01(bs.key(sd, bs.ALGO_STREAM + np.uint64(P_COIN), t.astype(np.uint64), 0)) < p["tts_beta"]
    out = lead.copy()
    need = np.flatnonzero(~coin)
    cap = int(p["tts_max_resample"])
    if noise == 1:
        if need.size:
            out[need] = _gauss_challenger(sd[need], t[need], lead[need], n[need], mu[need], var[need], tr[need], cap)
        return out
    r0, chunk = 1, 4
    while need.size and r0 <= cap:  # redraws r0 .. r0 + R - 1 at once (same draws as one by one)
        R = min(chunk, cap - r0 + 1)
        rs = np.arange(r0, r0 + R)
        th = posterior_draw(sd[need], t[need], rs, n[need], mu[need], m2[need], sums[need], noise, vfs[need])
        M = need.size
        j = pick_max(th.reshape(M * R, K), np.repeat(tr[need], R, axis=0)).reshape(M, R)
        li = lead[need]
        hit = j != li[:, None]
        first = np.argmax(hit, axis=1)
        found = hit.any(axis=1)
        out[need[found]] = j[np.arange(M), first][found]
        if r0 + R - 1 == cap:  # give up: best of the last draw among the other arms
            lf = np.flatnonzero(~found)
            if lf.size:
                elig = np.ones((lf.size, K), dtype=bool)
                elig[np.arange(lf.size), li[lf]] = False
                out[need[lf]] = pick_max(th[lf, R - 1], tr[need[lf]], elig)
            found[:] = True
        need = need[~found]
        r0 += R
        chunk = min(chunk * 4, 256)
    return out
