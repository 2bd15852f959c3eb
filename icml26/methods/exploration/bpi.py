"""Best-policy identification (BPI) with a generative model: VarDE-BPI beside uniform
sampling and KLB-TS's gap-based allocation.

Problem. A tabular discounted MDP (mdps.py) can be queried at any (s, a) for a reward and a
next state. After ``budget`` queries (or when a stopping rule certifies epsilon-optimality
with confidence 1 - delta), recommend a policy pi; quality = policy gap
``V*(rho) - V^pi(rho)`` and P(gap <= epsilon), against exact values.

All algorithms sample every (s, a) ``warm_start`` times, then follow their rule, re-planning at
t = 2SA and then every max(SA, 5% of t) samples, and recommend the greedy policy of the
empirical MDP (value iteration on P_hat, r_hat):
- ``uniform``: the least-sampled (s, a) (round robin).
- ``klb-ts`` (Al Marjani & Proutiere, ICML 2021, "Adaptive sampling for best policy
  identification in MDPs"), simplified: plug-in estimates of their upper bound on the
  characteristic time, its minimising allocation, D-tracking with forced exploration.
- ``varde`` (VarDE-BPI, reconstruction: the paper's BPI text could not be read): each sample
  goes where it most reduces the occupancy-weighted variance of the soft (mellowmax) decision
  at every state, argmax d pi_tau^2 sigma2 / (N (N+1)), with a standard-error temperature.
Stopping rule (``delta`` given; Hoeffding-style, ours): stop when the optimistic / pessimistic
values of the recommended policy are within epsilon at rho.

Formulas (H_sa, H*, the allocation, the VarDE steps, the stopping bonus) and the measurements
behind the choices: docs/bpi.md, "Specification"."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator, Mapping

import numpy as np

from icml26.core.errors import InputError
from icml26.core.limits import check_work
from icml26.core.progress import progress
from icml26.core.recipe import parse_choices
from icml26.core.settings import Work
from icml26.core.stats import wilson_interval as wilson
from icml26.core.verdict import verdict
from icml26.methods.exploration import mdps as M
from icml26.ops.mcts import run_seeds

ALGOS = ("varde", "uniform", "klb-ts")
BLOCK = 256


def parse_algos(spec: str) -> list[str]:
    """ "all" or a comma list of ALGOS -> list; ValueError on an unknown name."""
    return parse_choices(spec, ALGOS)


@dataclass(frozen=True)
class Config:
    mdp: str = (
        "riverswim"  # built-in (riverswim, garnet, frozenlake4x4, frozenlake8x8; ?key=value options) or .yaml/.npz
    )
    algo: str = "all"  # all | comma list of varde, uniform, klb-ts
    epsilon: float = 0.1  # target accuracy on V*(rho) - V^pi(rho)
    delta: float | None = None  # confidence of the stopping rule; None = fixed budget
    budget: int = 20000  # samples (the cap when delta is given)
    seeds: int = 100  # independent runs
    warm_start: int = 2  # samples of every (s, a) before the rule starts (>= 1)
    kappa: float = 1.0  # varde temperature of state s = kappa x standard error of Q_hat(s, .); 0: fixed tau
    tau: float = 0.5  # varde temperature when kappa = 0, in units of the value range
    var_floor: float = 1e-4  # varde floor on the reward variance
    gap_floor: float | None = None  # klb-ts floor on gaps; None: epsilon (1 - gamma) / 2

    def work(self) -> list:
        """The samples of the run (seeds x algorithms x budget) against MAX_TOTAL_SAMPLES (check_samples)."""
        runs = self.seeds * len(parse_algos(self.algo))
        return [
            Work(
                float(max(self.budget, MIN_RUN_SAMPLES)) * runs,
                MAX_TOTAL_SAMPLES,
                "samples",
                "--seeds, --budget or the number of --algo",
                f"seeds x algorithms x --budget, each run counted as at least {MIN_RUN_SAMPLES}",
                "draw",
            )
        ]

    def __post_init__(self):
        parse_algos(self.algo)
        for k in ("epsilon", "delta", "kappa", "tau", "var_floor", "gap_floor"):
            v = getattr(self, k)
            if v is not None and not math.isfinite(v):
                raise ValueError(f"{k} must be a finite number, got {v}")
        if not self.epsilon >= 0:
            raise ValueError(f"epsilon must be >= 0, got {self.epsilon}")
        if self.delta is not None and not 0 < self.delta < 1:
            raise ValueError(f"delta must be in (0, 1), got {self.delta}")
        if self.budget < 1 or self.seeds < 1 or self.warm_start < 1:
            raise ValueError("budget, seeds and warm_start must be >= 1")
        if not self.tau > 0 or not self.var_floor > 0:
            raise ValueError("tau and var_floor must be > 0")
        if not self.kappa >= 0:
            raise ValueError(f"kappa must be >= 0, got {self.kappa}")
        if self.gap_floor is not None and not self.gap_floor > 0:
            raise ValueError(f"gap_floor must be > 0, got {self.gap_floor}")


class Generative:
    """Generative model with per-(s, a) random streams: the j-th sample of (s, a) is the same
    for every algorithm in a run (common random numbers)."""

    def __init__(self, mdp: M.MDP, seed: int):
        self.mdp, self.seed = mdp, seed
        self.cum = np.cumsum(mdp.P, axis=2)
        self.cum[:, :, -1] = 1.0
        self.buf: dict[int, tuple[list, list]] = {}
        self.gens: dict[int, np.random.Generator] = {}

    def sample(self, s: int, a: int, j: int) -> tuple[float, int]:
        """(reward, next state) of the j-th query of (s, a)."""
        sa = s * self.mdp.A + a
        if sa not in self.buf:
            self.gens[sa] = np.random.default_rng([self.seed, sa])
            self.buf[sa] = ([], [])
        r, n = self.buf[sa]
        while j >= len(r):
            g = self.gens[sa]
            z = g.standard_normal(BLOCK)
            u = g.random(BLOCK)
            r.extend((self.mdp.R[s, a] + self.mdp.noise[s, a] * z).tolist())
            n.extend(np.minimum(np.searchsorted(self.cum[s, a], u, side="right"), self.mdp.S - 1).tolist())
        return r[j], n[j]


def _soft_pi(P, R, gamma, tau, iters=100):
    """Soft (entropy-regularised) policy iteration: (Q (S, A), V (S,), pi (S, A)) with
    V(s) = tau log sum_a exp(Q(s, a) / tau), Q = R + gamma P V."""
    S = P.shape[0]
    Q = R.copy()
    V = None
    for _ in range(iters):
        z = (Q - Q.max(axis=1, keepdims=True)) / tau
        pi = np.exp(z)
        pi /= pi.sum(axis=1, keepdims=True)
        # V^pi = sum_a pi (Q - tau log pi): (I - gamma P_pi) V = sum_a pi (R - tau log pi)
        Ppi = np.einsum("sa,sat->st", pi, P)
        rhs = (pi * (R - tau * np.log(np.maximum(pi, 1e-300)))).sum(axis=1)
        Vn = np.linalg.solve(np.eye(S) - gamma * Ppi, rhs)
        Q = R + gamma * (P @ Vn)
        if V is not None and np.max(np.abs(Vn - V)) < 1e-10 * (1 + np.abs(Vn).max()):
            V = Vn
            break
        V = Vn
    m = Q.max(axis=1)
    V = m + tau * np.log(np.exp((Q - m[:, None]) / tau).sum(axis=1))
    pi = np.exp((Q - m[:, None]) / tau)
    return Q, V, pi / pi.sum(axis=1, keepdims=True)


class Learner:
    """Statistics of one run: counts, reward moments, transition counts."""

    def __init__(self, mdp: M.MDP):
        S, A = mdp.S, mdp.A
        self.mdp = mdp
        self.N = np.zeros((S, A))
        self.rsum = np.zeros((S, A))
        self.rsq = np.zeros((S, A))
        self.cnt = np.zeros((S, A, S))
        self.pi = None

    def add(self, s, a, r, t):
        self.N[s, a] += 1
        self.rsum[s, a] += r
        self.rsq[s, a] += r * r
        self.cnt[s, a, t] += 1

    def model(self):
        N = np.maximum(self.N, 1)
        Ph = self.cnt / N[:, :, None]
        Ph[self.N == 0] = 1.0 / self.mdp.S
        return Ph, self.rsum / N

    def greedy(self):
        Ph, Rh = self.model()
        Q, V, pi = M.policy_iteration(Ph, Rh, self.mdp.gamma, self.pi)
        self.pi = pi
        return Q, V, pi

    def rvar(self):
        N = self.N
        m = self.rsum / np.maximum(N, 1)
        return np.where(N >= 2, np.maximum(self.rsq - N * m * m, 0.0) / np.maximum(N - 1, 1), np.inf)


def varde_weights(L: Learner, cfg: Config) -> np.ndarray:
    """(S, A) d(s) pi_tau(a|s)^2 sigma2(s,a): steps 1-3 of VarDE-BPI."""
    mdp = L.mdp
    Ph, Rh = L.model()
    Q, V, _ = L.greedy()  # (S, A), (S,)
    if cfg.kappa == 0:  # fixed temperature in units of the value range, soft policy iteration
        tau = cfg.tau * max(float(V.max() - V.min()), 1e-9)
        Q, V, pi = _soft_pi(Ph, Rh, mdp.gamma, tau)
    ev = Ph @ V
    tv = np.maximum(Ph @ (V * V) - ev * ev, 0.0)
    rv = L.rvar()
    sig2 = np.maximum(np.where(np.isfinite(rv), rv, 0.0), cfg.var_floor) + mdp.gamma**2 * tv  # (S, A)
    if cfg.kappa > 0:  # tau(s) = kappa x standard error of Q_hat(s, .); with a stopping rule, its confidence width
        width2 = sig2 / np.maximum(L.N, 1) if cfg.delta is None else bonus(L, cfg) ** 2
        tau_s = cfg.kappa * np.sqrt(width2.mean(axis=1))  # (S,)
        pi = np.exp((Q - Q.max(axis=1, keepdims=True)) / tau_s[:, None])
        pi /= pi.sum(axis=1, keepdims=True)
    Ppi = np.einsum("sa,sat->st", pi, Ph)  # (S, S)
    d = np.linalg.solve((np.eye(mdp.S) - mdp.gamma * Ppi).T, mdp.rho)  # (S,) discounted occupancy
    return d[:, None] * pi * pi * sig2


def klb_weights(L: Learner, cfg: Config) -> np.ndarray:
    """(S, A) target allocation w of KLB-TS's closed form (plug-in)."""
    mdp = L.mdp
    g = mdp.gamma
    S, A = mdp.S, mdp.A
    if A == 1:  # one action per state: every policy is optimal, the characteristic time is 0 and
        return np.full(
            (S, 1), 1.0 / S
        )  # any allocation is optimal; uniform (the formula's w_{s,pi(s)} = 1/S when sum H = 0)
    Ph, _ = L.model()
    Q, V, pi = L.greedy()
    floor = cfg.gap_floor if cfg.gap_floor is not None else max(cfg.epsilon * (1 - g) / 2, 1e-6)
    gap = np.maximum(V[:, None] - Q, floor)
    ev = Ph @ V
    var = np.maximum(Ph @ (V * V) - ev * ev, 0.0)
    md = np.max(np.where(Ph > 0, np.abs(V[None, None, :] - ev[:, :, None]), 0.0), axis=2)
    opt = np.zeros((S, A), bool)
    opt[np.arange(S), pi] = True
    H = (2 + 16 * var) / gap**2 + 6 * md ** (4 / 3) / gap ** (4 / 3)
    H[opt] = 0.0
    dmin = gap[~opt].min() if (~opt).any() else floor
    vo, mo = var[opt].max(), md[opt].max()
    Hs = min(
        27 / (dmin**2 * (1 - g) ** 3),
        max(16 * vo / (dmin**2 * (1 - g) ** 2), 6 * mo ** (4 / 3) / (dmin ** (4 / 3) * (1 - g) ** (4 / 3))),
    )
    sH = H.sum()
    den = math.sqrt(sH) + math.sqrt(Hs)
    if not den > 0:  # both bounds vanish (gaps floored beyond float range): no preference, sample uniformly
        return np.full((S, A), 1.0 / (S * A))
    w = np.where(opt, math.sqrt(Hs) / (S * den), H / (math.sqrt(sH) * den) if sH > 0 else 0.0)
    return w / w.sum()


