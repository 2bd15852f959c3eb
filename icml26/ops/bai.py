"""Fixed-budget best-arm identification engine (kernel family ``bai``).

Runs many independent bandit runs (one per seed) of one algorithm for a fixed budget of
pulls and returns each run's recommended arm and per-arm pull counts. The hot loop is C++
(``icml26/csrc/cpu/bai_cpu.cpp``, runs in parallel over seeds); the NumPy twin
:mod:`icml26.ops._ref.bai` (vectorised across seeds) is the fallback and the test oracle.

Rewards come only from the counter-based sampler (``bandit_sampler.h`` and its NumPy twin):
the reward of the j-th pull (0-based) of arm k in run ``seed`` is ``sample(seed, k, j)``,
so all algorithms see the same reward stream per arm (common random numbers). Exact ties
in any argmax/argmin are broken by a per-run random rank ``tie_rank`` (larger wins),
never by arm index. Every algorithm below recommends one arm per run.

Algorithms (``ALGOS``) and their hyper-parameters (``DEFAULTS``)
----------------------------------------------------------------
``varde`` -- Variance Driven Exploration (Luong, Nguyen, Ta, Tran & Dam, ICML 2026,
arXiv 2608.21995; the rule below follows the authors' public BAI code, see
docs/bai-engine.md). The decision is smoothed by Y(mu) (default log-sum-exp with
temperature tau); by the delta method Var(Y) ~= sum_i w_i^2 sigma_i^2 / N_i with
w = dY/dmu. One more pull of arm i lowers this by w_i^2 sigma_i^2 (1/N_i - 1/(N_i+1)) =
w_i^2 sigma_i^2 / (N_i (N_i + 1)).

  1. Warm start: pull every arm ``warm_start`` times, round by round, each round in a
     per-run random order (this only matters if the budget ends inside a round).
  2. Per arm keep Welford's mean mu_i, variance s_i^2 = M2_i / (N_i - 1), count N_i.
  3. Each remaining pull goes to argmax_i score_i with
     score_i = w_i^2 * max(s_i^2, var_floor)^variance_exponent / (N_i (N_i + 1)),
     score_i = +inf while N_i < 2 (the code's initial variance is +inf).
  4. Recommend argmax_i mu_i.

  Smoothers (``smoother``; w only matters up to a common factor):
  ``lse`` w = softmax(mu / tau) (the paper's default, tau = 0.1);
  ``constant`` w_best = const_c, others 1 (i.e. c/(K+c-1) vs 1/(K+c-1));
  ``sparsemax`` w = sparsemax(mu / tau) (Martins & Astudillo 2016);
  ``entmax`` w = entmax_alpha-entmax(mu / tau) (Peters, Niculae & Martins 2019; bisection);
  ``pairwise`` gradient of the left fold s <- (s+b)/2 + sqrt(((s-b)/2)^2 + pairwise_delta^2)
  over the arms in index order (RECONSTRUCTION: the code's tree shape is unknown);
  ``power`` gradient of the power mean (power_p) of x = mu - min(mu) + tau,
  w_i ~ x_i^(p-1) (RECONSTRUCTION: the shift that makes x > 0 is ours).
  Ablations: ``use_influence_weights=False`` -> w = 1 (pure variance rule);
  ``use_empirical_variance=False`` -> sigma^2 = 1 (weights only).
  Not implemented: the code's optional EMA of the variance (ema_alpha, default 0 = off).
  Location estimate (``mean_estimator``; ours, for heavy tails, not in the VarDE code):
  ``mean`` (default) the running mean; ``mom`` the median of means (Nemirovski & Yudin 1983;
  for bandits Bubeck, Cesa-Bianchi & Lugosi, IEEE Trans. IT 2013, "Bandits with heavy tail"):
  reward j (0-based) of an arm joins block j mod ``mom_groups``, mu_i = the median of the
  non-empty block means; ``trimmed`` the trimmed mean cutting floor(``trim`` N_i) rewards at
  each end (scipy.stats.trim_mean's rule). The estimate replaces mu_i in the weights and the
  recommendation; the variance s_i^2 stays Welford's. Both are affine-equivariant (scale-free).
  Cost per pull of arm i: O(mom_groups log mom_groups) (mom), O(N_i) (trimmed).

``uniform`` -- round robin over a per-run random order of the arms; exactly ``budget``
pulls (floor(T/K) each, +1 for the first T mod K arms of the order); recommend argmax mu.

``successive-rejects`` -- Audibert, Bubeck & Munos (COLT 2010), Sec. 3:
logbar(K) = 1/2 + sum_{i=2}^K 1/i, n_k = ceil((T - K) / (logbar(K) (K + 1 - k))),
phase k = 1..K-1 brings every surviving arm to n_k pulls, then rejects the arm with the
lowest empirical mean; recommend the survivor. It uses n_1 + ... + n_{K-1} + n_{K-1} <= T
pulls (the rest of the budget is left unused, as in the paper). Needs T >= K + 1.

``sequential-halving`` -- Karnin, Koren & Somekh (ICML 2013), Algorithm 1: for rounds
r = 0..ceil(log2 K)-1, pull each arm of S_r t_r = floor(T / (|S_r| ceil(log2 K))) times
and keep the ceil(|S_r|/2) arms with the largest mean of THIS round's samples; recommend
the last arm. Unused remainder of the budget is left unused (as in the paper). Needs
T >= K ceil(log2 K) (so that t_0 >= 1).

``ucb-e`` -- Audibert, Bubeck & Munos (COLT 2010), UCB-E: pull argmax_i
mu_i + sqrt(ucbe_a / N_i) (+inf for N_i = 0); recommend argmax mu. The VarDE experiments
use a in {2, 4, 8}; default 2. (The paper's theory value a = 25/36 (T-K)/H1 needs the
unknown complexity H1.)

``ugape`` -- Gabillon, Ghavamzadeh & Lazaric (NIPS 2012), UGapE fixed-budget (Fig. 2,
m = 1): pull each arm once, then for t = K+1..T with beta_k = sqrt(ugape_a / N_k)
(range b = 1 folded into a), U = mu + beta, L = mu - beta, B_k = max_{i != k} U_i - L_k,
J(t) = argmin_k B_k, u_t = argmax_{j != J(t)} U_j, pull the one of {J(t), u_t} with the
larger beta. Recommendation per the paper: J(t*) with t* = argmin_t B_{J(t)}(t) (first
such t). Default a = 2 (the VarDE experiments use a in {2, 4, 8}). Needs T >= K + 1.

``continuous-rejects`` -- Wang, Tzeng & Proutiere, "Best Arm Identification with Fixed
Budget: A Large Deviation Perspective" (NeurIPS 2023), Continuous Rejects; CR-A
(``cr_variant="A"``, aggressive: average gap) and CR-C (``"C"``, conservative: min gap).
As in the VarDE experiment code: pull each arm once; then before each pull, with C the
active set, j = |C| > 2 and l = argmin_{k in C} mu_k, reject l if (no arm was rejected
yet or N_l > max over rejected N) and gap_l > G(beta), where gap_l is
mean_{k in C\\l} mu_k - mu_l (A) or min_{k in C\\l} mu_k - mu_l (C),
beta = logbar(j) sum_{k in C} N_k / (T - sum_{k not in C} N_k), G(beta) = 1/sqrt(beta) - 1;
then pull the least-pulled active arm; recommend argmax of mu over C. Uses all T pulls.

Reward scale (``reward_range`` argument of ``run_fixed_budget``)
----------------------------------------------------------------
Every parameter above that is in reward units is taken relative to a reward scale s, so that
every algorithm's pulls and recommendation are unchanged when the rewards become a r + b
(a > 0): tau, pairwise_delta and the power smoother's shift are multiplied by s; var_floor,
ucbe_a and ugape_a by s^2 (UCB-E's and UGapE's bonuses sqrt(a / N) assume rewards in [0, 1],
i.e. a range b = 1 folded into a); continuous rejects compares gap / s with G(beta).
``reward_range=(lo, hi)`` (a declared range) normalises every reward to (x - lo) / (hi - lo)
at the draw and s = 1; the default (0, 1) leaves rewards and decisions exactly as in the
papers, whose instances lie in [0, 1]. ``reward_range=None`` uses the rewards as drawn with
s = max - min of the rewards observed so far in the run (s = 1 while that is 0), i.e. the
observed range plays the part of hi - lo (RECONSTRUCTION: the VarDE code and scripts use
rewards in [0, 0.4] and an absolute tau; the rule keeps its tau = 0.1 for a unit range).
uniform, successive-rejects and sequential-halving compare means only: s does not enter.

Budget accounting: all algorithms use exactly ``budget`` pulls per run except
successive-rejects and sequential-halving, which leave the rounding remainder unused (as
their papers do). ``budget`` below what an algorithm needs raises ``ValueError``.
"""

