"""Random stochastic trees for pure-exploration MCTS, read from YAML, with exact values.

A tree alternates decision nodes (the planner picks an action) and chance nodes (the
environment draws one of a few outcomes with known probabilities). Taking action ``a`` in
decision node ``s`` pays a noisy reward of mean ``mean(s, a)`` and scale ``scale(s, a)``,
then moves to outcome ``k`` with probability ``p(s, a, k)``: either a child decision node
or the end of the episode. Exact values follow by backward induction (Bellman):

    Q*(s, a) = mean(s, a) + gamma * sum_k p(s, a, k) V*(child_k),   V*(s) = max_a Q*(s, a),

with V* = 0 at the end of an episode, so every recommendation of a planner is checked.

File format (YAML, read with ``safe_load``): ``gamma``, ``noise`` (gaussian | student_t |
bernoulli), ``df``, ``value_range`` and either ``random:`` (depth, branching, chance,
reward_mean, noise_scale, noise_spread, dirichlet, seed) or an explicit ``root:`` list of
actions ``{mean, scale, next: [{p, node}]}``; both with examples in docs/mcts.md,
"Specification". The flat arrays (CSR layout) are what the C++ kernel and its twin read."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from icml26.core.errors import InputError
from icml26.core.recipe import read_yaml
from icml26.methods.exploration.mcts_config import check_value_range

NOISE_KINDS = {"gaussian": 0, "student_t": 1, "bernoulli": 2}
MAX_NODES = 2_000_000
MAX_OUTCOMES = 20_000_000  # (s, a, outcome) entries: prob float64 + child int64, 16 B each
MAX_MAGNITUDE = 1e150  # means and scales: sums over up to MAX_NODES steps (and squares) stay finite


@dataclass
class Tree:
    """A stochastic tree in CSR form.

    node_off: (n_nodes + 1,) int64, actions of node s are sa = node_off[s] .. node_off[s+1]-1.
    mean, scale: (n_sa,) float64 reward mean and noise scale of each (s, a).
    out_off: (n_sa + 1,) int64, outcomes of sa are out_off[sa] .. out_off[sa+1]-1.
    prob: (n_out,) float64 outcome probabilities; child: (n_out,) int64 child node or -1 (end).
    Children always have larger ids than their parent (node 0 is the root).
    """

    node_off: np.ndarray
    mean: np.ndarray
    scale: np.ndarray
    out_off: np.ndarray
    prob: np.ndarray
    child: np.ndarray
    gamma: float = 1.0
    noise: str = "gaussian"
    df: float = 3.0
    name: str = "tree"
    q_star: np.ndarray = field(default=None, repr=False)  # (n_sa,)
    v_star: np.ndarray = field(default=None, repr=False)  # (n_nodes,)
    v_min: np.ndarray = field(default=None, repr=False)  # (n_nodes,) worst policy's value
    depth: int = 0
    declared_value_range: tuple | None = None  # the file's value_range key (lo, hi), if any

    @property
    def n_nodes(self) -> int:
        return len(self.node_off) - 1

    @property
    def n_actions_root(self) -> int:
        return int(self.node_off[1] - self.node_off[0])

    @property
    def noise_kind(self) -> int:
        return NOISE_KINDS[self.noise]

    def root_q(self) -> np.ndarray:
        """(A,) exact Q*(root, a)."""
        return self.q_star[self.node_off[0] : self.node_off[1]]

    @property
    def value_range(self) -> tuple[float, float]:
        """Range of mean returns from the root (worst policy, best policy): the "known
        reward range" that UCB-type rules scale their bonus with."""
        return float(self.v_min[0]), float(self.v_star[0])

    @property
    def reward_span(self) -> float:
        """Spread of one step's reward: range of the means plus two noise scales."""
        if self.noise == "bernoulli":
            return 1.0
        return float(self.mean.max() - self.mean.min() + 2.0 * self.scale.max())