def bonus(L: Learner, cfg: Config) -> np.ndarray:
    """(S, A) confidence widths b of the stopping rule (module docstring); needs cfg.delta."""
    mdp = L.mdp
    g = mdp.gamma
    N = np.maximum(L.N, 1)
    span = max(float(mdp.R.max() - mdp.R.min()), 1e-12) / (1 - g)
    Lg = math.log(mdp.S * mdp.A / cfg.delta) + 2 * np.log1p(N)
    return float(mdp.noise.max()) * np.sqrt(2 * Lg / N) + g * span * np.sqrt(Lg / (2 * N))


def certified(L: Learner, pi: np.ndarray, cfg: Config) -> bool:
    """The stopping rule (module docstring; its bonus in docs/bpi.md, "Specification")."""
    mdp = L.mdp
    g = mdp.gamma
    S = mdp.S
    if cfg.delta is None or (L.N < 1).any():
        return False
    Ph, Rh = L.model()
    b = bonus(L, cfg)
    lo, hi = float(mdp.R.min()) / (1 - g), float(mdp.R.max()) / (1 - g)
    Qp, Vp, _ = M.policy_iteration(Ph, np.minimum(Rh + b, hi), g)
    Vp = np.minimum(Vp, hi)
    idx = np.arange(S)
    Vm = np.maximum(np.linalg.solve(np.eye(S) - g * Ph[idx, pi], (Rh - b)[idx, pi]), lo)
    return float(mdp.rho @ (Vp - Vm)) <= cfg.epsilon


