"""Settings of ``icml26 mcts`` and their checks: the ``Config`` dataclass, value ranges, and the
work and memory limits refused up front (before any search; see docs/mcts.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from icml26.core import limits
from icml26.core.errors import InputError
from icml26.core.recipe import parse_choices, shipped_path
from icml26.methods.exploration.mcts_episodes import max_episode_steps
from icml26.ops.mcts import ALGOS


def parse_algos(spec: str) -> list[str]:
    """ "all" or a comma list of ALGOS -> list; ValueError on an unknown name."""
    return parse_choices(spec, ALGOS)


@dataclass(frozen=True)
class Config:
    env: str = "recipes/mcts/envs/noisy.yaml"  # tree YAML file or gymnasium id (Id-vN?key=value&...)
    algo: str = "all"  # all | comma list of uct, power-uct, ments, varde, mdp-gape, sequential-halving, gumbel
    simulations: tuple[int, ...] = field(default=(100, 300, 1000), metadata={"sized": 10**7})  # budgets at the root
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
            detail="Python search on a gymnasium env without a transition table, each search counted as at least "
            f"{MIN_SEARCH_COST['gym']}",
        )
        return

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
            f"{need / 2**30:.1f} GiB of tree (limit {MAX_TABLE_SEARCH_BYTES / 2**30:.0f} GiB): "
            "lower --simulations or --set horizon=H"
        )


def check_episode_work(cfg: "Config", kind: str, env) -> None:
    """``check_env_work``, then InputError when the episodes' searches (episodes x moves per
    episode at most x sum of budgets x algorithms) exceed MAX_TOTAL_SIMULATIONS_TABLE (C++
    table kernel) or MAX_TOTAL_SIMULATIONS_GYM (the Python search)."""
    check_env_work(cfg, kind, env)
    if cfg.episodes is None:
        return

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


def resolve_env_path(env: str) -> Path | None:
    """A tree file path (as given, else the shipped copy of ``recipes/...``, so the default env
    works from any folder after ``pip install``), or None for a gymnasium id or an ``mdp:`` spec
    (a ``.yaml`` MDP file is a path here; ``load_env`` tells it apart)."""
    if env.startswith("mdp:"):
        return None
    p = Path(env)
    if p.suffix.lower() in (".yaml", ".yml"):
        return shipped_path(p)
    return None