def solve(tree: Tree) -> Tree:
    """Backward induction: fill q_star, v_star, v_min and depth (children have larger ids)."""
    n, nsa = tree.n_nodes, len(tree.mean)
    q = np.zeros(nsa)
    qmin = np.zeros(nsa)
    v = np.zeros(n)
    vmin = np.zeros(n)
    depth = np.zeros(n, dtype=np.int64)
    for s in range(n - 1, -1, -1):
        lo, hi = tree.node_off[s], tree.node_off[s + 1]
        for sa in range(lo, hi):
            o0, o1 = tree.out_off[sa], tree.out_off[sa + 1]
            ch = tree.child[o0:o1]
            p = tree.prob[o0:o1]
            vc = np.where(ch >= 0, v[np.maximum(ch, 0)], 0.0)
            vcm = np.where(ch >= 0, vmin[np.maximum(ch, 0)], 0.0)
            q[sa] = tree.mean[sa] + tree.gamma * float(p @ vc)
            qmin[sa] = tree.mean[sa] + tree.gamma * float(p @ vcm)
            d = depth[ch[ch >= 0]]
            depth[s] = max(depth[s], 1 + (int(d.max()) if d.size else 0))
        v[s] = q[lo:hi].max()
        vmin[s] = qmin[lo:hi].min()
    tree.q_star, tree.v_star, tree.v_min, tree.depth = q, v, vmin, int(depth[0])
    return tree


def _bad(path: str, msg: str):
    return InputError(f"tree {path!r}: {msg}")


def _num(path: str, what: str, x: Any, lo: float | None = None, hi: float | None = None) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise _bad(path, f"{what} must be a number, got {x!r}")
    try:
        x = float(x)
    except OverflowError:  # an integer beyond float range
        raise _bad(path, f"{what} must be at most {MAX_MAGNITUDE:g} in magnitude, got {str(x)[:30]}...") from None
    if not np.isfinite(x) or (lo is not None and x < lo) or (hi is not None and x > hi):
        rng = f" in [{lo}, {hi}]" if lo is not None and hi is not None else (f" >= {lo}" if lo is not None else "")
        raise _bad(path, f"{what} must be finite{rng}, got {x!r}")
    if abs(x) > MAX_MAGNITUDE:
        raise _bad(path, f"{what} must be at most {MAX_MAGNITUDE:g} in magnitude, got {x!r}")
    return x


def _int(path: str, what: str, x: Any, lo: int) -> int:
    if isinstance(x, bool) or not isinstance(x, int) or x < lo:
        raise _bad(path, f"{what} must be an integer >= {lo}, got {x!r}")
    return x


