"""Pure-exploration Monte Carlo Tree Search: VarDE-MCTS beside UCT, Power-UCT, MENTS,
MDP-GapE, sequential halving and Gumbel sequential halving at the root.

Problem. Given a generative model and a budget of ``n`` simulations from the root, recommend
a root action; quality = probability that it is optimal and simple regret
``V*(root) - Q*(root, a_rec)`` against exact values (backward induction, see ``trees.py``).

Every algorithm runs the same closed-loop simulation loop (the kernels of icml26.ops.mcts and
icml26.ops.mcts_table, with bit-identical Python twins): descend with the algorithm's tree
policy, trying each action of a node once first, until the episode ends (or ``horizon``
steps), then back up along the path. Algorithms, by their backups:
- ``uct`` (Kocsis & Szepesvari 2006), ``power-uct`` (Dam et al., IJCAI 2019),
  ``ments`` (Xiao et al., NeurIPS 2019), ``mdp-gape`` (Jonsson et al., NeurIPS 2020, Hoeffding
  bonuses), ``sequential-halving`` (Karnin et al. 2013) and ``gumbel`` (Danihelka et al.,
  ICLR 2022, as google-deepmind/mctx without a network) at the root;
- ``varde`` (VarDE-MCTS, reconstruction; the paper's MCTS section could not be read): VarDE's
  BAI rule applied recursively on mellowmax backups, with a per-node standard-error temperature.
Value normalisation (``value_norm``): ``minmax`` (per node, as mctx's qtransforms),
``minmax-tree`` (MuZero's MinMaxStats), ``declared`` (``value_range``) or ``oracle``.

This module holds the algorithm table, the search state and the root searches; the per-algorithm
formulas and the measurements behind the choices are in docs/mcts.md, "Specification"."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Mapping

import numpy as np

from icml26.core import limits
from icml26.core.recipe import parse_choices
from icml26.core.stats import wilson_interval as wilson  # noqa: F401  (Wilson 95% interval, shared)
from icml26.ops.mcts import ALGOS


def parse_algos(spec: str) -> list[str]:
    """ "all" or a comma list of ALGOS -> list; ValueError on an unknown name."""
    return parse_choices(spec, ALGOS)


@dataclass(frozen=True)
class Config:
    env: str = "recipes/mcts/envs/noisy.yaml"  # tree YAML file or gymnasium id (Id-vN?key=value&...)
    algo: str = "all"  # all | comma list of uct, power-uct, ments, varde, mdp-gape, sequential-halving, gumbel
    simulations: tuple[int, ...] = field(default=(100, 300, 1000), metadata={"sized": 10**8})  # budgets at the root
    seeds: int = field(default=200, metadata={"sized": 10**6})  # independent runs per (algo, budget)
    c: float = 0.5  # UCB1 constant, in units of the value range
    tau: float = 0.5  # soft-max temperature (ments; varde when kappa = 0), in units of the value range
    kappa: float = 1.0  # varde: temperature of node s = kappa x standard error of Q(s, .) (0: fixed tau)
    power: float = 2.0  # power-mean exponent (power-uct)
    epsilon: float = 0.1  # E2W exploration (ments)
    var_floor: float = 0.01  # floor on the per-sample reward variance (varde)
    prior_var: float | None = None  # variance before 2 samples (varde); None: (reward span / 2)^2
    delta: float = 0.1  # confidence (mdp-gape)
    m_considered: int = 16  # root actions sampled by Gumbel-top-m (gumbel)
    c_visit: float = 50.0  # sigma(q) constants of Gumbel MuZero (mctx defaults)
    c_scale: float = 0.1  # sigma(q) scale of Gumbel MuZero (mctx default)
    horizon: int = field(
        default=100, metadata={"sized": 10**6}
    )  # steps per simulation (gymnasium envs; trees end by themselves)
    # discount for gymnasium envs (None: DEFAULT_GAMMA); tree and MDP files set their own, and an
    # explicit gamma with one exits 2 (load_env). The config record holds the value used.
    gamma: float | None = None
    backend: str = (
        "auto"  # auto | ext | ref: C++ kernel or Python search (tree files; gymnasium envs with a transition table)
    )
    # value normalisation of the UCB bonuses, temperatures, MDP-GapE's value bonus, the power
    # mean's origin and Gumbel's sigma(q) (see VALUE_NORMS and docs/mcts.md):
    # minmax = per node, the range of the node's current Q estimates (mctx's rescaling; what a
    # planner knows); minmax-tree = the range of every Q estimate backed up so far in the search
    # (MuZero's MinMaxStats);
    # declared = value_range [lo, hi] (this field, else the tree file's value_range key);
    # oracle = the exact value range (a tree's exact values; a gymnasium env's transition table,
    # or random rollouts without one): the paper-style tables
    value_norm: str = "minmax"
    value_range: tuple[float, float] | None = None  # [lo, hi] of value_norm=declared (else the tree file's)
    # full episodes (mcts_episodes.py): plan, act in the real env, repeat; None: root searches only
    episodes: int | None = None  # episodes per (algo, simulations)
    reuse_tree: bool = False  # keep the chosen child's subtree between moves
    episode_steps: int | None = None  # moves per episode at most (None: the env's TimeLimit, a tree's depth)

    def __post_init__(self):
        _check_types(self)
        if self.value_norm not in VALUE_NORMS:
            raise ValueError(f"value_norm must be one of {', '.join(VALUE_NORMS)}, got {self.value_norm!r}")
        if self.value_range is not None:
            object.__setattr__(self, "value_range", check_value_range(self.value_range, "value_range"))
        if self.value_norm != "declared" and self.value_range is not None:
            raise ValueError("value_range is used only with value_norm 'declared': add --set value_norm=declared")
        for name, top in (("episodes", MAX_EPISODES), ("episode_steps", MAX_EPISODE_STEPS)):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= top):
                raise ValueError(f"{name} must be an integer in [1, {top}], got {v!r}")
        if not isinstance(self.reuse_tree, bool):
            raise ValueError(f"reuse_tree must be true or false, got {self.reuse_tree!r}")
        if self.episodes is None and (self.reuse_tree or self.episode_steps is not None):
            raise ValueError("reuse_tree and episode_steps apply to episodes: add --episodes N")
        parse_algos(self.algo)
        if not self.simulations or min(self.simulations) < 1:
            raise ValueError(f"simulations must be >= 1, got {list(self.simulations)}")
        if max(self.simulations) > MAX_SIMULATIONS:
            raise ValueError(
                f"simulations must be at most {MAX_SIMULATIONS:.0e} per search (memory: the search's "
                f"tables and tree statistics grow with the budget), got {max(self.simulations)}"
            )
        if self.seeds < 1:
            raise ValueError(f"seeds must be >= 1, got {self.seeds}")
        for name in ("c", "tau", "power", "var_floor", "delta", "c_visit", "c_scale"):
            v = getattr(self, name)
            if not v > 0:
                raise ValueError(f"{name} must be > 0, got {v}")
        if not 0 < self.delta < 1:
            raise ValueError(f"delta must be in (0, 1), got {self.delta}")
        if not self.kappa >= 0:
            raise ValueError(f"kappa must be >= 0, got {self.kappa}")
        if not 0 <= self.epsilon <= 1:
            raise ValueError(f"epsilon must be in [0, 1], got {self.epsilon}")
        if self.prior_var is not None and not self.prior_var > 0:
            raise ValueError(f"prior_var must be > 0, got {self.prior_var}")
        if self.m_considered < 1 or self.horizon < 1:
            raise ValueError("m_considered and horizon must be >= 1")
        if self.gamma is not None and not 0 < self.gamma <= 1:
            raise ValueError(f"gamma must be in (0, 1], got {self.gamma}")
        if self.backend not in ("auto", "ext", "ref"):
            raise ValueError(f"backend must be auto, ext or ref, got {self.backend!r}")
        check_work(self)


VALUE_NORMS = ("minmax", "minmax-tree", "declared", "oracle")
DEFAULT_GAMMA = 0.95  # gymnasium envs' discount when gamma is not given
MAX_EPISODES = 100_000
MAX_EPISODE_STEPS = 100_000
_MINMAX_MODE = {"minmax": 2.0, "minmax-tree": 1.0}  # Params.minmax


def check_value_range(vr, what: str) -> tuple[float, float]:
    """``[lo, hi]`` -> (lo, hi) floats; ValueError naming ``what`` unless two finite numbers with lo < hi."""
    if not (
        isinstance(vr, (tuple, list))
        and len(vr) == 2
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in vr)
        and vr[0] < vr[1]
    ):
        raise ValueError(
            f"{what} must be [lo, hi] with finite lo < hi, got {list(vr) if isinstance(vr, (tuple, list)) else vr!r}"
        )
    return float(vr[0]), float(vr[1])


# Per search, the C++ kernel allocates 4 tables of budget + 3 doubles (32 bytes per simulation:
# 320 MB at 10^7, 3.2 GB at 10^8) besides the tree's statistics, which also grow with the budget.
MAX_SIMULATIONS = 10**7
# Total work above which a run is refused up front: simulations summed over budgets x seeds x
# algorithms, each search counted as at least MIN_SEARCH_COST simulations (its setup, seeds and
# output rows cost time and memory even at a budget of 1). The C++ kernel on tree files does
# ~4M simulations/s on one core (1e10: about an hour of CPU, more on a loaded machine); the
# Python search on gymnasium envs did 7e2..1.2e3 simulations/s (FrozenLake 8x8, horizon 40,
# Blackjack) to 1.9e3..2.6e3 (rainy Taxi, horizon 20) per algorithm on one core of this
# project's 2-core machine: 2e6 is ~30 minutes at ~1e3/s.
MAX_TOTAL_SIMULATIONS = 1e10
MAX_TOTAL_SIMULATIONS_GYM = 2e6
# Gymnasium envs with a transition table run in the C++ table kernel (icml26/ops/mcts_table.py):
# 3e4..3e5 simulations/s per core on FrozenLake 8x8 (horizon 40) and Taxi (horizon 20) on this
# project's loaded 2-core machine, so 2e8 is about an hour at the slow end.
MAX_TOTAL_SIMULATIONS_TABLE = 2e8
# One table search holds at most budget x horizon + 1 nodes (each simulation expands at most one
# node per step); refused up front above this many bytes (NodeH 64 B, 80 B per action, 24 B
# per outcome slot; see icml26/csrc/cpu/mcts_table.h)
MAX_TABLE_SEARCH_BYTES = 4 * 2**30
MIN_SEARCH_COST = {"tree": 1000, "gym": 100}

_INT_FIELDS = ("seeds", "m_considered", "horizon")
_FLOAT_FIELDS = (
    "c",
    "tau",
    "kappa",
    "power",
    "epsilon",
    "var_floor",
    "prior_var",
    "delta",
    "c_visit",
    "c_scale",
    "gamma",
)


def _check_types(cfg: "Config") -> None:
    """ValueError naming the field for a value of the wrong type or a non-finite number
    (the Python API gets the same messages as ``--set``)."""
    for name in ("env", "algo", "backend", "value_norm"):
        v = getattr(cfg, name)
        if not isinstance(v, str):
            raise ValueError(f"{name} must be a string, got {v!r} ({type(v).__name__})")
    sims = cfg.simulations
    if isinstance(sims, list):
        object.__setattr__(cfg, "simulations", tuple(sims))
        sims = cfg.simulations
    if not isinstance(sims, tuple) or not all(isinstance(b, int) and not isinstance(b, bool) for b in sims):
        raise ValueError(f"simulations must be a tuple of integers, got {sims!r}")
    for name in _INT_FIELDS:
        v = getattr(cfg, name)
        if not isinstance(v, int) or isinstance(v, bool):
            raise ValueError(f"{name} must be an integer, got {v!r} ({type(v).__name__})")
    for name in _FLOAT_FIELDS:
        v = getattr(cfg, name)
        if v is None and name in ("prior_var", "gamma"):
            continue
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            raise ValueError(f"{name} must be a number, got {v!r} ({type(v).__name__})")
        if not math.isfinite(v):
            raise ValueError(f"{name} must be finite, got {v}")


def check_work(cfg: "Config") -> None:
    """InputError (a ValueError) when the run's total work (sum over budgets of
    max(budget, MIN_SEARCH_COST) x seeds x algorithms) exceeds MAX_TOTAL_SIMULATIONS (tree
    files) or MAX_TOTAL_SIMULATIONS_GYM (gymnasium ids)."""
    gym = resolve_env_path(cfg.env) is None
    # (a gymnasium env is checked against the table kernel's limit here, and against the Python
    # search's once it is loaded and has no table: check_env_work)
    limit = (
        (MAX_TOTAL_SIMULATIONS_GYM if cfg.backend == "ref" else MAX_TOTAL_SIMULATIONS_TABLE)
        if gym
        else MAX_TOTAL_SIMULATIONS
    )
    floor = MIN_SEARCH_COST["gym" if gym else "tree"]
    work = sum(max(b, floor) for b in cfg.simulations) * cfg.seeds * len(parse_algos(cfg.algo))
    where = (
        ("Python search on a gymnasium env" if cfg.backend == "ref" else "search on a gymnasium env")
        if gym
        else "tree search"
    )
    limits.check_work(
        work,
        limit,
        "simulate",
        "simulations",
        "--seeds, --simulations or the number of algorithms",
        detail=f"{where}, each search counted as at least {floor}",
    )


def uses_table_kernel(cfg: "Config", kind: str, env) -> bool:
    """Whether a loaded gymnasium env's searches run in the C++ table kernel (a transition
    table, the kernel available, backend not ref); InputError for backend ext without it."""
    if kind != "gym":
        return False
    from icml26.core.errors import InputError

    try:
        return env.kernel_path(cfg.backend)
    except RuntimeError as e:
        raise InputError(f"--env {cfg.env!r}: {e}; use --set backend=auto or backend=ref") from None


def check_env_work(cfg: "Config", kind: str, env) -> None:
    """Once the env is loaded: InputError when a gymnasium env without the C++ table path
    exceeds the Python search's work limit (MAX_TOTAL_SIMULATIONS_GYM), or when one table
    search could exceed MAX_TABLE_SEARCH_BYTES (budget x horizon nodes)."""
    if kind != "gym":
        return
    algos = len(parse_algos(cfg.algo))
    if not uses_table_kernel(cfg, kind, env):
        work = sum(max(b, MIN_SEARCH_COST["gym"]) for b in cfg.simulations) * cfg.seeds * algos
        limits.check_work(
            work,
            MAX_TOTAL_SIMULATIONS_GYM,
            "simulate",
            "simulations",
            "--seeds, --simulations or the number of algorithms",
            detail=f"Python search on a gymnasium env without a transition table, each search counted as at least {MIN_SEARCH_COST['gym']}",
        )
        return
    from icml26.core.errors import InputError

    work = sum(max(b, MIN_SEARCH_COST["gym"]) for b in cfg.simulations) * cfg.seeds * algos
    limits.check_work(
        work,
        MAX_TOTAL_SIMULATIONS_TABLE,
        "simulate",
        "simulations",
        "--seeds, --simulations or the number of algorithms",
        detail=f"search in the C++ table kernel, each search counted as at least {MIN_SEARCH_COST['gym']}",
    )
    t = env.table()
    per_node = 64 + t.A * 80 + 24 * float(t.nout.sum()) / t.S
    need = (max(cfg.simulations) * cfg.horizon + 1) * per_node
    if need > MAX_TABLE_SEARCH_BYTES:
        raise InputError(
            f"one search of {max(cfg.simulations)} simulations at horizon {cfg.horizon} may hold up to "
            f"{need / 2**30:.1f} GiB of tree (limit {MAX_TABLE_SEARCH_BYTES / 2**30:.0f} GiB): lower --simulations or --set horizon=H"
        )


def check_episode_work(cfg: "Config", kind: str, env) -> None:
    """``check_env_work``, then InputError when the episodes' searches (episodes x moves per
    episode at most x sum of budgets x algorithms) exceed MAX_TOTAL_SIMULATIONS_TABLE (C++
    table kernel) or MAX_TOTAL_SIMULATIONS_GYM (the Python search)."""
    check_env_work(cfg, kind, env)
    if cfg.episodes is None:
        return
    from icml26.methods.exploration.mcts_episodes import max_episode_steps

    steps = max_episode_steps(kind, env, cfg)
    kernel = uses_table_kernel(cfg, kind, env)
    work = (
        cfg.episodes
        * steps
        * sum(max(b, MIN_SEARCH_COST["gym"]) for b in set(cfg.simulations))
        * len(parse_algos(cfg.algo))
    )
    limits.check_work(
        work,
        MAX_TOTAL_SIMULATIONS_TABLE if kernel else MAX_TOTAL_SIMULATIONS_GYM,
        "simulate",
        "simulations",
        "--episodes, --simulations, --set episode_steps=N or the number of algorithms",
        detail=f"episodes in the {'C++ table' if kernel else 'Python'} search, up to {steps} moves each",
    )


def _repo_root() -> Path:
    return Path(__file__).resolve().parents[3]


def resolve_env_path(env: str) -> Path | None:
    """A tree file path (as given, else relative to the repository), or None for a gymnasium id
    or an ``mdp:`` spec (a ``.yaml`` MDP file is a path here; ``load_env`` tells it apart)."""
    if env.startswith("mdp:"):
        return None
    p = Path(env)
    if p.suffix.lower() in (".yaml", ".yml"):
        if p.is_file() or p.is_absolute():
            return p
        alt = _repo_root() / p
        return alt if alt.is_file() else p
    return None


def make_params(
    cfg: Config, v_lo: float | None, v_hi: float | None, r_span: float, horizon: int, shift: float | None = None
):
    """Search parameters: UCB bonus and temperature scaled by the value range v_hi - v_lo;
    ``shift`` (default v_lo) is the origin of the power mean and of Gumbel's sigma(q).
    With ``cfg.value_norm`` minmax or minmax-tree the range is the search's own (per node or
    search-wide min-max of its Q estimates, ``icml26.ops._ref.mcts.Search.node_range`` /
    ``_observe``): v_lo, v_hi and shift are ignored (may be None) and ``tau`` stays in units of
    that range."""
    from icml26.ops.mcts import Params

    prior = cfg.prior_var if cfg.prior_var is not None else (r_span / 2.0) ** 2
    common = dict(
        c=cfg.c,
        power=cfg.power,
        epsilon=cfg.epsilon,
        var_floor=cfg.var_floor,
        prior_var=prior,
        delta=cfg.delta,
        c_visit=cfg.c_visit,
        c_scale=cfg.c_scale,
        r_span=r_span,
        m_considered=cfg.m_considered,
        horizon=horizon,
        kappa=cfg.kappa,
    )
    if cfg.value_norm in _MINMAX_MODE:
        return Params(tau=cfg.tau, v_lo=0.0, span=1.0, minmax=_MINMAX_MODE[cfg.value_norm], **common)
    span = max(v_hi - v_lo, 1e-9 * max(1.0, abs(v_hi)))
    return Params(tau=cfg.tau * span, v_lo=v_lo if shift is None else shift, span=span, minmax=0.0, **common)


def value_scale(cfg: Config, kind: str, env) -> dict:
    """The value range that scales the search: {"value_norm", "value_range" ([lo, hi] or None
    for minmax), "value_range_source" (observed | set | file | exact), "shift" (origin of the
    power mean and sigma(q))}. InputError when value_norm is declared and neither --set
    value_range nor the tree file's value_range key gives one."""
    from icml26.core.errors import InputError

    if cfg.value_norm in _MINMAX_MODE:
        return {"value_norm": cfg.value_norm, "value_range": None, "value_range_source": "observed", "shift": None}
    if cfg.value_norm == "declared":
        if cfg.value_range is not None:
            vr, src = cfg.value_range, "set"
        elif kind == "tree" and getattr(env, "declared_value_range", None) is not None:
            vr, src = env.declared_value_range, "file"
        else:
            where = "a value_range key in the tree file or " if kind == "tree" else ""
            raise InputError(f"value_norm 'declared' needs value_range: {where}--set value_range=[lo,hi]")
        return {
            "value_norm": "declared",
            "value_range": [float(vr[0]), float(vr[1])],
            "value_range_source": src,
            "shift": float(vr[0]),
        }
    if kind == "tree":
        lo, hi = env.value_range
        return {
            "value_norm": "oracle",
            "value_range": [float(lo), float(hi)],
            "value_range_source": "exact",
            "shift": min(0.0, float(env.v_min.min())),
        }
    return {
        "value_norm": "oracle",
        "value_range": [float(env.v_lo), float(env.v_hi)],
        "value_range_source": "exact" if env.q_root is not None else "rollouts",
        "shift": float(env.v_lo),
    }