from __future__ import annotations

import math

import numpy as np

from icml26.ops._ref import bai as _ref
from icml26.ops._ref import bandit_sampler as _bs

ALGOS = ("varde", "uniform", "successive-rejects", "sequential-halving", "ucb-e", "ugape", "continuous-rejects")

DEFAULTS: dict[str, dict] = {
    "varde": {
        "tau": 0.1,  # LSE temperature (paper default; scripts 0.05/0.1/0.15)
        "var_floor": 0.01,  # lower bound of the variance estimate (paper code default)
        "warm_start": 1,  # pulls of every arm before the score rule (paper code default)
        "smoother": "lse",  # lse | constant | sparsemax | entmax | pairwise | power
        "variance_exponent": 1.0,  # ve in score = w^2 (s^2)^ve / (N (N+1)); 1 = delta method
        "use_influence_weights": True,  # ablation: False -> w = 1
        "use_empirical_variance": True,  # ablation: False -> s^2 = 1
        "const_c": 4.0,  # constant smoother: weight of the empirical best (code default c = 4)
        "entmax_alpha": 1.5,  # entmax smoother alpha (1.5-entmax, Peters et al. 2019)
        "pairwise_delta": 0.1,  # pairwise soft-max smoothing width (same scale as tau)
        "power_p": 4.0,  # power-mean smoother exponent (code default p = 4)
        "mean_estimator": "mean",  # mean | mom | trimmed: the arms' location estimate (heavy tails; ours)
        "mom_groups": 5,  # mom: blocks of the median of means (reward j of an arm joins block j mod g)
        "trim": 0.1,  # trimmed: fraction cut from each end of the sorted rewards
    },
    "uniform": {},
    "successive-rejects": {},
    "sequential-halving": {},
    "ucb-e": {"ucbe_a": 2.0},  # exploration a in sqrt(a / N); VarDE experiments: 2, 4, 8
    "ugape": {"ugape_a": 2.0},  # exploration a in beta = sqrt(a / N); VarDE experiments: 2, 4, 8
    "continuous-rejects": {"cr_variant": "A"},  # "A" aggressive (CR-A) | "C" conservative (CR-C)
}