def generate(
    depth: int,
    branching: int,
    chance: int = 2,
    *,
    reward_mean=(0.0, 1.0),
    noise_scale: float = 1.0,
    noise_spread: float = 0.0,
    dirichlet: float = 1.0,
    seed: int = 0,
    gamma: float = 1.0,
    noise: str = "gaussian",
    df: float = 3.0,
    name: str = "random-tree",
) -> Tree:
    """A random tree: ``depth`` decision levels, ``branching`` actions, ``chance`` outcomes each.

    Nodes are numbered breadth-first. Raises ValueError when the tree would exceed MAX_NODES
    nodes or MAX_OUTCOMES outcome entries (counted level by level: a depth of 10**12 stops
    at the limit, it is not summed)."""
    n_nodes, level = (depth, 1) if branching * chance == 1 else (0, 1)  # a chain: depth nodes
    for _ in range(depth if branching * chance > 1 else 0):
        n_nodes += level
        if n_nodes > MAX_NODES:
            raise ValueError(
                f"a tree of depth {depth}, branching {branching}, chance {chance} has more than {MAX_NODES} nodes"
            )
        level *= branching * chance
    if n_nodes > MAX_NODES:
        raise ValueError(
            f"a tree of depth {depth}, branching {branching}, chance {chance} has more than {MAX_NODES} nodes"
        )
    if n_nodes * branching * chance > MAX_OUTCOMES:
        raise ValueError(
            f"a tree of depth {depth}, branching {branching}, chance {chance} has "
            f"{n_nodes * branching * chance:.3g} outcome entries (> {MAX_OUTCOMES:.0e})"
        )
    rng = np.random.default_rng(seed)
    lo, hi = float(reward_mean[0]), float(reward_mean[1])
    nsa = n_nodes * branching
    node_off = np.arange(n_nodes + 1, dtype=np.int64) * branching
    mean = rng.uniform(lo, hi, size=nsa)
    if noise == "bernoulli":
        mean = np.clip(mean, 0.0, 1.0)
    scale = noise_scale * rng.uniform(1.0 - noise_spread, 1.0 + noise_spread, size=nsa)
    out_off = np.arange(nsa + 1, dtype=np.int64) * chance
    prob = rng.dirichlet(np.full(chance, dirichlet), size=nsa).reshape(-1) if chance > 1 else np.ones(nsa)
    child = np.full(nsa * chance, -1, dtype=np.int64)
    n_internal = n_nodes - (branching * chance) ** (depth - 1)  # nodes above the last level
    child[: n_internal * branching * chance] = np.arange(1, n_internal * branching * chance + 1)
    t = Tree(node_off, mean, scale, out_off, prob, child, gamma=gamma, noise=noise, df=df, name=name)
    return solve(t)


def from_dict(data: Any, path: str = "<tree>") -> Tree:
    """Build (and solve) a tree from the parsed YAML mapping; InputError on a bad file."""
    if not isinstance(data, dict):  # an empty file, a list, a scalar: neither --env file form
        raise InputError(
            f"env file {path!r}: expected a tree file's mapping with 'random' or 'root', or an MDP file's with 'P'"
        )
    known = {"name", "gamma", "noise", "df", "random", "root", "description", "value_range"}
    unknown = sorted(set(map(str, data)) - known)
    if unknown:
        raise _bad(path, f"unknown key {unknown[0]!r}; valid keys: {', '.join(sorted(known))}")
    gamma = _num(path, "gamma", data.get("gamma", 1.0), 0.0, 1.0)
    noise = data.get("noise", "gaussian")
    if noise not in NOISE_KINDS:
        raise _bad(path, f"noise must be one of {', '.join(NOISE_KINDS)}, got {noise!r}")
    df = _num(path, "df", data.get("df", 3.0), 1e-6)
    name = str(data.get("name") or Path(path).stem)
    declared = None
    if "value_range" in data:
        try:
            declared = check_value_range(data["value_range"], "value_range")
        except ValueError as e:
            raise _bad(path, str(e)) from None
    t = _from_dict(data, path, gamma, noise, df, name)
    t.declared_value_range = declared
    return t