def search_params(cfg: Config, kind: str, env, vs: dict | None = None):
    """``make_params`` for a loaded env (``load_env``'s pair) under ``cfg.value_norm``."""
    vs = value_scale(cfg, kind, env) if vs is None else vs
    lo, hi = vs["value_range"] if vs["value_range"] is not None else (None, None)
    if kind == "tree":
        return make_params(cfg, lo, hi, env.reward_span, 10**9, shift=vs["shift"])
    return make_params(cfg, lo, hi, env.r_span, cfg.horizon, shift=vs["shift"])


def load_env(cfg: Config):
    """Return ("tree", Tree) or ("gym", GymProblem); an MDP file or ``mdp:`` spec (``bpi``'s
    format, ``mdp_env.mdp_spec``) is ("gym", MDPProblem), searched on the table path of the
    gymnasium envs. InputError on a bad env, and when ``cfg.gamma`` is given with a tree or MDP
    file (their own gamma is the discount).
    ``config_used(cfg, env)`` is ``cfg`` with the gamma that the search uses."""
    from icml26.methods.exploration.mdp_env import MDPProblem, mdp_spec

    path = resolve_env_path(cfg.env)
    spec = mdp_spec(cfg.env, path)
    if spec is not None:
        return _own_gamma(cfg, "gym", MDPProblem(cfg.env, spec, cfg.horizon))
    if path is not None:
        from icml26.methods.exploration.trees import load_tree

        return _own_gamma(cfg, "tree", load_tree(path))
    from icml26.methods.exploration.gym_models import make_problem

    return "gym", make_problem(cfg.env, horizon=cfg.horizon, gamma=DEFAULT_GAMMA if cfg.gamma is None else cfg.gamma)