# flat layout of the C++ parameter vector
_PKEYS = (
    "tau",
    "var_floor",
    "warm_start",
    "smoother",
    "variance_exponent",
    "use_influence_weights",
    "use_empirical_variance",
    "const_c",
    "entmax_alpha",
    "pairwise_delta",
    "power_p",
    "ucbe_a",
    "ugape_a",
    "cr_variant",
    "reward_lo",
    "reward_width",
    "mean_estimator",
    "mom_groups",
    "trim",
)
MEAN_ESTIMATORS = ("mean", "mom", "trimmed")  # codes 0, 1, 2 of the C++ parameter vector
_SOURCES = ["cpu/bai_cpu.cpp"]


def backend() -> str:
    """Load the ``bai`` kernel family; return "ext-cpu" or "ref"."""
    from icml26.core import ext

    return ext.load("bai", _SOURCES, extra_cflags=["-ffp-contract=off"])


def min_budget(algo: str, K: int) -> int:
    """Smallest budget ``algo`` can run with on K arms."""
    if algo in ("successive-rejects", "ugape"):
        return K + 1
    if algo == "sequential-halving":
        return K * _ref.ceil_log2(K)
    return K


def resolve_params(algo: str, params: dict | None) -> dict:
    """DEFAULTS[algo] updated with ``params``; unknown keys or bad values -> ValueError."""
    if algo not in ALGOS:
        raise ValueError(f"unknown algo {algo!r}; valid: {', '.join(ALGOS)}")
    p = dict(DEFAULTS[algo])
    for k, v in (params or {}).items():
        if k not in p:
            valid = ", ".join(sorted(p)) or "(none)"
            raise ValueError(f"unknown parameter {k!r} for algo {algo!r}; valid: {valid}")
        p[k] = v
    if algo == "varde":
        if p["smoother"] not in _ref.SMOOTHERS:
            raise ValueError(f"smoother must be one of {', '.join(_ref.SMOOTHERS)}, got {p['smoother']!r}")
        for k in ("tau", "const_c", "pairwise_delta"):
            if not (isinstance(p[k], (int, float)) and math.isfinite(p[k]) and p[k] > 0):
                raise ValueError(f"{k} must be a finite number > 0, got {p[k]!r}")
        if not (isinstance(p["var_floor"], (int, float)) and math.isfinite(p["var_floor"]) and p["var_floor"] >= 0):
            raise ValueError(f"var_floor must be a finite number >= 0, got {p['var_floor']!r}")
        if isinstance(p["warm_start"], bool) or int(p["warm_start"]) != p["warm_start"] or p["warm_start"] < 0:
            raise ValueError(f"warm_start must be an integer >= 0, got {p['warm_start']!r}")
        if not (isinstance(p["entmax_alpha"], (int, float)) and 1.0 < p["entmax_alpha"] <= 10.0):
            raise ValueError(f"entmax_alpha must be in (1, 10], got {p['entmax_alpha']!r}")
        if not (isinstance(p["power_p"], (int, float)) and p["power_p"] >= 1.0):
            raise ValueError(f"power_p must be >= 1, got {p['power_p']!r}")
        if not (
            isinstance(p["variance_exponent"], (int, float))
            and math.isfinite(p["variance_exponent"])
            and p["variance_exponent"] >= 0
        ):
            raise ValueError(f"variance_exponent must be a finite number >= 0, got {p['variance_exponent']!r}")
        if p["mean_estimator"] not in MEAN_ESTIMATORS:
            raise ValueError(f"mean_estimator must be one of {', '.join(MEAN_ESTIMATORS)}, got {p['mean_estimator']!r}")
        g = p["mom_groups"]
        if isinstance(g, bool) or not isinstance(g, (int, float)) or int(g) != g or not 1 <= g <= 10**6:
            raise ValueError(f"mom_groups must be an integer in [1, 1000000], got {g!r}")
        tr = p["trim"]
        if isinstance(tr, bool) or not isinstance(tr, (int, float)) or not 0.0 <= tr < 0.5:
            raise ValueError(f"trim must be a number in [0, 0.5), got {tr!r}")
        p["mom_groups"], p["trim"] = int(g), float(tr)
        p["warm_start"] = int(p["warm_start"])
        p["use_influence_weights"] = bool(p["use_influence_weights"])
        p["use_empirical_variance"] = bool(p["use_empirical_variance"])
    for k in ("ucbe_a", "ugape_a"):
        if k in p and not (isinstance(p[k], (int, float)) and math.isfinite(p[k]) and p[k] > 0):
            raise ValueError(f"{k} must be a finite number > 0, got {p[k]!r}")
    if "cr_variant" in p:
        v = str(p["cr_variant"]).upper()
        if v not in ("A", "C"):
            raise ValueError(f"cr_variant must be 'A' or 'C', got {p['cr_variant']!r}")
        p["cr_variant"] = v
    return p