def identify(mdp: M.MDP, algo: str, cfg: Config, seed: int) -> tuple[np.ndarray, int, bool]:
    """One run: (recommended policy (S,), samples used, stopped by the rule)."""
    gen = Generative(mdp, seed)
    L = Learner(mdp)
    S, A = mdp.S, mdp.A
    t = 0
    for _ in range(cfg.warm_start):  # 1. warm start
        for s in range(S):
            for a in range(A):
                if t >= cfg.budget:
                    break
                r, nx = gen.sample(s, a, int(L.N[s, a]))
                L.add(s, a, r, nx)
                t += 1
    W = None
    next_plan = t
    stopped = False
    flatN = L.N.reshape(-1)
    while t < cfg.budget:
        if t >= next_plan:  # 2. plan: weights of the algorithm, stopping check
            next_plan = t + max(S * A, int(math.ceil(0.05 * t)))
            if cfg.delta is not None:
                _, _, pi = L.greedy()
                if certified(L, pi, cfg):
                    stopped = True
                    break
            if algo == "varde":
                W = varde_weights(L, cfg).reshape(-1)
                score = W / (flatN * (flatN + 1))
            elif algo == "klb-ts":
                W = klb_weights(L, cfg).reshape(-1)
        # 3. pick (s, a)
        if algo == "uniform":
            k = int(np.argmin(flatN))
        elif flatN.min() < math.sqrt(t) - S * A / 2:  # forced exploration (both rules)
            k = int(np.argmin(flatN))
        elif algo == "varde":
            k = int(np.argmax(score))
        else:
            k = int(np.argmax(t * W - flatN))
        s, a = divmod(k, A)
        r, nx = gen.sample(s, a, int(L.N[s, a]))
        L.add(s, a, r, nx)
        t += 1
        if algo == "varde":
            score[k] = W[k] / (flatN[k] * (flatN[k] + 1))
    if not stopped and cfg.delta is not None:
        _, _, pi = L.greedy()
        stopped = certified(L, pi, cfg)
    _, _, pi = L.greedy()
    return pi, t, stopped