def _from_dict(data: dict, path: str, gamma: float, noise: str, df: float, name: str) -> Tree:
    if ("random" in data) == ("root" in data):
        raise _bad(path, "give exactly one of 'random' (generated tree) or 'root' (explicit tree)")
    if "random" in data:
        r = data["random"]
        if not isinstance(r, dict):
            raise _bad(path, "'random' must be a mapping")
        rk = {"depth", "branching", "chance", "reward_mean", "noise_scale", "noise_spread", "dirichlet", "seed"}
        unknown = sorted(set(map(str, r)) - rk)
        if unknown:
            raise _bad(path, f"random: unknown key {unknown[0]!r}; valid keys: {', '.join(sorted(rk))}")
        rm = r.get("reward_mean", [0.0, 1.0])
        if not isinstance(rm, (list, tuple)) or len(rm) != 2:
            raise _bad(path, f"random.reward_mean must be [low, high], got {rm!r}")
        lo, hi = _num(path, "reward_mean[0]", rm[0]), _num(path, "reward_mean[1]", rm[1])
        if hi < lo:
            raise _bad(path, f"random.reward_mean must have low <= high, got {rm!r}")
        try:
            return generate(
                _int(path, "random.depth", r.get("depth", 3), 1),
                _int(path, "random.branching", r.get("branching", 4), 1),
                _int(path, "random.chance", r.get("chance", 2), 1),
                reward_mean=(lo, hi),
                noise_scale=_num(path, "random.noise_scale", r.get("noise_scale", 1.0), 0.0),
                noise_spread=_num(path, "random.noise_spread", r.get("noise_spread", 0.0), 0.0, 1.0),
                dirichlet=_num(path, "random.dirichlet", r.get("dirichlet", 1.0), 1e-6),
                seed=_int(path, "random.seed", r.get("seed", 0), 0),
                gamma=gamma,
                noise=noise,
                df=df,
                name=name,
            )
        except ValueError as e:
            if type(e).__name__ == "InputError":
                raise
            raise _bad(path, str(e)) from None
    # explicit tree, numbered breadth-first
    node_off, mean, scale, out_off, prob, child = [0], [], [], [0], [], []
    queue = [(data["root"], "root")]
    i = 0
    while i < len(queue):
        actions, where = queue[i]
        i += 1
        if not isinstance(actions, list) or not actions:
            raise _bad(path, f"{where}: a node must be a non-empty list of actions")
        for ai, act in enumerate(actions):
            w = f"{where}[{ai}]"
            if not isinstance(act, dict):
                raise _bad(path, f"{w}: an action must be a mapping {{mean, scale, next}}")
            bad = sorted(set(map(str, act)) - {"mean", "scale", "next"})
            if bad:
                raise _bad(path, f"{w}: unknown key {bad[0]!r}; valid keys: mean, next, scale")
            m = _num(path, f"{w}.mean", act.get("mean", 0.0))
            if noise == "bernoulli" and not 0.0 <= m <= 1.0:
                raise _bad(path, f"{w}.mean must be in [0, 1] for bernoulli rewards, got {m}")
            mean.append(m)
            scale.append(_num(path, f"{w}.scale", act.get("scale", 1.0), 0.0))
            nxt = act.get("next") or [{"p": 1.0}]
            if not isinstance(nxt, list):
                raise _bad(path, f"{w}.next must be a list of {{p, node}}")
            ps = []
            for k, o in enumerate(nxt):
                if not isinstance(o, dict) or "p" not in o:
                    raise _bad(path, f"{w}.next[{k}] must be a mapping with 'p' (and optional 'node')")
                ps.append(_num(path, f"{w}.next[{k}].p", o["p"], 0.0, 1.0))
                if o.get("node"):
                    child.append(len(queue))
                    queue.append((o["node"], f"{w}.next[{k}].node"))
                else:
                    child.append(-1)
                if len(queue) > MAX_NODES:
                    raise _bad(path, f"more than {MAX_NODES} nodes")
            if len(prob) + len(ps) > MAX_OUTCOMES:
                raise _bad(path, f"more than {MAX_OUTCOMES:.0e} outcome entries")
            if abs(sum(ps) - 1.0) > 1e-6:
                raise _bad(path, f"{w}.next: probabilities sum to {sum(ps):.6g}, not 1")
            prob.extend(p / sum(ps) for p in ps)
            out_off.append(len(prob))
        node_off.append(len(mean))
    t = Tree(
        np.array(node_off, np.int64),
        np.array(mean, float),
        np.array(scale, float),
        np.array(out_off, np.int64),
        np.array(prob, float),
        np.array(child, np.int64),
        gamma=gamma,
        noise=noise,
        df=df,
        name=name,
    )
    return solve(t)


def load_tree(path: str | Path) -> Tree:
    """Read a tree YAML file (see the module docstring); InputError on a missing file (named
    as ``mcts --env`` takes it: a tree or an MDP file) or a bad one."""
    if not Path(path).is_file():
        raise InputError(f"env file {str(path)!r} (a tree or MDP file) does not exist or is not a file")
    return from_dict(read_yaml(path, "env file"), str(path))
