"""Best-arm identification: VarDE (Luong et al., ICML 2026, arXiv 2608.21995) beside the
standard algorithms, in one harness with common random numbers.

Two settings (Audibert & Bubeck 2010; Garivier & Kaufmann 2016):

- fixed budget (``budget``): each run pulls ``budget`` times and recommends an arm; we report
  the error probability P(recommendation is not a best arm) with a Wilson 95% interval and
  the simple regret E[mu* - mu_rec], over ``seeds`` independent runs;
- fixed confidence (``delta``): each run samples until its stopping rule fires and
  recommends an arm; we report the stopping time (mean, 90% quantile) and the empirical
  error rate, which must stay below delta.

VarDE (paper, abstract and the authors' BAI code; see ``icml26.ops.bai``): smooth the
decision max_i mu_i by Y = tau * log sum_i exp(mu_i / tau); by the delta method
Var(Y) ~ sum_i w_i^2 sigma_i^2 / N_i with w = softmax(mu / tau) = dY/dmu; each pull goes to
the arm whose next sample most reduces it, i.e. argmax_i w_i^2 sigma_i^2 / (N_i (N_i + 1)).

The per-pull loops run in C++ (``icml26/csrc/cpu/bai_cpu.cpp``, ``bai_fc_cpu.cpp``; many
seeds as one batch), with NumPy twins in ``icml26/ops/_ref`` as fallback and test oracle.
Run ``run(cfg, seed=...)``: a generator of flat records (``result`` ..., then ``summary``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Mapping, Optional, Union

import numpy as np

from icml26.core.errors import InputError
from icml26.core.limits import check_work
from icml26.core.progress import progress
from icml26.core.settings import Work
from icml26.core.stats import wilson_interval
from icml26.methods.exploration.bai_report import below_delta, plot, summarize  # noqa: F401  (bai.plot)
from icml26.methods.exploration.bandit_env import KINDS, load_env, parse_reward_range
from icml26.methods.exploration.traffic_bandit import INSTANCES, builtin_traffic_env
from icml26.ops import bai as budget_engine  # NumPy only at import; the C++ kernels load on first use
from icml26.ops import bai_fc as confidence_engine

KIND_EMPIRICAL = KINDS["empirical"]

# fixed budget runs the budget engine's algorithms and the confidence engine's sampling rules
BUDGET_ALGOS = budget_engine.ALGOS + tuple(a for a in confidence_engine.ALGOS if a not in budget_engine.ALGOS)
CONFIDENCE_ALGOS = confidence_engine.ALGOS
# every hyper-parameter of either engine (each one is a Config field of the same name)
PARAM_FIELDS = tuple(
    dict.fromkeys(k for eng in (budget_engine, confidence_engine) for d in eng.DEFAULTS.values() for k in d)
)
BUILTIN_DIR = Path(__file__).resolve().parent / "bandits"


@dataclass(frozen=True)
class Config:
    """Settings of ``icml26 bai``. Algorithm hyper-parameters left at None take the
    algorithm's documented default (``icml26.ops.bai.DEFAULTS`` / ``icml26.ops.bai_fc.DEFAULTS``)."""

    env: str = ""  # bandit YAML path, or a built-in name (see builtin_envs())
    algo: tuple[str, ...] = ("all",)  # algorithms to run, or "all"
    budget: tuple[int, ...] = ()  # fixed-budget setting(s): pulls per run
    delta: tuple[float, ...] = ()  # fixed-confidence setting(s): error level in (0, 1)
    seeds: int = 1000  # independent runs per (algo, setting)
    max_pulls: int = 1_000_000  # fixed confidence: cap per run (run counted as not stopped)
    backend: str = "auto"  # auto | ext | ref
    # reward scale: [lo, hi] (every scale parameter in units of hi - lo), "online" (the range
    # of the rewards observed so far in each run), or None = the env file's reward_range if it
    # declares one, else "online". The config record holds the value used.
    reward_range: Optional[Union[tuple[float, float], str]] = None
    # ---- algorithm hyper-parameters; None = the engine's documented default ----
    # VarDE (authors' code defaults: tau 0.1, var_floor 0.01, warm start 1 round)
    tau: Optional[float] = None  # temperature of the soft maximum (reward units)
    var_floor: Optional[float] = None  # lower bound on the empirical variance
    warm_start: Optional[int] = None  # budget: rounds pulling every arm; confidence: samples per arm (>= 2)
    smoother: Optional[str] = None  # lse | constant | sparsemax | entmax | pairwise | power
    variance_exponent: Optional[float] = None  # score = w^2 (s^2)^ve / (N (N+1)); 1 = delta method
    use_influence_weights: Optional[bool] = None  # ablation: False -> w = 1
    use_empirical_variance: Optional[bool] = None  # ablation: False -> s^2 = 1
    const_c: Optional[float] = None  # constant smoother: weight of the empirical best
    entmax_alpha: Optional[float] = None  # entmax smoother
    pairwise_delta: Optional[float] = None  # pairwise soft-max smoother
    power_p: Optional[float] = None  # power-mean smoother
    mean_estimator: Optional[str] = None  # fixed budget: mean | mom | trimmed (heavy tails; see icml26.ops.bai)
    mom_groups: Optional[int] = None  # mom: number of blocks
    trim: Optional[float] = None  # trimmed: fraction cut at each end
    # fixed-budget baselines
    ucbe_a: Optional[float] = None  # UCB-E exploration a in sqrt(a / N)
    ugape_a: Optional[float] = None  # UGapE exploration a
    cr_variant: Optional[str] = None  # continuous rejects: A (aggressive) | C (conservative)
    # fixed-confidence rules
    noise_model: Optional[str] = None  # auto | gaussian | bernoulli (GLR statistics, KL bounds)
    threshold: Optional[str] = None  # heuristic log((1 + log t)/delta) | theory
    budget_delta: Optional[float] = None  # LUCB / KL-LUCB confidence level when run with a budget
    tas_bisection_iters: Optional[int] = None  # Track-and-Stop: bisection steps for w*
    tts_beta: Optional[float] = None  # Top-Two TS: probability of pulling the leader
    tts_max_resample: Optional[int] = None  # Top-Two TS: redraws to find a challenger

    def work(self) -> list:
        """Pulls simulated over all runs: seeds x algorithms x (the sum of the budgets, or --delta values
        x max_pulls, a run's worst case), against MAX_TOTAL_PULLS; checked up front, before the bandit
        is read (``check_limits`` adds the CPU-time estimate and the memory on the arms read)."""
        if not self.budget and not self.delta:
            return []
        try:
            n_algo = len(expand_algos(self))
        except InputError:  # an algorithm without a stopping rule: validate() says so
            return []
        if self.budget:
            per_run, what = float(sum(self.budget)), "--seeds, --budget or the number of --algo"
            counted = "seeds x algorithms x the sum of the budgets"
        else:
            per_run = float(len(self.delta)) * self.max_pulls
            what = "--set max_pulls=N, --seeds or the number of --algo"
            counted = "seeds x algorithms x --delta values x max_pulls, a run's worst case"
        amount = float(self.seeds) * n_algo * per_run
        return [Work(amount, MAX_TOTAL_PULLS, "pulls", what, detail=counted, verb="simulate")]

    def __post_init__(self):
        if self.seeds < 1:
            raise ValueError(f"seeds must be >= 1, got {self.seeds}")
        if self.budget and self.delta:
            raise ValueError("give either budget (fixed budget) or delta (fixed confidence), not both")
        for b in self.budget:
            if b < 1:
                raise ValueError(f"budget must be >= 1, got {b}")
        for d in self.delta:
            if not 0.0 < d < 1.0:
                raise ValueError(f"delta must be in (0, 1), got {d}")
        if self.max_pulls < 1:
            raise ValueError(f"max_pulls must be >= 1, got {self.max_pulls}")
        if isinstance(self.reward_range, str):
            if self.reward_range != "online":
                raise ValueError(f"reward_range must be [lo, hi] or 'online', got {self.reward_range!r}")
        elif self.reward_range is not None:
            object.__setattr__(self, "reward_range", parse_reward_range(self.reward_range))
        if self.backend not in ("auto", "ext", "ref"):
            raise ValueError(f"backend must be auto, ext or ref, got {self.backend!r}")
        valid = set(BUDGET_ALGOS) | {"all"}
        for a in self.algo:
            if a not in valid:
                raise ValueError(f"unknown algo {a!r}; valid: {', '.join(BUDGET_ALGOS)}, all")

    @property
    def setting(self) -> str:
        return "confidence" if self.delta else "budget"


