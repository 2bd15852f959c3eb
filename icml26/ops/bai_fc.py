"""Fixed-confidence best-arm identification engine (many seeds per call).

``run_fixed_confidence(table, algo, seeds, params, delta=...)`` samples arms with the
algorithm's sampling rule until its stopping rule fires (or ``max_pulls``) and recommends the
empirical best arm; with ``budget=...`` it runs the same sampling rule for exactly ``budget``
pulls (the fixed-budget comparison). The hot loop is C++ (``icml26/csrc/cpu/bai_fc_cpu.cpp``,
seeds in parallel); the NumPy twin ``icml26/ops/_ref/bai_fc.py`` is the fallback and the oracle.

Rewards: the j-th pull of arm k in run ``seed`` returns ``bandit_sampler.sample(seed, k, j)``;
ties are broken by ``tie_rank``. Noise models (``noise_model``): bernoulli KL or heteroscedastic
gaussian with plug-in variances (``auto`` picks bernoulli when every arm lies in [0, 1]).
Stopping: the GLR / Chernoff rule of Garivier & Kaufmann (COLT 2016, Eqs. 14-15) with the
``heuristic`` log((1 + log t) / delta) or ``theory`` thresholds; LUCB1 (Kalyanakrishnan et al.,
ICML 2012) and KL-LUCB (Kaufmann & Kalyanakrishnan, COLT 2013) their own bounds.

Sampling rules: ``varde`` (VarDE, Luong et al., ICML 2026), ``uniform``, ``lucb``, ``kl-lucb``,
``track-and-stop`` (Garivier & Kaufmann 2016, D-tracking with forced exploration, w* by nested
bisection) and ``top-two-ts`` (Russo, COLT 2016, beta = 1/2; the gaussian challenger is a
posterior draw conditioned on argmax != leader, sampled directly by the Karp-Luby-Madras union
sampler, the bernoulli one by redraws). Reward scale: ``reward_range`` (lo, hi) or None
(observed online). Equations, thresholds and defaults: docs/bai-fc-engine.md, "Specification".
"""

from __future__ import annotations

import numpy as np

ALGOS = ("varde", "uniform", "lucb", "kl-lucb", "track-and-stop", "top-two-ts")

_COMMON = {
    "noise_model": "auto",  # auto | bernoulli | gaussian (see module docstring, 2.)
    "threshold": "auto",  # auto | heuristic log((1+log t)/delta) | theory (see 4.)
    "var_floor": 0.01,  # floor of the plug-in variances (VarDE's default, varde.md)
    "warm_start": 2,  # samples of every arm before the sampling rule starts (>= 2)
}
DEFAULTS: dict[str, dict] = {
    # VarDE: tau = 0.1 and variance_exponent = 1 are the authors' defaults (varde.md)
    "varde": {**_COMMON, "tau": 0.1, "variance_exponent": 1.0},
    "uniform": dict(_COMMON),
    # budget_delta: delta of the confidence bounds when run in budget mode
    "lucb": {**_COMMON, "budget_delta": 0.1},
    "kl-lucb": {**_COMMON, "budget_delta": 0.1},
    # 16 halvings of each bracket: w* to ~1e-5, below what D-tracking resolves at t ~ 1e4
    "track-and-stop": {**_COMMON, "tas_bisection_iters": 16},
    # tts_beta = 1/2 (Russo 2016); at most 1000 redraws (bernoulli) / tries (gaussian) of the challenger
    "top-two-ts": {**_COMMON, "tts_beta": 0.5, "tts_max_resample": 1000},
}
_FAMILY = "bai_fc"
_ALGO_ID = {a: i for i, a in enumerate(ALGOS)}


def backend() -> str:
    """Load (JIT-build on first use) the C++ kernel; "ext-cpu" or "ref"."""
    from icml26.core import ext

    return ext.load(_FAMILY, ["cpu/bai_fc_cpu.cpp"], extra_cflags=["-ffp-contract=off"])


