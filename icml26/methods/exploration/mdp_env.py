"""MDP files (``icml26 bpi``'s format, :mod:`icml26.methods.exploration.mdps`) as ``icml26 mcts``
environments.

``--env`` names an MDP as ``mdp:SPEC`` with SPEC anything ``bpi --mdp`` takes (a built-in with
options, ``mdp:riverswim``, ``'mdp:garnet?states=20&seed=3'``, or a file, ``mdp:my.yaml``), or
as a file directly: a ``.npz``, or a ``.yaml``/``.yml`` whose top-level mapping has the key
``P`` (tree files have ``root`` or ``random``).

The MDP's ``P`` (S, A, S), ``R`` (S, A) and ``noise`` (S, A) become the transition table of a
gymnasium toy-text env, ``P[s][a] = [(P[s, a, s'], s', R[s, a], False) for s' with
P[s, a, s'] > 0]`` in increasing s', plus the Gaussian reward noise of (s, a): the search then
runs on exactly the path of the gymnasium envs with a table (``gym_models.GymProblem``:
``compile_table`` to the C++ table kernel, ``TableModel`` for the Python search, the same
random numbers and the same results bit for bit; a reward is ``R[s, a] + noise[s, a] z`` with
z the ziggurat N(0, 1) draw of the tree files). No state is terminal: a simulation runs
``horizon`` steps. The MDP's own ``gamma`` is the discount (an explicit ``--set gamma`` exits 2,
as for tree files; ``mcts.load_env``). The root state is ``reset(seed=0)``: a draw from ``rho`` with
``numpy.random.default_rng(0)`` (the start state when ``rho`` is a point mass, as for every
built-in). Exact root values are finite-horizon backward induction over ``horizon`` steps
(``GymProblem._exact``), what the search estimates.

Episodes (``--episodes N``) are played in :class:`MDPEnv`: ``reset(seed)`` draws the start from
``rho``, ``step(a)`` draws ``s' ~ P[s, a]`` and the reward ``R[s, a] + noise[s, a] N(0, 1)``
from ``numpy.random.default_rng(seed)``; nothing ends an episode but ``episode_steps``
(default 200).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from icml26.core.errors import InputError
from icml26.core.recipe import read_yaml
from icml26.methods.exploration.gym_models import GymProblem
from icml26.methods.exploration.mdps import load_mdp

PREFIX = "mdp:"


def mdp_spec(env: str, path: Path | None = None) -> str | None:
    """The ``bpi --mdp`` spec that an ``mcts --env`` names, or None (a tree file or a gymnasium
    id). ``path``: the env's resolved ``.yaml`` path (``mcts.resolve_env_path``), peeked at for a
    top-level ``P`` key."""
    if env.startswith(PREFIX):
        return env[len(PREFIX) :]
    if Path(env).suffix.lower() == ".npz":
        return env
    if path is not None and path.is_file():
        d = read_yaml(path, "env file")
        if isinstance(d, dict) and "P" in d and "root" not in d and "random" not in d:
            return str(path)
    return None


def table_of(mdp) -> dict:
    """``mdp`` (:class:`~icml26.methods.exploration.mdps.MDP`) as a gymnasium transition table
    ``{s: {a: [(p, s', R[s, a], False), ...]}}`` (Python floats and ints; entries with p > 0 in
    increasing s')."""
    P, R = mdp.P, mdp.R
    out = {}
    for s in range(mdp.S):
        row = {}
        for a in range(mdp.A):
            nz = np.flatnonzero(P[s, a] > 0)
            r = float(R[s, a])
            row[a] = [(float(P[s, a, t]), int(t), r, False) for t in nz]
        out[s] = row
    return out


class MDPEnv:
    """The real environment of an MDP for episodes (gymnasium's reset/step interface).
    ``reset(seed)`` -> (state, {}); ``step(a)`` -> (state, reward, False, False, {})."""

    spec = None  # no TimeLimit: episodes end at episode_steps

    def __init__(self, mdp):
        self.mdp = mdp
        self.unwrapped = self
        self._cum = np.cumsum(mdp.P, axis=2)
        self._rho = np.cumsum(mdp.rho)
        self._rng = np.random.default_rng(0)
        self.s = 0

    def _draw(self, cum: np.ndarray) -> int:
        return int(min(np.searchsorted(cum, self._rng.random(), side="right"), cum.size - 1))

    def reset(self, seed: int | None = None):
        self._rng = np.random.default_rng(seed)
        self.s = self._draw(self._rho)
        return self.s, {}

    def step(self, a: int):
        m, s = self.mdp, self.s
        s2 = self._draw(self._cum[s, a])
        r = float(m.R[s, a])
        if m.noise[s, a] > 0:
            r = r + float(m.noise[s, a]) * float(self._rng.standard_normal())
        self.s = s2
        return s2, r, False, False, {}

    def close(self) -> None:
        pass


class MDPProblem(GymProblem):
    """An MDP as an ``mcts`` problem: the interface of :class:`GymProblem` with a transition
    table (``P``, ``A``, ``s0``, ``q_root``, ``v_lo``, ``v_hi``, ``r_span``, ``env``,
    ``table()``, ``search``, ``table_model``). InputError on a bad MDP (``mdps.load_mdp``'s
    messages, naming ``--env``)."""

    def __init__(self, spec: str, mdp_spec_: str, horizon: int):
        try:
            mdp = load_mdp(mdp_spec_)
        except InputError as e:
            msg = str(e).replace(f"--mdp {mdp_spec_!r}", f"--env {spec!r}")
            raise InputError(msg if msg.startswith("--env") else f"--env {spec!r}: {msg}") from None
        self.spec, self.horizon, self.gamma = spec, horizon, float(mdp.gamma)
        self.mdp = mdp
        self.A = int(mdp.A)
        self.P = table_of(mdp)
        self.noise = mdp.noise.tolist() if (mdp.noise > 0).any() else None
        self.env = MDPEnv(mdp)
        self.s0 = int(self.env.reset(seed=0)[0])
        self.q_root = None
        self._exact()