def check_reward_range(reward_range):
    """None (online scale) or a (lo, hi) pair of finite numbers with lo < hi -> that value
    (a tuple of floats); ValueError otherwise."""
    if reward_range is None:
        return None
    try:
        lo, hi = (float(v) for v in reward_range)
    except (TypeError, ValueError):
        raise ValueError(f"reward_range must be [lo, hi] (two numbers), got {reward_range!r}") from None
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ValueError(f"reward_range must be [lo, hi] with finite lo < hi, got {list(reward_range)!r}")
    return (lo, hi)


def _pack(p: dict, reward_range=(0.0, 1.0)) -> np.ndarray:
    rr = check_reward_range(reward_range)
    full = {**{k: 0.0 for k in _PKEYS}, **p}
    full["reward_lo"], full["reward_width"] = (0.0, 0.0) if rr is None else (rr[0], rr[1] - rr[0])
    full["smoother"] = _ref.SMOOTHERS[full["smoother"]] if isinstance(full["smoother"], str) else 0
    full["cr_variant"] = 1.0 if full["cr_variant"] == "C" else 0.0
    full["mean_estimator"] = (
        MEAN_ESTIMATORS.index(full["mean_estimator"]) if isinstance(full["mean_estimator"], str) else 0
    )
    full["mom_groups"] = full["mom_groups"] or 1
    return np.asarray([float(full[k]) for k in _PKEYS], dtype=np.float64)


def _arrays(table):
    kind = np.ascontiguousarray(table.kind, dtype=np.int32)
    params = np.ascontiguousarray(table.params, dtype=np.float64).reshape(-1, 3)
    emp_values = np.ascontiguousarray(table.emp_values, dtype=np.float64).reshape(-1)
    emp_offsets = np.ascontiguousarray(table.emp_offsets, dtype=np.int64).reshape(-1)
    K = kind.shape[0]
    if K < 2 or params.shape[0] != K or emp_offsets.shape[0] != K + 1:
        raise ValueError(f"bad arm table: K={K}, params {params.shape}, emp_offsets {emp_offsets.shape}")
    return kind, params, emp_values, emp_offsets


