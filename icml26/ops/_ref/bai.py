"""NumPy twin of ``icml26/csrc/cpu/bai_cpu.cpp``: fixed-budget best-arm identification,
vectorised ACROSS runs (seeds).

Every algorithm advances all S runs in lock step: per step, a handful of NumPy operations
on ``(S, K)`` arrays. It is the fallback when the C++ extension cannot be built and the
oracle of the parity tests, so every floating-point operation that decides a pull is
written in the same order as in the C++ kernel (sequential sums over arms, the same
Welford update, no normalisation where a scale does not change an argmax).

Rewards come only from :mod:`icml26.ops._ref.bandit_sampler`: the reward of the j-th pull
(0-based) of arm k in run ``seed`` is ``sample(seed, k, j)``. Exact ties in any
argmax/argmin are broken by ``tie_rank`` (larger rank wins), never by arm index.

The algorithms themselves (steps, equations, sources) are documented in
:mod:`icml26.ops.bai`; this module takes the already-validated, complete parameter dict.
"""

from __future__ import annotations

import math

import numpy as np

from icml26.ops._ref import bandit_sampler as bs

ALGO_CODES = {
    "varde": 0,
    "uniform": 1,
    "successive-rejects": 2,
    "sequential-halving": 3,
    "ucb-e": 4,
    "ugape": 5,
    "continuous-rejects": 6,
}
SMOOTHERS = {"lse": 0, "constant": 1, "sparsemax": 2, "entmax": 3, "pairwise": 4, "power": 5}
# algorithm-internal randomness: key(seed, ALGO_STREAM + purpose, counter, c), purpose >= 1
P_UNIFORM_ORDER = 1
P_WARM_ORDER = 2


# ---------------------------------------------------------------------------- helpers
def logbar(K: int) -> float:
    """log-bar(K) = 1/2 + sum_{i=2}^{K} 1/i (Audibert, Bubeck & Munos 2010), summed in order."""
    s = 0.5
    for i in range(2, K + 1):
        s += 1.0 / i
    return s


def sr_schedule(K: int, budget: int) -> list[int]:
    """Successive Rejects cumulative per-arm counts n_1..n_{K-1} (ABM 2010, Sec. 3):
    n_k = ceil( (n - K) / (logbar(K) (K + 1 - k)) )."""
    lb = logbar(K)
    return [int(math.ceil(float(budget - K) / (lb * float(K + 1 - k)))) for k in range(1, K)]


def ceil_log2(K: int) -> int:
    r, v = 0, 1
    while v < K:
        v *= 2
        r += 1
    return r


def _pick_max(score: np.ndarray, tie: np.ndarray, eligible: np.ndarray | None = None) -> np.ndarray:
    """Row-wise argmax of ``score`` (S, K) over ``eligible``; exact ties -> larger tie rank."""
    if eligible is None:
        eligible = np.ones(score.shape, dtype=bool)
    s = np.where(eligible, score, -np.inf)
    best = s.max(axis=1, keepdims=True)
    cand = eligible & (s == best)
    return np.argmax(np.where(cand, tie, -1.0), axis=1)


def _pick_min(score: np.ndarray, tie: np.ndarray, eligible: np.ndarray | None = None) -> np.ndarray:
    if eligible is None:
        eligible = np.ones(score.shape, dtype=bool)
    s = np.where(eligible, score, np.inf)
    best = s.min(axis=1, keepdims=True)
    cand = eligible & (s == best)
    return np.argmax(np.where(cand, tie, -1.0), axis=1)


def _order(seeds: np.ndarray, K: int, purpose: int, c: int = 0) -> np.ndarray:
    """(S, K) per-run random permutation of the arms: ascending u01(key(seed, ALGO+purpose, k, c))."""
    u = bs.u01(bs.key(seeds[:, None], bs.ALGO_STREAM + np.uint64(purpose), np.arange(K, dtype=np.uint64)[None, :], c))
    return np.argsort(u, axis=1, kind="stable")


