"""Fixed-budget best-arm identification engine (kernel family ``bai``).

``run_fixed_budget(table, algo, budget, seeds, params)`` runs one bandit run per seed of one
algorithm for ``budget`` pulls and returns each run's recommended arm and pull counts. The hot
loop is C++ (``icml26/csrc/cpu/bai_cpu.cpp``, seeds in parallel); the NumPy twin
``icml26.ops._ref.bai`` (vectorised across seeds) is the fallback and the test oracle.

Rewards come only from the counter-based sampler (``bandit_sampler.h`` and its twin): the j-th
pull of arm k in run ``seed`` returns ``sample(seed, k, j)`` (common random numbers across
algorithms); exact ties are broken by a per-run random ``tie_rank``, never by arm index.

Algorithms (``ALGOS``, hyper-parameters in ``DEFAULTS``): ``varde`` (VarDE, Luong et al., ICML
2026, arXiv 2608.21995, after the authors' BAI code: pull argmax w_i^2 max(s_i^2, var_floor) /
(N_i (N_i + 1)), w = the smoother's gradient, default softmax(mu / tau); robust location
estimates ``mean_estimator`` mom / trimmed are ours), ``uniform``, ``successive-rejects`` and
``ucb-e`` (Audibert, Bubeck & Munos, COLT 2010), ``sequential-halving`` (Karnin, Koren & Somekh,
ICML 2013), ``ugape`` (Gabillon, Ghavamzadeh & Lazaric, NIPS 2012) and
``continuous-rejects`` (Wang, Tzeng & Proutiere, NeurIPS 2023). Reward scale: ``reward_range`` (lo, hi) or None
(the range observed online). The numbered steps, smoothers and every rule's equations:
docs/bai-engine.md, "Specification".
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