def builtin_envs() -> list[str]:
    """Names accepted by ``--env`` besides a path."""
    return sorted(p.stem for p in BUILTIN_DIR.glob("*.yaml")) + sorted(INSTANCES)


def resolve_env_path(env: str, search_dirs: tuple[Path, ...] = ()) -> Path:
    """A path (as given, or relative to ``search_dirs``) or a built-in name -> YAML path."""
    if not env:
        raise InputError("no bandit given: pass --env FILE.yaml or a built-in name (" + ", ".join(builtin_envs()) + ")")
    p = Path(env).expanduser()
    if p.is_file():
        return p
    for d in search_dirs:
        if (d / env).is_file():
            return d / env
    if (BUILTIN_DIR / f"{env}.yaml").is_file():
        return BUILTIN_DIR / f"{env}.yaml"
    if env in INSTANCES:
        return builtin_traffic_env(env)
    if p.is_dir():
        raise InputError(
            f"--env {env!r} is a directory; give an env file (.yaml) or a built-in name ({', '.join(builtin_envs())})"
        )
    raise InputError(f"--env {env!r}: no such file and not a built-in ({', '.join(builtin_envs())})")


def expand_algos(cfg: Config) -> list[str]:
    pool = CONFIDENCE_ALGOS if cfg.delta else BUDGET_ALGOS
    names: list[str] = []
    for a in cfg.algo:
        for x in pool if a == "all" else (a,):
            if x not in names:
                names.append(x)
    if cfg.delta:
        bad = [a for a in names if a not in CONFIDENCE_ALGOS]
        if bad:
            raise InputError(
                f"algo {bad[0]!r} has no stopping rule: fixed confidence (--delta) supports "
                f"{', '.join(CONFIDENCE_ALGOS)}"
            )
    return names