# Samples are drawn one at a time in Python: 4.5e4 (varde) to 1.7e5 (uniform) per second on one
# core of this project's 2-core machine (riverswim, garnet, frozenlake8x8), ~7e4/s for the three
# rules together, so 1e8 is ~25 minutes with --algo all (~37 with varde alone); larger runs are
# refused up front. Each run also costs ~0.3-0.6 ms of set-up and evaluation (~50 samples'
# worth): a run counts as at least MIN_RUN_SAMPLES.
MAX_TOTAL_SAMPLES = 1e8
MIN_RUN_SAMPLES = 50
MAX_RUN_SAMPLES = 5e7  # one run keeps its samples (~40 bytes each): larger budgets are refused up front
MAX_PLAN_FLOPS = 1e14  # planning (linear solves on S x S) over all runs


def plans_per_run(budget: int, S: int, A: int, warm_start: int) -> int:
    """How many times identify() replans in a run of ``budget`` samples (its schedule)."""
    SA = S * A
    t = min(budget, warm_start * SA)
    n = 0
    while t < budget:
        n += 1
        t += max(SA, int(math.ceil(0.05 * t)))
    return n + 1


def check_samples(cfg: Config) -> None:
    """InputError when the run would draw too many samples (hours of CPU) or keep too many in
    one run (memory); needs only the config, so it runs before the MDP is built."""
    runs = cfg.seeds * len(parse_algos(cfg.algo))
    check_work(
        float(max(cfg.budget, MIN_RUN_SAMPLES)) * runs,
        MAX_TOTAL_SAMPLES,
        "draw",
        "samples",
        "--seeds, --budget or the number of --algo",
        detail=f"seeds x algorithms x --budget, each run counted as at least {MIN_RUN_SAMPLES}",
    )
    if cfg.budget > MAX_RUN_SAMPLES:
        raise InputError(
            f"--budget {cfg.budget} would keep ~{cfg.budget * 40 / 1e9:.1e} GB of samples per run "
            f"(limit {MAX_RUN_SAMPLES:.0e} samples per run); lower --budget"
        )