def _seeds(seeds) -> np.ndarray:
    s = np.asarray(seeds)
    if s.ndim != 1 or s.size == 0:
        raise ValueError(f"seeds must be a non-empty 1-D array, got shape {s.shape}")
    if s.dtype.kind not in "iu":
        raise ValueError(f"seeds must be integers, got dtype {s.dtype}")
    if s.dtype.kind == "i" and (s < 0).any():
        raise ValueError("seeds must be >= 0")
    return s.astype(np.uint64)


def _use_ext(backend_: str) -> bool:
    if backend_ not in ("auto", "ext", "ref"):
        raise ValueError(f"backend must be 'auto', 'ext' or 'ref', got {backend_!r}")
    if backend_ == "ref":
        return False
    b = backend()
    if backend_ == "ext" and b != "ext-cpu":
        from icml26.core import ext

        raise RuntimeError(f"the bai C++ kernel is not available ({ext.why('bai')})")
    return b == "ext-cpu"


def run_fixed_budget(
    table,
    algo: str,
    budget: int,
    seeds: np.ndarray,
    params: dict | None = None,
    backend: str = "auto",
    reward_range=(0.0, 1.0),
) -> dict:
    """Run ``algo`` with ``budget`` pulls in each of the S runs ``seeds``.

    table: an ArmTable (``kind (K,)``, ``params (K, 3)``, ``emp_values``, ``emp_offsets``).
    seeds: (S,) non-negative integers, one independent run each.
    params: overrides of ``DEFAULTS[algo]`` (unknown key -> ValueError).
    reward_range: (lo, hi) declared range (rewards normalised to [0, 1] units at the draw;
    default (0, 1): rewards as they are) or None (scale = the range observed online); see
    "Reward scale" above.
    Returns {"recommendation": (S,) int64, "counts": (S, K) int64}.
    Raises ValueError for an unknown algo, a bad parameter or a budget below what the
    algorithm needs (``min_budget``)."""
    p = resolve_params(algo, params)
    kind, prm, ev, eo = _arrays(table)
    K = kind.shape[0]
    if isinstance(budget, bool) or int(budget) != budget:
        raise ValueError(f"budget must be an integer, got {budget!r}")
    budget = int(budget)
    need = min_budget(algo, K)
    if budget < need:
        raise ValueError(f"budget {budget} is too small for {algo} on K={K} arms (needs >= {need})")
    s = _seeds(seeds)
    if _use_ext(backend):
        import torch

        rec, cnt = torch.ops.icml26.bai_fixed_budget(
            torch.from_numpy(kind),
            torch.from_numpy(prm),
            torch.from_numpy(ev),
            torch.from_numpy(eo),
            torch.from_numpy(s.view(np.int64)),
            _ref.ALGO_CODES[algo],
            budget,
            torch.from_numpy(_pack(p, reward_range)),
        )
        return {"recommendation": rec.numpy(), "counts": cnt.numpy()}
    rec, cnt = _ref.run_fixed_budget(kind, prm, ev, eo, s, algo, budget, p, check_reward_range(reward_range))
    return {"recommendation": rec, "counts": cnt}


def sample_rewards(table, seeds, arms, idx, backend: str = "auto") -> np.ndarray:
    """Rewards sample(seed, arm, idx) for (S,) arrays -> (S,) float64 (the shared sampler)."""
    kind, prm, ev, eo = _arrays(table)
    s = _seeds(seeds)
    a = np.ascontiguousarray(arms, dtype=np.int64).reshape(-1)
    j = np.ascontiguousarray(idx, dtype=np.int64).reshape(-1)
    if not (s.shape == a.shape == j.shape):
        raise ValueError(f"seeds, arms, idx must have the same shape, got {s.shape}, {a.shape}, {j.shape}")
    if a.size and (a.min() < 0 or a.max() >= kind.shape[0]):
        raise ValueError(f"arms must be in [0, {kind.shape[0]}), got range [{a.min()}, {a.max()}]")
    if j.size and j.min() < 0:
        raise ValueError("idx must be >= 0")
    if _use_ext(backend):
        import torch

        return torch.ops.icml26.bandit_sample(
            torch.from_numpy(kind),
            torch.from_numpy(prm),
            torch.from_numpy(ev),
            torch.from_numpy(eo),
            torch.from_numpy(s.view(np.int64)),
            torch.from_numpy(a),
            torch.from_numpy(j),
        ).numpy()
    return _bs.sample(kind, prm, ev, eo, s, a, j.astype(np.uint64))