def _own_gamma(cfg: Config, kind: str, env):
    """(kind, env), or InputError when gamma was given: a tree or MDP file discounts by its own."""
    if cfg.gamma is not None:
        from icml26.core.errors import InputError

        what = "tree file" if kind == "tree" else "MDP"
        raise InputError(
            f"--env {cfg.env!r}: a {what} discounts by its own gamma ({float(env.gamma):g}), "
            f"not --set gamma={cfg.gamma:g}; drop it"
        )
    return kind, env


def config_used(cfg: Config, env) -> Config:
    """``cfg`` with ``gamma`` = the discount the search uses (``env``: ``load_env``'s env), for
    the config record (set without re-validating: a tree or MDP file may discount by 0)."""
    import copy

    c = copy.copy(cfg)
    object.__setattr__(c, "gamma", float(env.gamma))
    return c


def score(q_root: np.ndarray, recs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(correct (S,) bool, regret (S,) float) of recommendations ``recs`` given exact Q*(root, .)."""
    v = q_root.max()
    q = q_root[recs]
    tol = 1e-9 * (1.0 + abs(v))
    return q >= v - tol, v - q


def run(cfg: Config, *, seed: int = 0, env=None, done: Mapping[tuple, dict] | None = None) -> Iterator[dict]:
    """Yield one ``result`` record per (algo, simulations), then a ``summary``.

    env: ``load_env(cfg)``'s pair, loaded beforehand so that a bad --env fails before any
    output (else it is loaded here). done: result records of an interrupted run of the same
    config and seed, keyed by (algo, simulations) (``icml26.core.output.previous_results``):
    they are yielded as they are; an algorithm whose budgets are all there is not searched again
    (the budgets of one algorithm share a search, so one missing budget reruns it; same seeds,
    same numbers)."""
    from icml26.core.progress import progress
    from icml26.ops import mcts as ops

    algos = parse_algos(cfg.algo)
    kind, env = load_env(cfg) if env is None else env
    if kind != "tree" and env.q_root is None:
        import sys

        print(
            f"note: {cfg.env} has no transition table, so p_correct and simple_regret (which need exact action values) "
            "are null; each result's action_counts says how often each root action was recommended",
            file=sys.stderr,
        )
    vs = value_scale(cfg, kind, env)  # InputError (declared without a range) before any record
    check_episode_work(cfg, kind, env)
    if kind == "tree" and cfg.value_norm != "declared" and getattr(env, "declared_value_range", None) is not None:
        import sys

        print(
            f"note: {cfg.env} declares value_range {list(env.declared_value_range)}, used only with "
            f"--set value_norm=declared (value_norm is {cfg.value_norm})",
            file=sys.stderr,
        )
    budgets = sorted(set(int(b) for b in cfg.simulations))
    seeds = ops.run_seeds(seed, cfg.seeds)
    results = []
    env_name = cfg.env
    done = done or {}
    with progress(len(algos), "mcts") as bar:
        for algo in algos:
            if all((algo, b) in done for b in budgets):
                for b in budgets:
                    results.append(done[(algo, b)])
                    yield done[(algo, b)]
                bar.advance()
                continue
            prm = search_params(cfg, kind, env, vs)
            if kind == "tree":
                rec, _, _, be = ops.tree_search(env, algo, budgets, seeds, prm, use=cfg.backend)
                q_root = env.root_q()
            else:
                rec, be = env.search(algo, budgets, seeds, prm, use=cfg.backend)
                q_root = env.q_root
            episodes = {}
            if cfg.episodes is not None:
                from icml26.methods.exploration.mcts_episodes import run_episodes

                episodes = dict(run_episodes(kind, env, cfg, algo, budgets, prm, seed))
            for j, b in enumerate(budgets):
                r = {"kind": "result", "algo": algo, "env": env_name, "simulations": b, "seeds": len(seeds)}
                if q_root is not None:
                    ok, reg = score(np.asarray(q_root), rec[:, j])
                    k = int(ok.sum())
                    r.update(
                        p_correct=k / len(seeds),
                        p_correct_ci=list(wilson(k, len(seeds))),
                        simple_regret=float(reg.mean()),
                        simple_regret_se=float(reg.std(ddof=1) / math.sqrt(len(seeds))) if len(seeds) > 1 else None,
                    )
                else:  # no transition table (state-copy env): no exact values, so report what was recommended
                    counts = np.bincount(rec[:, j], minlength=int(env.A))
                    top = int(np.argmax(counts))
                    r.update(
                        p_correct=None,
                        p_correct_ci=None,
                        simple_regret=None,
                        simple_regret_se=None,
                        action_counts=counts.tolist(),
                        top_action=top,
                        top_action_share=float(counts[top] / len(seeds)),
                    )
                r["backend"] = be
                # the value range that scaled the search (None: each search's observed min-max), and where it came from
                r.update(
                    value_norm=vs["value_norm"],
                    value_range=vs["value_range"],
                    value_range_source=vs["value_range_source"],
                )
                r.update(episodes.get(b, {}))
                r = done.get((algo, b), r)  # a stored record stays as it was
                results.append(r)
                yield r
            bar.advance()
    top = max(budgets)
    final = [r for r in results if r["simulations"] == top and r["p_correct"] is not None]
    summ = {"kind": "summary", "env": env_name, "simulations": top, "seeds": len(seeds), "algos": algos}
    if kind == "tree":
        summ.update(n_nodes=env.n_nodes, root_actions=env.n_actions_root, depth=env.depth, v_star=float(env.v_star[0]))
    else:
        summ.update(
            root_actions=env.A,
            horizon=cfg.horizon,
            gamma=env.gamma,
            v_star=float(np.max(env.q_root)) if env.q_root is not None else None,
        )
    if cfg.episodes is not None:
        summ["episode_return"] = {r["algo"]: r.get("episode_return") for r in results if r["simulations"] == top}
    if final:
        best = max(final, key=lambda r: (r["p_correct"], -r["simple_regret"]))
        summ.update(
            best_algo=best["algo"],
            best_p_correct=best["p_correct"],
            p_correct={r["algo"]: r["p_correct"] for r in final},
            simple_regret={r["algo"]: r["simple_regret"] for r in final},
        )
    yield summ


def plot(records: list[dict], out_dir: Path) -> None:
    """``p_correct.png``: probability of an optimal recommendation vs budget, one line per algo."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from icml26.core.output import atomic_path

    res = [r for r in records if r.get("kind") == "result" and r.get("p_correct") is not None]
    if not res:
        return
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for algo in dict.fromkeys(r["algo"] for r in res):
        rs = sorted((r for r in res if r["algo"] == algo), key=lambda r: r["simulations"])
        x = [r["simulations"] for r in rs]
        ax.plot(x, [r["p_correct"] for r in rs], marker="o", label=algo)
        ax.fill_between(x, [r["p_correct_ci"][0] for r in rs], [r["p_correct_ci"][1] for r in rs], alpha=0.15)
    ax.set_xscale("log")
    ax.set_xlabel("simulations")
    ax.set_ylabel("P(optimal root action)")
    ax.set_title(str(res[0]["env"]))
    ax.legend(fontsize=7)
    fig.tight_layout()
    with atomic_path(Path(out_dir) / "p_correct.png") as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    plt.close(fig)