def resolve_params(algo: str, params: dict | None) -> dict:
    """DEFAULTS[algo] updated by ``params``; ValueError on an unknown key or bad value."""
    if algo not in DEFAULTS:
        raise ValueError(f"unknown fixed-confidence algorithm {algo!r}; valid: {', '.join(ALGOS)}")
    p = dict(DEFAULTS[algo])
    for k, v in (params or {}).items():
        if k not in p:
            raise ValueError(f"unknown parameter {k!r} for {algo}; valid: {', '.join(sorted(p))}")
        p[k] = v
    if p["noise_model"] not in ("auto", "bernoulli", "gaussian"):
        raise ValueError(f"noise_model must be auto, bernoulli or gaussian, got {p['noise_model']!r}")
    if p["threshold"] not in ("auto", "heuristic", "theory"):
        raise ValueError(f"threshold must be auto, heuristic or theory, got {p['threshold']!r}")
    if not float(p["var_floor"]) > 0:
        raise ValueError(f"var_floor must be > 0, got {p['var_floor']!r}")
    if isinstance(p["warm_start"], bool) or int(p["warm_start"]) != p["warm_start"] or int(p["warm_start"]) < 2:
        raise ValueError(f"warm_start must be an integer >= 2, got {p['warm_start']!r}")
    p["warm_start"] = int(p["warm_start"])
    if "tau" in p and not float(p["tau"]) > 0:
        raise ValueError(f"tau must be > 0, got {p['tau']!r}")
    if "budget_delta" in p and not 0 < float(p["budget_delta"]) < 1:
        raise ValueError(f"budget_delta must be in (0, 1), got {p['budget_delta']!r}")
    if "tas_bisection_iters" in p:
        if int(p["tas_bisection_iters"]) != p["tas_bisection_iters"] or not 1 <= int(p["tas_bisection_iters"]) <= 200:
            raise ValueError(f"tas_bisection_iters must be an integer in [1, 200], got {p['tas_bisection_iters']!r}")
        p["tas_bisection_iters"] = int(p["tas_bisection_iters"])
    if "tts_beta" in p and not 0 < float(p["tts_beta"]) < 1:
        raise ValueError(f"tts_beta must be in (0, 1), got {p['tts_beta']!r}")
    if "tts_max_resample" in p:
        if int(p["tts_max_resample"]) != p["tts_max_resample"] or int(p["tts_max_resample"]) < 1:
            raise ValueError(f"tts_max_resample must be an integer >= 1, got {p['tts_max_resample']!r}")
        p["tts_max_resample"] = int(p["tts_max_resample"])
    return p


def in_unit_interval(table, reward_range=(0.0, 1.0)) -> np.ndarray:
    """(K,) bool: arm k's rewards all lie in ``reward_range`` ([0, 1] by default; bernoulli
    arms {0, 1}, empirical arms by their recorded values; other arms are unbounded)."""
    lo, hi = (0.0, 1.0) if reward_range is None else (float(reward_range[0]), float(reward_range[1]))
    kind = np.asarray(table.kind)
    off = np.asarray(table.emp_offsets)
    ev = np.asarray(table.emp_values)
    out = np.zeros(kind.shape[0], dtype=bool)
    for k in range(kind.shape[0]):
        if kind[k] == 0:
            out[k] = lo <= 0.0 and hi >= 1.0
        elif kind[k] == 4:
            v = ev[off[k] : off[k + 1]]
            out[k] = v.size > 0 and bool(np.all((v >= lo) & (v <= hi)))
    return out


def noise_of(table, noise_model: str, reward_range=(0.0, 1.0)) -> str:
    """Resolve ``noise_model`` ("auto" -> "bernoulli" when every arm lies in the reward range,
    [0, 1] when none is declared); bernoulli on an arm that can leave it -> ValueError."""
    unit = in_unit_interval(table, reward_range)
    where = (
        "[0, 1]"
        if reward_range is None or tuple(map(float, reward_range)) == (0.0, 1.0)
        else f"reward_range [{float(reward_range[0]):g}, {float(reward_range[1]):g}]"
    )
    if noise_model == "auto":
        return "bernoulli" if unit.all() else "gaussian"
    if noise_model == "bernoulli" and not unit.all():
        k = int(np.flatnonzero(~unit)[0])
        lab = table.labels[k] if getattr(table, "labels", None) else f"arm{k}"
        raise ValueError(
            f"noise_model 'bernoulli' needs rewards in {where}, but arm {k} ({lab}) can leave it; "
            "use 'gaussian' or 'auto', or declare the rewards' range as reward_range"
        )
    return noise_model