class _State:
    """Per-run, per-arm Welford statistics (S, K): N pulls, mean, M2; per run the smallest and
    largest reward observed (S,).

    reward_range (lo, hi): every reward is normalised to (x - lo) / (hi - lo) at the draw and
    the scale is 1; None: rewards as drawn, the scale is the observed range (1 while 0)."""

    def __init__(self, table, seeds: np.ndarray, reward_range=(0.0, 1.0)):
        self.kind = np.asarray(table[0], dtype=np.int32)
        self.params = np.asarray(table[1], dtype=np.float64)
        self.emp_values = np.asarray(table[2], dtype=np.float64)
        self.emp_offsets = np.asarray(table[3], dtype=np.int64)
        self.seeds = seeds
        S, K = seeds.shape[0], self.kind.shape[0]
        self.S, self.K = S, K
        self.N = np.zeros((S, K), dtype=np.int64)
        self.mean = np.zeros((S, K), dtype=np.float64)
        self.M2 = np.zeros((S, K), dtype=np.float64)
        self.rows = np.arange(S)
        if reward_range is None:
            self.lo, self.width = 0.0, 0.0
        else:
            self.lo, self.width = float(reward_range[0]), float(reward_range[1]) - float(reward_range[0])
        self.obs_min = np.full(S, np.inf)
        self.obs_max = np.full(S, -np.inf)
        self.hook = None  # called as hook(rows, arms, x, n) after each pull (VarDE's RobustLoc)

    def scale(self) -> np.ndarray:
        """(S,) reward scale: 1 with a declared range, else max - min observed (1 while 0)."""
        if self.width > 0.0:
            return np.ones(self.S)
        r = self.obs_max - self.obs_min
        return np.where(r > 0.0, r, 1.0)

    def draw(self, rows: np.ndarray, arms: np.ndarray) -> np.ndarray:
        """Rewards of the next pull of ``arms`` in runs ``rows`` (does not update)."""
        return bs.sample(
            self.kind,
            self.params,
            self.emp_values,
            self.emp_offsets,
            self.seeds[rows],
            arms,
            self.N[rows, arms].astype(np.uint64),
        )

    def pull(self, rows: np.ndarray, arms: np.ndarray) -> np.ndarray:
        """Pull ``arms`` (one per row in ``rows``) and apply the Welford update:
        n = N + 1; d = x - mean; mean += d / n; M2 += d (x - mean)."""
        if rows.size == 0:
            return np.zeros(0)
        x = self.draw(rows, arms)
        if self.width > 0.0:
            x = (x - self.lo) / self.width
        np.minimum.at(self.obs_min, rows, x)
        np.maximum.at(self.obs_max, rows, x)
        n = self.N[rows, arms] + 1
        m = self.mean[rows, arms]
        d = x - m
        m = m + d / n.astype(np.float64)
        self.mean[rows, arms] = m
        self.M2[rows, arms] += d * (x - m)
        self.N[rows, arms] = n
        if self.hook is not None:
            self.hook(rows, arms, x, n)
        return x

    def pull_to(self, target: np.ndarray) -> None:
        """Pull every (run, arm) until N == target (S, K); the order of pulls of different
        arms does not matter (each arm's reward stream is fixed)."""
        while True:
            r, a = np.nonzero(self.N < target)
            if r.size == 0:
                return
            self.pull(r, a)


# ---------------------------------------------------------------------------- VarDE
def _pw(x: np.ndarray, e: float) -> np.ndarray:
    return x * x if e == 2.0 else x**e


def varde_weights(mu: np.ndarray, tie: np.ndarray, p: dict, sc=1.0) -> np.ndarray:
    """Unnormalised influence weights w (S, K) of the smoothed decision (scale is irrelevant
    for the argmax of the score). sc: reward scale, scalar or (S, 1): tau and pairwise_delta
    are in units of it."""
    S, K = mu.shape
    sm = p["smoother"]
    tau = p["tau"] * sc
    if sm == "lse":  # w = softmax(mu / tau) up to a factor
        m = mu.max(axis=1, keepdims=True)
        return np.exp((mu - m) / tau)
    if sm == "constant":
        b = _pick_max(mu, tie)
        w = np.ones((S, K))
        w[np.arange(S), b] = p["const_c"]
        return w
    if sm == "sparsemax":  # Martins & Astudillo 2016 on z = mu / tau
        z = mu / tau
        zs = -np.sort(-z, axis=1)
        cs = np.cumsum(zs, axis=1)
        ks = np.arange(1, K + 1, dtype=np.float64)[None, :]
        support = (1.0 + ks * zs) > cs
        kmax = K - np.argmax(support[:, ::-1], axis=1)  # last index where the test holds
        thr = (cs[np.arange(S), kmax - 1] - 1.0) / kmax.astype(np.float64)
        return np.maximum(z - thr[:, None], 0.0)
    if sm == "entmax":  # alpha-entmax (Peters et al. 2019) by bisection on the threshold
        a = p["entmax_alpha"]
        am1 = a - 1.0
        z = mu / tau * am1
        zmax = z.max(axis=1)
        lo = zmax - 1.0
        hi = zmax - (1.0 / K) ** am1
        inv = 1.0 / am1
        for _ in range(50):
            mid = 0.5 * (lo + hi)
            tot = np.zeros(S)
            for k in range(K):
                tot = tot + _pw(np.maximum(z[:, k] - mid, 0.0), inv)
            ge = tot >= 1.0
            lo = np.where(ge, mid, lo)
            hi = np.where(ge, hi, mid)
        return _pw(np.maximum(z - lo[:, None], 0.0), inv)
    if sm == "pairwise":  # gradient of the left fold s <- (s+b)/2 + sqrt(((s-b)/2)^2 + delta^2)
        pd = p["pairwise_delta"] * sc
        d2 = pd * pd
        if np.ndim(d2):
            d2 = d2[:, 0]
        s = mu[:, 0].copy()
        g = np.zeros((S, K))
        g[:, 0] = 1.0
        for k in range(1, K):
            b = mu[:, k]
            h = 0.5 * (s - b)
            r = np.sqrt(h * h + d2)
            da = 0.5 + h / (2.0 * r)
            db = 0.5 - h / (2.0 * r)
            g[:, :k] *= da[:, None]
            g[:, k] = db
            s = 0.5 * (s + b) + r
        return g
    if sm == "power":  # gradient of the power mean (p) of x = mu - min(mu) + tau, up to a factor
        x = mu - mu.min(axis=1, keepdims=True) + tau
        return x ** (p["power_p"] - 1.0)
    raise ValueError(f"unknown smoother {sm!r}")


