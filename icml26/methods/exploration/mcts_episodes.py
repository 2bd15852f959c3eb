"""Full episodes with a tree-search planner: plan from the current state with a simulation
budget, act in the real environment, repeat until the episode ends (``icml26 mcts --episodes N``).

Each move runs one search of ``simulations`` new simulations from the current state (the
same algorithms, parameters and value normalisation as the root searches: on gymnasium envs
with a transition table the C++ table search of icml26.ops.mcts_table, kept alive between
moves and re-rooted in place; elsewhere, or with ``backend: ref``, the Python search of
icml26.ops.mcts, which gives the same actions on table envs) and plays its recommended action:

- gymnasium ids: ``reset(seed=episode seed)``, then ``step`` until terminated or truncated,
  or after ``episode_steps`` moves; planned on the transition table (``gym_models.TableModel``)
  or on a deep copy of the env (``CopyModel``);
- tree files: the tree's own generative model with the episode's seed, root to leaf.

``reuse_tree`` keeps the chosen child's subtree between moves (with its counts, estimates and
the ``minmax-tree`` statistics) and adds ``simulations`` new ones (``Search.reroot``); without
reuse, or when the observed outcome was never sampled, a fresh search starts.
``episode_reuse_share`` = moves that continued a subtree / (moves - episodes), in [0, 1].

The return is the undiscounted sum of the env's rewards over the episode; its 95% interval
over episodes is Student's t (mean +- t_{0.975, n-1} s / sqrt(n); a single episode: a point)."""

from __future__ import annotations

import copy
import math
from typing import Iterator

import numpy as np

from icml26.methods.exploration import gym_models as G
from icml26.ops import mcts as R
from icml26.ops.mcts_table import TableSearch

EPISODE_STREAM = R.ALGO_STREAM + 17  # key streams of the episodes' env seeds and planner seeds
DEFAULT_EPISODE_STEPS = 200  # when the env has no TimeLimit


def episode_seeds(seed: int, i: int) -> tuple[int, int]:
    """(env seed, planner seed) of episode ``i`` of a run with command seed ``seed``: the same
    for every algorithm and budget (common random numbers across planners)."""
    return R.key(seed, EPISODE_STREAM, i, 0) >> 33, R.key(seed, EPISODE_STREAM, i, 1) >> 1


def move_seed(planner_seed: int, t: int) -> int:
    """The search seed of move ``t`` (a fresh search per move)."""
    return R.key(planner_seed, EPISODE_STREAM + 1, t, 0) >> 1


def t_interval(x) -> tuple[float, float]:
    """95% Student-t interval of the mean of ``x`` (n >= 2), or (x0, x0) for one value."""
    from scipy import stats

    x = np.asarray(x, float)
    m = float(x.mean())
    if x.size < 2:
        return m, m
    h = float(stats.t.ppf(0.975, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size))
    return m - h, m + h


class _TreeEnv:
    """The real env of a tree file: the tree's generative model (seeded per episode), stepped
    from the root; the step index is the draw index (each (node, action) is met once per episode)."""

    def __init__(self, tree, seed: int):
        self.m = R.TreeModel(tree, seed)
        self.s, self.t = 0, 0

    def step(self, a: int):
        r, k, c, done = self.m.step(self.s, a, self.t)
        self.t += 1
        self.s = c
        return r, k, done


class _RootedTreeModel(R.TreeModel):
    def __init__(self, tree, seed: int, root: int):
        super().__init__(tree, seed)
        self._root = root

    def root(self):
        return self._root