def check_planning(cfg: Config, mdp: M.MDP) -> None:
    """InputError when planning on ``mdp`` (linear solves on S x S, at every replanning of every
    run) would take hours of CPU."""
    S, A = mdp.S, mdp.A
    runs = cfg.seeds * len(parse_algos(cfg.algo))
    # ~4 solves per plan (greedy, varde, stopping rule) + up to 200 policy-iteration solves for the exact values
    flops = (runs * plans_per_run(cfg.budget, S, A, cfg.warm_start) * 4.0 + 200) * (S**3 + S * S * A)
    check_work(
        flops,
        MAX_PLAN_FLOPS,
        "spend",
        f"flops planning on {S} states",
        "--seeds, --budget or the number of --algo, or use a smaller MDP",
    )


def prepare(cfg: Config) -> M.MDP:
    """Validate everything a run needs before any result: the samples' limits (before the MDP is
    built), the MDP (and its size), then the planning cost on it."""
    check_samples(cfg)
    mdp = M.load_mdp(cfg.mdp)
    check_planning(cfg, mdp)
    return mdp


def run(
    cfg: Config, *, seed: int = 0, mdp: M.MDP | None = None, done: Mapping[tuple, dict] | None = None
) -> Iterator[dict]:
    """Yield one ``result`` record per algo, then a ``summary``. ``mdp``: from prepare(cfg).
    ``done``: result records of an interrupted run of the same config and seed, keyed by
    ``(algo,)`` (``icml26.core.output.previous_results``): yielded as they are, not recomputed."""
    if mdp is None:
        mdp = prepare(cfg)
    ex = M.exact(mdp)
    algos = parse_algos(cfg.algo)
    seeds = run_seeds(seed, cfg.seeds)
    results = []
    done = done or {}
    with progress(len(algos) * len(seeds), "bpi") as bar:
        for algo in algos:
            if (algo,) in done:
                results.append(done[(algo,)])
                yield done[(algo,)]
                bar.advance(len(seeds))
                continue
            gaps, used, stops = [], [], []
            for s in seeds:
                pi, t, st = identify(mdp, algo, cfg, s)
                gaps.append(max(M.policy_gap(mdp, pi, ex["v_rho"]), 0.0))
                used.append(t)
                stops.append(st)
                bar.advance()
            gaps = np.array(gaps)
            k = int((gaps <= cfg.epsilon + 1e-12).sum())
            n = len(seeds)
            r = {
                "kind": "result",
                "algo": algo,
                "mdp": mdp.name,
                "samples": float(np.mean(used)),
                "seeds": n,
                "p_eps_optimal": k / n,
                "p_eps_optimal_ci": list(wilson(k, n)),
                "policy_gap": float(gaps.mean()),
                "policy_gap_se": float(gaps.std(ddof=1) / math.sqrt(n)) if n > 1 else None,
                "p_optimal": float((gaps <= 1e-9 * (1 + abs(ex["v_rho"]))).mean()),
                "stopped": float(np.mean(stops)) if cfg.delta is not None else None,
            }
            results.append(r)
            yield r

    # a winner only when its Wilson interval on P(eps-optimal) separates it (exact ties: none)
    best = verdict(results, "p_eps_optimal", "algo", lower=False, ci_key="p_eps_optimal_ci", metric="algo")
    yield {
        "kind": "summary",
        "mdp": mdp.name,
        "states": mdp.S,
        "actions": mdp.A,
        "gamma": mdp.gamma,
        "v_star": ex["v_rho"],
        "epsilon": cfg.epsilon,
        "budget": cfg.budget,
        "delta": cfg.delta,
        **best,
        "p_eps_optimal": {r["algo"]: r["p_eps_optimal"] for r in results},
        "policy_gap": {r["algo"]: r["policy_gap"] for r in results},
    }