def varde_score(N: np.ndarray, mean: np.ndarray, M2: np.ndarray, tie: np.ndarray, p: dict, sc=1.0) -> np.ndarray:
    """score_i = w_i^2 max(s_i^2, var_floor sc^2)^ve / (N_i (N_i + 1)); +inf where N_i < 2.
    sc: reward scale (scalar or (S, 1)); tau is in units of sc, var_floor of sc^2."""
    if p["use_influence_weights"]:
        w = varde_weights(mean, tie, p, sc)
    else:
        w = np.ones(mean.shape)
    Nf = N.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        if p["use_empirical_variance"]:
            v = np.maximum(M2 / (Nf - 1.0), p["var_floor"] * sc * sc)
        else:
            v = np.ones(mean.shape)
        if p["variance_exponent"] != 1.0:
            v = v ** p["variance_exponent"]
        sc = w * w * v / (Nf * (Nf + 1.0))
    return np.where(N < 2, np.inf, sc)


def _warm_start(st: _State, budget: int, rounds: int) -> int:
    """Pull every arm ``rounds`` times, round by round, each round in a per-run random order
    (only matters when the budget ends inside a round). Returns the pulls spent."""
    K = st.K
    spent = 0
    for r in range(rounds):
        if spent >= budget:
            break
        take = min(K, budget - spent)
        order = _order(st.seeds, K, P_WARM_ORDER, r)[:, :take]  # (S, take)
        tgt = st.N.copy()
        np.add.at(tgt, (np.repeat(st.rows, take), order.ravel()), 1)
        st.pull_to(tgt)
        spent += take
    return spent


