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

This module runs the root searches (settings, checks and work limits: ``mcts_config``); the per-algorithm
formulas and the measurements behind the choices are in docs/mcts.md, "Specification"."""

from __future__ import annotations

import copy
import math
import sys
from pathlib import Path
from typing import Iterator, Mapping

import numpy as np

from icml26.core.errors import InputError
from icml26.core.output import atomic_path
from icml26.core.progress import progress
from icml26.core.stats import wilson_interval as wilson  # noqa: F401  (Wilson 95% interval, shared)
from icml26.methods.exploration.gym_models import make_problem
from icml26.methods.exploration.mcts_config import (  # noqa: F401  (re-exported: the command's settings)
    _FLOAT_FIELDS,
    _INT_FIELDS,
    _MINMAX_MODE,
    DEFAULT_GAMMA,
    MAX_EPISODE_STEPS,
    MAX_EPISODES,
    MAX_SIMULATIONS,
    MAX_TABLE_SEARCH_BYTES,
    MAX_TOTAL_SIMULATIONS,
    MAX_TOTAL_SIMULATIONS_GYM,
    MAX_TOTAL_SIMULATIONS_TABLE,
    MIN_SEARCH_COST,
    VALUE_NORMS,
    Config,
    _check_types,
    check_env_work,
    check_episode_work,
    check_value_range,
    check_work,
    parse_algos,
    resolve_env_path,
    uses_table_kernel,
)
from icml26.methods.exploration.mcts_episodes import run_episodes
from icml26.methods.exploration.mdp_env import MDPProblem, mdp_spec
from icml26.methods.exploration.trees import load_tree
from icml26.ops import mcts as ops
from icml26.ops.mcts import (
    ALGOS,  # noqa: F401  (re-exported)
    Params,
)


def make_params(
    cfg: Config, v_lo: float | None, v_hi: float | None, r_span: float, horizon: int, shift: float | None = None
):
    """Search parameters: UCB bonus and temperature scaled by the value range v_hi - v_lo;
    ``shift`` (default v_lo) is the origin of the power mean and of Gumbel's sigma(q).
    With ``cfg.value_norm`` minmax or minmax-tree the range is the search's own (per node or
    search-wide min-max of its Q estimates, ``icml26.ops._ref.mcts.Search.node_range`` /
    ``_observe``): v_lo, v_hi and shift are ignored (may be None) and ``tau`` stays in units of
    that range."""
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
    path = resolve_env_path(cfg.env)
    spec = mdp_spec(cfg.env, path)
    if spec is not None:
        return _own_gamma(cfg, "gym", MDPProblem(cfg.env, spec, cfg.horizon))
    if path is not None:
        return _own_gamma(cfg, "tree", load_tree(path))

    return "gym", make_problem(cfg.env, horizon=cfg.horizon, gamma=DEFAULT_GAMMA if cfg.gamma is None else cfg.gamma)


def _own_gamma(cfg: Config, kind: str, env):
    """(kind, env), or InputError when gamma was given: a tree or MDP file discounts by its own."""
    if cfg.gamma is not None:
        what = "tree file" if kind == "tree" else "MDP"
        raise InputError(
            f"--env {cfg.env!r}: a {what} discounts by its own gamma ({float(env.gamma):g}), "
            f"not --set gamma={cfg.gamma:g}; drop it"
        )
    return kind, env


def config_used(cfg: Config, env) -> Config:
    """``cfg`` with ``gamma`` = the discount the search uses (``env``: ``load_env``'s env), for
    the config record (set without re-validating: a tree or MDP file may discount by 0)."""
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
    algos = parse_algos(cfg.algo)
    kind, env = load_env(cfg) if env is None else env
    if kind != "tree" and env.q_root is None:
        print(
            f"note: {cfg.env} has no transition table, so p_correct and simple_regret (which need exact action values) "
            "are null; each result's action_counts says how often each root action was recommended",
            file=sys.stderr,
        )
    vs = value_scale(cfg, kind, env)  # InputError (declared without a range) before any record
    check_episode_work(cfg, kind, env)
    if kind == "tree" and cfg.value_norm != "declared" and getattr(env, "declared_value_range", None) is not None:
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