def run_seeds(seed: int, n: int) -> np.ndarray:
    """Run identifiers for ``n`` runs under master seed ``seed`` (uint64)."""
    return np.arange(n, dtype=np.uint64) + np.uint64(seed) * np.uint64(1 << 32)


def resolve_reward_range(cfg: Config, table) -> Union[tuple[float, float], str]:
    """The reward scale a run uses: cfg.reward_range, else the env's declared reward_range,
    else "online"."""
    if cfg.reward_range is not None:
        return cfg.reward_range
    if getattr(table, "reward_range", None) is not None:
        return tuple(table.reward_range)
    return "online"


def _engine_range(cfg: Config, table):
    """Engine argument: (lo, hi), or None for the online scale."""
    rr = resolve_reward_range(cfg, table)
    return None if rr == "online" else rr


def _params_for(cfg: Config, defaults: dict) -> dict:
    return {k: getattr(cfg, k) for k in defaults if hasattr(cfg, k) and getattr(cfg, k) is not None}


CHUNK_PULLS = 20_000_000  # pulls per engine call: bounds the time before Ctrl-C is seen


def run_algo(
    table,
    algo: str,
    cfg: Config,
    seeds: np.ndarray,
    *,
    budget: int | None = None,
    delta: float | None = None,
    on_chunk=None,
) -> dict:
    """One (algo, setting) batch -> raw arrays from the engine, run in chunks of seeds
    (each run depends only on its own seed, so chunking does not change results)."""
    per_run = budget if budget is not None else min(cfg.max_pulls, 20_000)
    size = int(max(64, min(len(seeds), CHUNK_PULLS // max(per_run, 1))))
    parts = []
    for i in range(0, len(seeds), size):
        parts.append(_run_algo(table, algo, cfg, seeds[i : i + size], budget=budget, delta=delta))
        if on_chunk is not None:
            on_chunk(len(seeds[i : i + size]) / len(seeds))
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def _run_algo(
    table, algo: str, cfg: Config, seeds: np.ndarray, *, budget: int | None = None, delta: float | None = None
) -> dict:
    eng = engine_for(algo, cfg)
    rr = _engine_range(cfg, table)
    if eng is budget_engine:
        out = eng.run_fixed_budget(
            table,
            algo,
            budget,
            seeds,
            _params_for(cfg, eng.DEFAULTS.get(algo, {})),
            backend=cfg.backend,
            reward_range=rr,
        )
        out.setdefault("pulls", out["counts"].sum(axis=1))
        out.setdefault("stopped", np.ones(len(seeds), dtype=bool))
        return out
    return eng.run_fixed_confidence(
        table,
        algo,
        seeds,
        _params_for(cfg, eng.DEFAULTS.get(algo, {})),
        delta=delta,
        budget=budget,
        max_pulls=cfg.max_pulls,
        backend=cfg.backend,
        reward_range=rr,
    )


def metrics(table, out: dict) -> dict:
    """error_probability (+ Wilson 95% CI), simple_regret, pulls and mean counts of one batch."""
    rec = np.asarray(out["recommendation"], dtype=np.int64)
    S = rec.shape[0]
    best = np.zeros(table.K, dtype=bool)
    best[table.best_arms] = True
    errors = int((~best[rec]).sum())
    lo, hi = wilson_interval(errors, S)
    regret = table.means.max() - table.means[rec]
    pulls = np.asarray(out["pulls"], dtype=np.float64)
    return {
        "error_probability": errors / S,
        "error_probability_ci": [lo, hi],
        "simple_regret": float(regret.mean()),
        "_pulls": pulls,
        "_stopped": np.asarray(out["stopped"], dtype=bool),
        "_counts_mean": np.asarray(out["counts"], dtype=np.float64).mean(axis=0),
    }


# Up-front limits, checked by validate() before any record.
MAX_TOTAL_PULLS = 2e10  # pulls over all runs (~30 min at the fast kernels' 1e7 pulls/s); fixed
#                          confidence counts every run at max_pulls (its worst case: a run that never stops)
MAX_CPU_SECONDS = 3600  # fixed budget: the estimate below, one core (the abm2010 recipe: ~35 min)
MAX_RESULT_BYTES = 4e9  # arrays kept per run (recommendation, counts (K,), pulls, ...): see result_bytes()
# Fixed budget, seconds per pull on one core = a + b K (ns below) + the reward draw (SAMPLE_NS, mean
# over the arms). Fitted to `benchmarks/bai.py --only-estimate` (varde-3groups K = 10, varde-geom14
# K = 14: gaussian arms; gk2016-1 K = 4: bernoulli arms); every algorithm there within 1.1x of the fit
# (docs/bai.md). An algorithm missing here counts at the slowest rate.
SECONDS_PER_PULL = {  # algo: (a, b) in ns
    "uniform": (2.0, 0.5),
    "successive-rejects": (2.0, 0.75),
    "sequential-halving": (2.0, 0.75),
    "varde": (36.0, 3.5),
    "ucb-e": (0.0, 5.75),
    "continuous-rejects": (4.0, 5.75),
    "ugape": (0.0, 9.5),
    "lucb": (38.0, 10.75),
    "kl-lucb": (70.0, 8.0),
    "track-and-stop": (474.0, 11.0),
    "top-two-ts": (572.0, 45.0),
}
# the fixed-confidence rules under the bernoulli noise model (KL bisections, Beta posterior draws)
# (gk2016-1 K = 4 and abm2010-2 K = 20)
SECONDS_PER_PULL_BERNOULLI = {
    "kl-lucb": (835.0, 738.0),
    "track-and-stop": (5543.0, 2437.0),
    "top-two-ts": (1850.0, 100.0),
}
SAMPLE_NS = {0: 4.0, 1: 30.0, 4: 4.0}  # bernoulli, gaussian, empirical; student-t / lognormal: 60
SLOWEST_PER_PULL = max(SECONDS_PER_PULL.values(), key=lambda v: v[0] + 16 * v[1])

# varde with mean_estimator=trimmed: seconds per (pull x reward of the pulled arm), measured on
# varde-geom14 (budget 8e4 x 4 seeds and 3.2e5 x 1 seed: 7.6e-10), rounded up
SECONDS_PER_TRIMMED_ELEMENT = 1e-9


def engine_for(algo: str, cfg: Config):
    """The engine module that runs ``algo`` in ``cfg``'s setting."""
    return budget_engine if not cfg.delta and algo in budget_engine.ALGOS else confidence_engine


def validate(cfg: Config, table) -> None:
    """Every check that can fail, done before any output; raises InputError.

    Checks the setting, the algorithms, the budgets against each algorithm's minimum, every
    hyper-parameter against the engines' rules, that each hyper-parameter set is used by
    at least one selected algorithm, and the total amount of work."""
    if not cfg.budget and not cfg.delta:
        raise InputError("choose a setting: --budget N (fixed budget) or --delta D (fixed confidence)")
    algos = expand_algos(cfg)
    for b in cfg.budget:
        if b < table.K:
            raise InputError(f"budget {b} is smaller than the number of arms ({table.K})")
    used: set[str] = set()
    for algo in algos:
        eng = engine_for(algo, cfg)
        keys = eng.DEFAULTS.get(algo, {})
        used.update(keys)
        try:
            p = eng.resolve_params(algo, _params_for(cfg, keys))
            if eng is confidence_engine:  # the bernoulli model needs rewards inside the range
                eng.noise_of(table, p["noise_model"], _engine_range(cfg, table))
        except ValueError as e:
            raise InputError(f"{algo}: {e}") from None
        if eng is budget_engine:
            for b in cfg.budget:
                need = eng.min_budget(algo, table.K)
                if b < need:
                    raise InputError(f"{algo} needs a budget of at least {need} on {table.K} arms, got {b}")
    check_estimator(cfg)
    unused = [k for k in PARAM_FIELDS if getattr(cfg, k) is not None and k not in used]
    if unused:
        raise InputError(f"{unused[0]} is not a parameter of any selected algorithm ({', '.join(algos)})")
    check_limits(cfg, table, algos)


ESTIMATOR_FIELDS = ("mean_estimator", "mom_groups", "trim")  # VarDE, fixed budget only


def check_estimator(cfg: Config) -> None:
    """InputError when VarDE's location-estimate options are given with --delta (the stopping
    rules use the running means), or ``trim`` / ``mom_groups`` without the estimator that reads
    them (``trimmed`` / ``mom``)."""
    given = [k for k in ESTIMATOR_FIELDS if getattr(cfg, k) is not None]
    if given and cfg.delta:
        raise InputError(f"{given[0]} is a fixed-budget option of varde: use --budget, not --delta")
    if cfg.trim is not None and cfg.mean_estimator != "trimmed":
        raise InputError("trim applies only with mean_estimator=trimmed: add --set mean_estimator=trimmed or drop trim")
    if cfg.mom_groups is not None and cfg.mean_estimator != "mom":
        raise InputError(
            "mom_groups applies only with mean_estimator=mom: add --set mean_estimator=mom or drop mom_groups"
        )


def result_bytes(K: int) -> int:
    """Peak bytes held per run (seed) by run(): the engine's output for one algorithm
    (recommendation, pulls: int64; counts: K int64; stopped), its chunks while they are
    concatenated, the previous algorithm's output and metrics()'s float64 copies, plus the
    seed itself: ~8 (3K + 13) bytes (measured: ~300 bytes per seed on 10 arms)."""
    return 8 * (3 * K + 13)


def estimate_seconds(cfg: Config, table, algos: list[str]) -> float:
    """Up-front CPU seconds (one core) of a fixed-budget run: pulls x each algorithm's seconds
    per pull on the table's K arms (SECONDS_PER_PULL, SAMPLE_NS), plus the trimmed mean's re-sorting."""
    K = table.K
    draw = float(np.mean([SAMPLE_NS.get(int(k), 60.0) for k in np.asarray(table.kind)]))
    secs = 0.0
    for a in algos:
        a_ns, b_ns = SECONDS_PER_PULL.get(a, SLOWEST_PER_PULL)
        if a in SECONDS_PER_PULL_BERNOULLI and engine_for(a, cfg) is confidence_engine:
            p = confidence_engine.resolve_params(a, _params_for(cfg, confidence_engine.DEFAULTS[a]))
            if confidence_engine.noise_of(table, p["noise_model"], _engine_range(cfg, table)) == "bernoulli":
                a_ns, b_ns = SECONDS_PER_PULL_BERNOULLI[a]
        secs += cfg.seeds * sum(cfg.budget) * (a_ns + b_ns * K + draw) * 1e-9
    if "varde" in algos and cfg.mean_estimator == "trimmed":
        # the trimmed mean re-sorts the pulled arm's N_i rewards: O(N_i) a pull, ~budget^2 / K a run
        secs += cfg.seeds * sum(b * b for b in cfg.budget) / K * SECONDS_PER_TRIMMED_ELEMENT
    return secs


def check_limits(cfg: Config, table, algos: list[str]) -> None:
    """InputError when the run would take more than ~30 minutes of CPU or more than a few GB
    of memory (the limits above); every message names the flags to lower."""
    K = table.K
    n_algo = len(algos)
    which = (
        "--seeds, --budget or the number of --algo"
        if cfg.budget
        else "--set max_pulls=N, --seeds or the number of --algo"
    )
    if cfg.budget:
        per_run, counted = sum(cfg.budget), "seeds x algorithms x the sum of the budgets"
    else:
        per_run, counted = (
            len(cfg.delta) * cfg.max_pulls,
            "seeds x algorithms x --delta values x max_pulls, a run's worst case",
        )
    check_work(cfg.seeds * n_algo * per_run, MAX_TOTAL_PULLS, "simulate", "pulls", which, detail=counted)
    if cfg.budget:
        check_work(
            estimate_seconds(cfg, table, algos),
            MAX_CPU_SECONDS,
            "take",
            "seconds of CPU",
            which,
            detail="pulls x each algorithm's measured seconds per pull on one core",
        )
    need = cfg.seeds * result_bytes(K)
    if need > MAX_RESULT_BYTES:
        raise InputError(
            f"--seeds {cfg.seeds} would keep ~{need / 1e9:.1f} GB of per-run results in memory "
            f"({result_bytes(K)} bytes per seed on {K} arms; limit {MAX_RESULT_BYTES / 1e9:.0f} GB); "
            f"lower --seeds to at most {int(MAX_RESULT_BYTES // result_bytes(K))}"
        )


def run(cfg: Config, *, seed: int = 0, table=None, done: Mapping[tuple, dict] | None = None) -> Iterator[dict]:
    """Yield an ``env`` record, one ``result`` record per (algo, setting), then a ``summary`` record.

    table: an ArmTable (else ``cfg.env`` is loaded). done: result records of an interrupted run
    of the same config and seed, keyed by (algo, budget, delta) (None for the other setting;
    ``icml26.core.output.previous_results``): yielded as they are, not recomputed.
    Raises InputError on bad input."""
    if table is None:
        table = load_env(resolve_env_path(cfg.env))
    validate(cfg, table)
    algos = expand_algos(cfg)
    settings = [("budget", b) for b in cfg.budget] or [("delta", d) for d in cfg.delta]
    seeds = run_seeds(seed, cfg.seeds)
    yield {
        "kind": "env",
        "env": table.name,
        "arms": table.K,
        "labels": list(table.labels),
        "means": table.means.tolist(),
        "stds": np.sqrt(table.variances).tolist(),
        "best_arms": table.best_arms.tolist(),
        "complexity_h1": table.complexity_h1(),
        # per arm: values an empirical arm resamples (null: a parametric arm), missing cells dropped ('missing: drop')
        "values": [
            int(table.emp_offsets[k + 1] - table.emp_offsets[k]) if int(table.kind[k]) == KIND_EMPIRICAL else None
            for k in range(table.K)
        ],
        "missing_dropped": list(table.dropped) if table.dropped else [0] * table.K,
        # the reward scale used: [lo, hi] (declared) or "online" (observed range per run)
        "reward_range": _json_range(resolve_reward_range(cfg, table)),
    }
    results = []
    done = done or {}
    if cfg.backend != "ref":  # load (or build) the kernels now, so that `seconds` times the runs only
        for eng in {engine_for(a, cfg) for a in algos}:
            eng.backend()
    with progress(len(algos) * len(settings), "bai") as bar:
        for kind, v in settings:
            for algo in algos:
                key = (algo, v if kind == "budget" else None, v if kind == "delta" else None)
                if key in done:  # --resume: computed before the interruption
                    results.append(done[key])
                    yield done[key]
                    bar.advance()
                    continue
                t0 = time.perf_counter()
                out = run_algo(table, algo, cfg, seeds, **{kind: v}, on_chunk=bar.advance)
                secs = time.perf_counter() - t0
                m = metrics(table, out)
                rec = {
                    "kind": "result",
                    "algo": algo,
                    "env": table.name,
                    kind: v,
                    "seeds": cfg.seeds,
                    "error_probability": m["error_probability"],
                    "error_probability_ci": m["error_probability_ci"],
                    "simple_regret": m["simple_regret"],
                }
                if kind == "delta":
                    pulls = m["_pulls"]
                    rec["stopping_time_mean"] = float(pulls.mean())
                    rec["stopping_time_q90"] = float(np.quantile(pulls, 0.9))
                    rec["stopped_fraction"] = float(m["_stopped"].mean())
                    rec["error_below_delta"] = below_delta(m["error_probability_ci"], v)
                rec["pull_share"] = (m["_counts_mean"] / max(m["_counts_mean"].sum(), 1.0)).round(4).tolist()
                rec["seconds"] = secs
                results.append(rec)
                yield rec
    yield summarize(results, cfg)


def _json_range(rr):
    return list(rr) if isinstance(rr, tuple) else rr