def play_episode(
    kind: str, env, cfg, algo: str, budget: int, prm, env_seed: int, planner_seed: int, *, reuse: bool, max_steps: int
) -> dict:
    """One episode; {"return", "steps", "actions", "rewards", "reused"} (``reused``: moves that
    continued the previous search's subtree, at most ``steps - 1``: the last move, ended by the
    env or by ``max_steps``, re-roots nothing).

    kind/env: ``mcts.load_env``'s pair. prm: the search parameters (``mcts.search_params``)."""
    aid = R.ALGOS.index(algo)
    actions, rewards, reused = [], [], 0
    search = None
    kernel = kind == "gym" and env.kernel_path(getattr(cfg, "backend", "auto"))
    if kind == "tree":
        real = _TreeEnv(env, env_seed)
        state = 0
    else:
        genv = env.env
        obs, _ = genv.reset(seed=int(env_seed))
    for t in range(max_steps):
        if search is None or not reuse:
            sd = move_seed(planner_seed, t)
            if kernel:  # the C++ table search: the same tree, statistics and re-rooting as below
                search = TableSearch(env.table(), int(obs), algo, prm, sd, keep_cuts=reuse)
            elif kind == "tree":
                model = _RootedTreeModel(env, sd, state)
            elif env.P is not None:
                model = env.table_model(int(obs), sd)
            else:
                model = G.CopyModel(copy.deepcopy(genv), obs, env.A, env.gamma, sd)
            if not kernel:
                search = R.Search(model, aid, prm, sd)
                search.keep_cuts = reuse
        a = int(search.run(budget))
        if kind == "tree":
            r, key, done = real.step(a)
            state = real.s
        else:
            obs, r, term, trunc, _ = genv.step(a)
            done = bool(term or trunc)
            key = int(obs) if env.P is not None else G._freeze(obs)
        actions.append(a)
        rewards.append(float(r))
        if done or t == max_steps - 1:  # the episode's last move: nothing to re-root for
            break
        if reuse:
            if search.reroot(a, key):
                reused += 1
            else:
                search = None
    return {
        "return": float(sum(rewards)),
        "steps": len(actions),
        "actions": actions,
        "rewards": rewards,
        "reused": reused,
        "backend": "ext-cpu" if kernel else "python",
    }


def max_episode_steps(kind: str, env, cfg) -> int:
    """Moves per episode at most: ``cfg.episode_steps``, else the env's TimeLimit (gymnasium),
    else the tree's depth (tree files) or DEFAULT_EPISODE_STEPS."""
    if cfg.episode_steps is not None:
        return int(cfg.episode_steps)
    if kind == "tree":
        return int(env.depth)
    spec = getattr(env.env, "spec", None)
    n = getattr(spec, "max_episode_steps", None)
    return int(n) if n else DEFAULT_EPISODE_STEPS


def run_episodes(kind: str, env, cfg, algo: str, budgets, prm, seed: int) -> Iterator[tuple[int, dict]]:
    """Per budget: (budget, {"episode_return", "episode_return_ci", "episode_return_se",
    "episodes", "episode_steps_mean", "episode_reuse_share", "reuse_tree"}) over ``cfg.episodes``
    episodes with seeds ``episode_seeds(seed, i)``."""
    steps = max_episode_steps(kind, env, cfg)
    for b in budgets:
        eps = [
            play_episode(kind, env, cfg, algo, b, prm, *episode_seeds(seed, i), reuse=cfg.reuse_tree, max_steps=steps)
            for i in range(cfg.episodes)
        ]
        rets = np.array([e["return"] for e in eps])
        moves = sum(e["steps"] for e in eps)
        lo, hi = t_interval(rets)
        yield (
            b,
            {
                "episodes": len(eps),
                "episode_return": float(rets.mean()),
                "episode_return_ci": [lo, hi],
                "episode_return_se": float(rets.std(ddof=1) / math.sqrt(len(rets))) if len(rets) > 1 else None,
                "episode_steps_mean": moves / len(eps),
                "reuse_tree": bool(cfg.reuse_tree),
                "episode_backend": eps[0]["backend"],
                "episode_reuse_share": (sum(e["reused"] for e in eps) / max(1, moves - len(eps)))
                if cfg.reuse_tree
                else None,
            },
        )