class RobustLoc:
    """VarDE's location estimates under ``mean_estimator`` mom / trimmed, (S, K) in ``loc``
    (the twin of ``RobustLoc`` in bai_cpu.cpp; documented in icml26.ops.bai), updated by
    ``add(rows, arms, x, n)`` after each pull (x the rewards, n the arms' counts after it):
    ``mom``: reward j (0-based) joins block j mod g (running mean per block), loc = median of
    the min(n, g) non-empty block means (0.5 (a + b) of the two middle ones for an even number);
    ``trimmed``: mean of the sorted rewards without floor(trim n) at each end, summed in
    ascending order."""

    def __init__(self, S: int, K: int, kind: str, g: int, trim: float):
        self.kind, self.g, self.trim = kind, max(1, int(g)), float(trim)
        self.loc = np.zeros((S, K))
        if kind == "mom":
            self.bm = np.zeros((S, K, self.g))
            self.bn = np.zeros((S, K, self.g), dtype=np.int64)
        else:
            self.xs = [[[] for _ in range(K)] for _ in range(S)]

    @staticmethod
    def median(vals: list[float]) -> float:
        v = sorted(vals)
        u = len(v)
        return v[u // 2] if u % 2 else 0.5 * (v[u // 2 - 1] + v[u // 2])

    @staticmethod
    def trimmed(v: list[float], trim: float) -> float:
        n = len(v)
        cut = int(trim * n)
        s = 0.0
        for i in range(cut, n - cut):
            s += v[i]
        return s / float(n - 2 * cut)

    def add(self, rows: np.ndarray, arms: np.ndarray, x: np.ndarray, n: np.ndarray) -> None:
        import bisect

        for r, a, xv, nv in zip(rows.tolist(), arms.tolist(), np.asarray(x).tolist(), np.asarray(n).tolist()):
            if self.kind == "mom":
                b = (nv - 1) % self.g
                self.bn[r, a, b] += 1
                m = float(self.bm[r, a, b])
                m = m + (xv - m) / float(self.bn[r, a, b])
                self.bm[r, a, b] = m
                self.loc[r, a] = self.median(self.bm[r, a, : min(nv, self.g)].tolist())
            else:
                v = self.xs[r][a]
                bisect.insort_right(v, xv)
                self.loc[r, a] = self.trimmed(v, self.trim)


def _varde(st: _State, budget: int, tie: np.ndarray, p: dict) -> np.ndarray:
    est = p.get("mean_estimator", "mean")
    loc = None
    if est != "mean":
        rl = RobustLoc(st.S, st.K, est, p["mom_groups"], p["trim"])
        st.hook = rl.add
        loc = rl.loc
    mu = st.mean if loc is None else loc  # st.mean is updated in place by every pull
    spent = _warm_start(st, budget, int(p["warm_start"]))
    for _ in range(budget - spent):
        sc = varde_score(st.N, mu, st.M2, tie, p, st.scale()[:, None])
        st.pull(st.rows, _pick_max(sc, tie))
    st.hook = None
    return _pick_max(mu, tie)


# ---------------------------------------------------------------------------- baselines
def _uniform(st: _State, budget: int, tie: np.ndarray) -> np.ndarray:
    K = st.K
    order = _order(st.seeds, K, P_UNIFORM_ORDER)
    cnt = np.full((st.S, K), budget // K, dtype=np.int64)
    extra = budget % K
    if extra:
        np.add.at(cnt, (np.repeat(st.rows, extra), order[:, :extra].ravel()), 1)
    st.pull_to(cnt)
    return _pick_max(st.mean, tie)


def _successive_rejects(st: _State, budget: int, tie: np.ndarray) -> np.ndarray:
    K = st.K
    active = np.ones((st.S, K), dtype=bool)
    for nk in sr_schedule(K, budget):
        st.pull_to(np.where(active, nk, st.N))
        worst = _pick_min(st.mean, tie, active)
        active[st.rows, worst] = False
    return _pick_max(st.mean, tie, active)


def _sequential_halving(st: _State, budget: int, tie: np.ndarray) -> np.ndarray:
    S, K = st.S, st.K
    L = ceil_log2(K)
    active = np.ones((S, K), dtype=bool)
    size = K
    for _ in range(L):
        t_r = budget // (size * L)
        # round-only means (Karnin et al. 2013 use the samples of the current round only)
        rmean = np.zeros((S, K))
        cnt = np.zeros((S, K), dtype=np.int64)
        tgt = np.where(active, st.N + t_r, st.N)
        while True:
            r, a = np.nonzero(st.N < tgt)
            if r.size == 0:
                break
            x = st.pull(r, a)
            cnt[r, a] += 1
            m = rmean[r, a]
            rmean[r, a] = m + (x - m) / cnt[r, a].astype(np.float64)
        keep = (size + 1) // 2
        # keep the `keep` active arms with the largest round means (ties: larger rank)
        key_mean = np.where(active, rmean, -np.inf)
        order = np.lexsort((-tie, -key_mean), axis=1)  # primary: mean desc, then rank desc
        new = np.zeros((S, K), dtype=bool)
        np.put_along_axis(new, order[:, :keep], True, axis=1)
        active = new & active
        size = keep
    return _pick_max(active.astype(np.float64), tie, active)


def _ucbe(st: _State, budget: int, tie: np.ndarray, a: float) -> np.ndarray:
    for _ in range(budget):
        with np.errstate(divide="ignore"):
            idx = st.mean + st.scale()[:, None] * np.sqrt(a / st.N.astype(np.float64))
        idx = np.where(st.N == 0, np.inf, idx)
        st.pull(st.rows, _pick_max(idx, tie))
    return _pick_max(st.mean, tie)


def _ugape(st: _State, budget: int, tie: np.ndarray, a: float) -> np.ndarray:
    S, K = st.S, st.K
    st.pull_to(np.ones((S, K), dtype=np.int64))
    best_b = np.full(S, np.inf)
    rec = np.zeros(S, dtype=np.int64)
    rows = st.rows
    for _ in range(budget - K):
        beta = st.scale()[:, None] * np.sqrt(a / st.N.astype(np.float64))
        U = st.mean + beta
        Lo = st.mean - beta
        i1 = _pick_max(U, tie)
        not1 = np.ones((S, K), dtype=bool)
        not1[rows, i1] = False
        u2 = np.where(not1, U, -np.inf).max(axis=1)
        u1 = U[rows, i1]
        other = np.where(np.arange(K)[None, :] == i1[:, None], u2[:, None], u1[:, None])
        B = other - Lo  # B_k = max_{i != k} U_i - L_k
        J = _pick_min(B, tie)
        notJ = np.ones((S, K), dtype=bool)
        notJ[rows, J] = False
        u = _pick_max(U, tie, notJ)
        bJ, bu = beta[rows, J], beta[rows, u]
        pickJ = (bJ > bu) | ((bJ == bu) & (tie[rows, J] > tie[rows, u]))
        arm = np.where(pickJ, J, u)
        BJ = B[rows, J]
        better = BJ < best_b
        best_b = np.where(better, BJ, best_b)
        rec = np.where(better, J, rec)
        st.pull(rows, arm)
    return rec


def _continuous_rejects(st: _State, budget: int, tie: np.ndarray, variant: str) -> np.ndarray:
    S, K = st.S, st.K
    rows = st.rows
    st.pull_to(np.ones((S, K), dtype=np.int64))
    active = np.ones((S, K), dtype=bool)
    lbs = np.array([logbar(j) for j in range(K + 1)])
    for _ in range(budget - K):
        j = active.sum(axis=1)
        check = j > 2
        l = _pick_min(st.mean, tie, active)
        nrej = np.where(active, 0, st.N)
        elim_ok = (~active).sum(axis=1) == 0
        elim_ok |= st.N[rows, l] > nrej.max(axis=1)
        others = active.copy()
        others[rows, l] = False
        if variant == "A":
            tot = np.zeros(S)
            for k in range(K):
                tot = tot + np.where(others[:, k], st.mean[:, k], 0.0)
            ref = tot / np.maximum(j - 1, 1).astype(np.float64)
        else:
            ref = np.where(others, st.mean, np.inf).min(axis=1)
        gap = ref - st.mean[rows, l]
        n_act = np.zeros(S)
        n_rej = np.zeros(S)
        for k in range(K):
            n_act = n_act + np.where(active[:, k], st.N[:, k], 0).astype(np.float64)
            n_rej = n_rej + np.where(active[:, k], 0, st.N[:, k]).astype(np.float64)
        denom = float(budget) - n_rej
        with np.errstate(divide="ignore", invalid="ignore"):
            beta = np.where(denom > 0, lbs[j] * n_act / denom, np.inf)
            G = np.where(beta > 0, 1.0 / np.sqrt(beta) - 1.0, np.inf)
        rej = check & elim_ok & (gap > G * st.scale())
        active[rows[rej], l[rej]] = False
        arm = _pick_min(st.N.astype(np.float64), tie, active)
        st.pull(rows, arm)
    return _pick_max(st.mean, tie, active)


# ---------------------------------------------------------------------------- entry point
def run_fixed_budget(
    kind, params, emp_values, emp_offsets, seeds, algo: str, budget: int, p: dict, reward_range=(0.0, 1.0)
):
    """Run ``algo`` for ``budget`` pulls in every run; returns (recommendation (S,), counts (S, K)).
    reward_range: (lo, hi) declared (rewards normalised at the draw), or None (online scale)."""
    seeds = np.asarray(seeds, dtype=np.uint64).reshape(-1)
    st = _State((kind, params, emp_values, emp_offsets), seeds, reward_range)
    tie = bs.tie_rank(seeds, st.K)
    if algo == "varde":
        rec = _varde(st, budget, tie, p)
    elif algo == "uniform":
        rec = _uniform(st, budget, tie)
    elif algo == "successive-rejects":
        rec = _successive_rejects(st, budget, tie)
    elif algo == "sequential-halving":
        rec = _sequential_halving(st, budget, tie)
    elif algo == "ucb-e":
        rec = _ucbe(st, budget, tie, float(p["ucbe_a"]))
    elif algo == "ugape":
        rec = _ugape(st, budget, tie, float(p["ugape_a"]))
    elif algo == "continuous-rejects":
        rec = _continuous_rejects(st, budget, tie, str(p["cr_variant"]).upper())
    else:
        raise ValueError(f"unknown algo {algo!r}")
    return np.asarray(rec, dtype=np.int64), st.N