# ---------------------------------------------------------------------------- plain loop
_MASK = (1 << 64) - 1


def _sm(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def _key(seed: int, stream: int, idx: int, c: int) -> int:
    return _sm(_sm(_sm(seed) ^ ((stream * 0xD1B54A32D192ED03 + c) & _MASK)) ^ idx)


def _u01(h: int) -> float:
    return (h >> 11) * 2.0**-53


def _sample_scalar(kind, prm, ev, eo, seed: int, k: int, j: int) -> float:
    """One reward, same formulas as bandit_sampler.h, in plain Python."""
    kd = int(kind[k])
    p0, p1, p2 = float(prm[k, 0]), float(prm[k, 1]), float(prm[k, 2])
    if kd == 0:
        return 1.0 if _u01(_key(seed, k, j, 0)) < p0 else 0.0
    if kd in (1, 3):
        u1 = ((_key(seed, k, j, 0) >> 11) + 0.5) * 2.0**-53
        u2 = _u01(_key(seed, k, j, 1))
        z = math.sqrt(-2.0 * math.log(u1)) * math.cos(6.283185307179586 * u2)
        return p0 + p1 * z if kd == 1 else math.exp(math.log(p0) - 0.5 * p1 * p1 + p1 * z)
    if kd == 2:
        for a in range(64):
            U = 2.0 * _u01(_key(seed, k, j, 2 + 2 * a)) - 1.0
            V = 2.0 * _u01(_key(seed, k, j, 3 + 2 * a)) - 1.0
            W = U * U + V * V
            if 0.0 < W <= 1.0:
                return p0 + p1 * U * math.sqrt(p2 * (W ** (-2.0 / p2) - 1.0) / W)
        return p0
    lo, n = int(eo[k]), int(eo[k + 1] - eo[k])
    r = min(int(_u01(_key(seed, k, j, 0)) * n), n - 1)
    return float(ev[lo + r])


def plain_python_varde(table, budget: int, seed: int, params: dict | None = None) -> int:
    """VarDE as a naive per-pull Python loop (one run, scalar sampler): the benchmark's
    baseline. Same rule, sampler and tie-breaking as the kernels; supports the ``lse``
    smoother and the two ablation flags. Returns the recommended arm."""
    p = resolve_params("varde", params)
    if p["smoother"] != "lse":
        raise ValueError("plain_python_varde supports only smoother='lse'")
    kind, prm, ev, eo = _arrays(table)
    K = kind.shape[0]
    if budget < K:
        raise ValueError(f"budget {budget} is too small for varde on K={K} arms (needs >= {K})")
    seed = int(seed)
    A = int(_ref.bs.ALGO_STREAM)
    tie = [_u01(_key(seed, A, k, 0)) for k in range(K)]
    N = [0] * K
    mean = [0.0] * K
    M2 = [0.0] * K

    def pull(k: int) -> None:
        x = _sample_scalar(kind, prm, ev, eo, seed, k, N[k])
        n = N[k] + 1
        d = x - mean[k]
        mean[k] += d / n
        M2[k] += d * (x - mean[k])
        N[k] = n

    def best(vals: list[float]) -> int:
        b = 0
        for k in range(1, K):
            if vals[k] > vals[b] or (vals[k] == vals[b] and tie[k] > tie[b]):
                b = k
        return b

    t = 0
    for r in range(p["warm_start"]):  # 1. warm start, shuffled rounds
        order = sorted(range(K), key=lambda k: (_u01(_key(seed, A + _ref.P_WARM_ORDER, k, r)), k))
        for k in order:
            if t < budget:
                pull(k)
                t += 1
    tau, floor, ve = p["tau"], p["var_floor"], p["variance_exponent"]
    while t < budget:  # 3. score rule
        m = max(mean)
        score = []
        for k in range(K):
            if N[k] < 2:
                score.append(math.inf)
                continue
            w = math.exp((mean[k] - m) / tau) if p["use_influence_weights"] else 1.0
            v = max(M2[k] / (N[k] - 1.0), floor) if p["use_empirical_variance"] else 1.0
            if ve != 1.0:
                v = v**ve
            score.append(w * w * v / (N[k] * (N[k] + 1.0)))
        pull(best(score))
        t += 1
    return best(mean)  # 4. recommend argmax mu