def run_fixed_confidence(
    table,
    algo: str,
    seeds: np.ndarray,
    params: dict | None = None,
    *,
    delta: float | None = None,
    budget: int | None = None,
    max_pulls: int = 1_000_000,
    backend: str = "auto",
    reward_range=(0.0, 1.0),
) -> dict:
    """Run ``algo`` on ``table`` (an ArmTable) once per seed.

    Exactly one of ``delta`` (fixed confidence: sample until the stopping rule fires or
    ``max_pulls``; then ``stopped`` is False) and ``budget`` (exactly ``budget`` pulls, no
    stopping, recommend the empirical best). ``params`` override DEFAULTS[algo].
    ``reward_range``: (lo, hi) declared (rewards normalised at the draw) or None (scale
    measured online; the bernoulli model then uses (0, 1)); see "Reward scale" above.
    ``backend``: "auto" (C++ if it builds, else NumPy), "ext" (C++, error if unavailable), "ref".

    Returns {"recommendation": (S,) int64, "counts": (S, K) int64, "pulls": (S,) int64,
    "stopped": (S,) bool}.
    """
    p = resolve_params(algo, params)
    if (delta is None) == (budget is None):
        raise ValueError("give exactly one of delta (fixed confidence) or budget (fixed budget)")
    if delta is not None:
        delta = float(delta)
        if not 0.0 < delta < 1.0:
            raise ValueError(f"delta must be in (0, 1), got {delta!r}")
        if isinstance(max_pulls, bool) or int(max_pulls) != max_pulls or int(max_pulls) < 1:
            raise ValueError(f"max_pulls must be an integer >= 1, got {max_pulls!r}")
        max_pulls = int(max_pulls)
    else:
        if isinstance(budget, bool) or int(budget) != budget or int(budget) < 1:
            raise ValueError(f"budget must be an integer >= 1, got {budget!r}")
        budget = int(budget)
    seeds = np.ascontiguousarray(np.asarray(seeds).astype(np.uint64).reshape(-1))
    if seeds.size == 0:
        raise ValueError("seeds must not be empty")
    if backend not in ("auto", "ext", "ref"):
        raise ValueError(f"backend must be auto, ext or ref, got {backend!r}")
    from icml26.ops.bai import check_reward_range

    reward_range = check_reward_range(reward_range)
    noise = noise_of(table, p["noise_model"], reward_range)
    if noise == "bernoulli" and reward_range is None:
        reward_range = (0.0, 1.0)  # the bernoulli model fixes the scale
    if p["threshold"] == "auto":
        p["threshold"] = "heuristic" if noise == "bernoulli" else "theory"
    if table.K < 2:
        raise ValueError(f"need at least 2 arms, got {table.K}")
    tab = (
        np.asarray(table.kind, np.int32),
        np.asarray(table.params, np.float64),
        np.asarray(table.emp_values, np.float64),
        np.asarray(table.emp_offsets, np.int64),
    )
    use = "ref"
    if backend != "ref":
        b = globals()["backend"]()
        if b == "ext-cpu":
            use = "ext"
        elif backend == "ext":
            from icml26.core import ext

            raise RuntimeError(f"the bai_fc C++ kernel is unavailable ({ext.why(_FAMILY)})")
    if use == "ref":
        from icml26.ops._ref import bai_fc as ref

        return ref.run(
            tab,
            seeds,
            algo,
            p,
            ref.NOISE[noise],
            delta=delta,
            budget=budget,
            max_pulls=max_pulls,
            reward_range=reward_range,
        )
    return _run_ext(tab, seeds, algo, p, noise, delta, budget, max_pulls, reward_range)


def _run_ext(tab, seeds, algo, p, noise, delta, budget, max_pulls, reward_range=(0.0, 1.0)) -> dict:
    import torch

    from icml26.ops._ref import bai_fc as ref

    f = torch.tensor(
        [
            float(p["var_floor"]),
            float(p.get("tau", 0.1)),
            float(p.get("variance_exponent", 1.0)),
            float(p.get("tts_beta", 0.5)),
            float(p.get("budget_delta", 0.1)),
            0.0 if reward_range is None else float(reward_range[0]),
            0.0 if reward_range is None else float(reward_range[1]) - float(reward_range[0]),
        ],
        dtype=torch.float64,
    )
    i = torch.tensor(
        [
            p["warm_start"],
            p.get("tas_bisection_iters", 16),
            p.get("tts_max_resample", 1000),
            ref.THRESHOLDS[p["threshold"]],
            ref.NOISE[noise],
        ],
        dtype=torch.int64,
    )
    rec, counts, pulls, stopped = torch.ops.icml26.bai_fc_run(
        torch.from_numpy(tab[0]),
        torch.from_numpy(tab[1]),
        torch.from_numpy(tab[2]),
        torch.from_numpy(tab[3]),
        torch.from_numpy(seeds.view(np.int64)),
        _ALGO_ID[algo],
        f,
        i,
        -1.0 if delta is None else float(delta),
        -1 if budget is None else int(budget),
        int(max_pulls),
    )
    return {
        "recommendation": rec.numpy(),
        "counts": counts.numpy(),
        "pulls": pulls.numpy(),
        "stopped": stopped.numpy().astype(bool),
    }
