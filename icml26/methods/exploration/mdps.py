"""Tabular MDPs for best-policy identification: built-ins, a YAML/npz file format, validation
and exact values.

An MDP is ``P`` (S, A, S) transition probabilities, ``R`` (S, A) mean rewards, ``noise``
(S, A) reward noise std (Gaussian; 0 = deterministic reward), a discount ``gamma`` and a
start distribution ``rho`` (S,). The generative model returns, for a query (s, a), a reward
``R[s, a] + noise[s, a] * z`` (z ~ N(0, 1)) and a next state ``s' ~ P[s, a]``.

Built-ins (options after ``?``, e.g. ``garnet?states=20&actions=4&seed=3``):
- ``riverswim`` (Strehl & Littman 2008, the variant of Osband et al. 2013): ``states`` (6),
  ``gamma`` (0.95), ``noise`` (0.1). Left is deterministic; right succeeds w.p. 0.35
  (0.6 at the left end), stays w.p. 0.6 and slips left w.p. 0.05; reward 0.005 for left at
  the left end, 1 for right at the right end. Start: the left end.
- ``garnet`` (Archibald et al. 1995): ``states`` (10), ``actions`` (3), ``branching`` (3) next
  states per (s, a) with Dirichlet(1) probabilities, mean rewards U(0, 1), ``noise`` (0.5),
  ``gamma`` (0.9), ``seed`` (0). Start: state 0.
- ``frozenlake4x4`` / ``frozenlake8x8``: gymnasium's slippery FrozenLake transition table
  (needs ``pip install gymnasium``); holes and the goal are absorbing with reward 0; the
  reward of (s, a) is its expected reward (probability of reaching the goal in one step);
  ``gamma`` (0.95), ``noise`` (0). Start: the S cell.

Files: YAML with keys ``P`` (S x A x S nested lists), ``R`` (S x A), optional ``noise``
(S x A or a number), ``gamma``, ``rho`` (S) or ``start`` (a state), ``name``; or ``.npz`` with
arrays ``P``, ``R`` and optional ``noise``, ``rho``, ``gamma``.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from icml26.core.errors import InputError
from icml26.core.recipe import read_yaml
from icml26.methods.exploration.gym_models import parse_kwargs

BUILTINS = ("riverswim", "garnet", "frozenlake4x4", "frozenlake8x8")
MAX_MAGNITUDE = 1e150  # |R| and noise: values (R / (1 - gamma)) and variances stay finite
MAX_TRANSITIONS = (
    2e7  # S x A x S float64 entries (160 MB); a run holds ~5 such arrays (P, its cumsum, counts, P_hat, temporaries)
)


def check_size(S: int, A: int, src: str) -> None:
    """InputError when an (S, A, S) transition table exceeds MAX_TRANSITIONS (before allocating it)."""
    n = float(S) * A * S
    if n > MAX_TRANSITIONS:
        raise _bad(
            src,
            f"S x A x S = {S} x {A} x {S} = {n:.1e} transition entries (~{n * 8 / 1e9:.3g} GB as float64, "
            f"held ~5 times per run) exceeds the limit of {MAX_TRANSITIONS:.0e}; use fewer states or actions",
        )


@dataclass
class MDP:
    """P: (S, A, S); R, noise: (S, A); rho: (S,); gamma in [0, 1)."""

    P: np.ndarray
    R: np.ndarray
    noise: np.ndarray
    rho: np.ndarray
    gamma: float
    name: str = "mdp"

    @property
    def S(self) -> int:
        return self.P.shape[0]

    @property
    def A(self) -> int:
        return self.P.shape[1]


def value_iteration(
    P: np.ndarray,
    R: np.ndarray,
    gamma: float,
    tol: float = 1e-12,
    max_iter: int = 100_000,
    V0: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Optimal (Q (S, A), V (S,)) by value iteration to sup-norm change < tol * (1 - gamma) / gamma."""
    V = np.zeros(P.shape[0]) if V0 is None else V0.copy()
    thr = tol * (1 - gamma) / max(gamma, 1e-12)
    for _ in range(max_iter):
        Q = R + gamma * (P @ V)
        Vn = Q.max(axis=1)
        if np.max(np.abs(Vn - V)) < thr:
            V = Vn
            break
        V = Vn
    return R + gamma * (P @ V), V


def policy_value(P: np.ndarray, R: np.ndarray, gamma: float, pi: np.ndarray) -> np.ndarray:
    """V^pi (S,) of a deterministic policy pi (S,) int, by a linear solve (I - gamma P_pi) V = R_pi."""
    S = P.shape[0]
    idx = np.arange(S)
    return np.linalg.solve(np.eye(S) - gamma * P[idx, pi], R[idx, pi])


def policy_iteration(
    P: np.ndarray, R: np.ndarray, gamma: float, pi0: np.ndarray | None = None, max_iter: int = 200
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Optimal (Q (S, A), V (S,), pi (S,)) by Howard's policy iteration (exact linear solves);
    a policy changes only where another action is better by more than 1e-12 (no cycling)."""
    S = P.shape[0]
    idx = np.arange(S)
    pi = (R + gamma * (P @ np.zeros(S))).argmax(axis=1) if pi0 is None else np.asarray(pi0).copy()
    for _ in range(max_iter):
        V = np.linalg.solve(np.eye(S) - gamma * P[idx, pi], R[idx, pi])
        Q = R + gamma * (P @ V)
        best = Q.argmax(axis=1)
        better = Q[idx, best] > Q[idx, pi] + 1e-12 * (1 + np.abs(V))
        if not better.any():
            break
        pi = np.where(better, best, pi)
    return Q, V, pi


def exact(mdp: MDP) -> dict:
    """V*, Q*, an optimal policy (by policy iteration from value iteration's greedy policy)."""
    Q, V, pi = policy_iteration(mdp.P, mdp.R, mdp.gamma)
    return {"V": V, "Q": Q, "pi": pi, "v_rho": float(mdp.rho @ V)}


def policy_gap(mdp: MDP, pi: np.ndarray, v_star_rho: float) -> float:
    """V*(rho) - V^pi(rho) >= 0."""
    return float(v_star_rho - mdp.rho @ policy_value(mdp.P, mdp.R, mdp.gamma, np.asarray(pi)))


def _bad(src: str, msg: str):
    return InputError(f"MDP {src!r}: {msg}")


def validate(P, R, noise, rho, gamma, src: str = "<mdp>", name: str | None = None) -> MDP:
    """Check shapes and values; InputError naming the bad entry."""
    if isinstance(P, list) and P and isinstance(P[0], list):  # nested lists (YAML aliases can make them
        check_size(len(P), len(P[0]), src)  # huge from a small file): size before converting
    try:
        P = np.asarray(P, dtype=np.float64)
        R = np.asarray(R, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an integer beyond float range
        raise _bad(src, "P and R must be numeric arrays (P: S x A x S, R: S x A)") from None
    if P.ndim != 3 or P.shape[0] != P.shape[2] or P.shape[0] < 1 or P.shape[1] < 1:
        raise _bad(src, f"P must have shape (S, A, S), got {P.shape}")
    S, A = P.shape[:2]
    check_size(S, A, src)
    if R.shape != (S, A):
        raise _bad(src, f"R must have shape (S, A) = ({S}, {A}), got {R.shape}")
    if not np.all(np.isfinite(P)) or not np.all(np.isfinite(R)):
        raise _bad(src, "P and R must be finite")
    if np.abs(R).max() > MAX_MAGNITUDE:
        raise _bad(src, f"R must be at most {MAX_MAGNITUDE:g} in magnitude (values sum over the horizon)")
    if (P < 0).any():
        s, a, t = map(int, np.argwhere(P < 0)[0])
        raise _bad(src, f"P[{s}][{a}][{t}] = {P[s, a, t]} is negative")
    sums = P.sum(axis=2)
    if np.abs(sums - 1).max() > 1e-6:
        s, a = map(int, np.unravel_index(np.abs(sums - 1).argmax(), sums.shape))
        raise _bad(src, f"row P[{s}][{a}] sums to {sums[s, a]:.6g}, not 1")
    P = P / sums[:, :, None]
    try:
        noise = np.asarray(0.0 if noise is None else noise, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an integer beyond float range
        raise _bad(src, "noise must be a number or an S x A array") from None
    if noise.ndim == 0:
        noise = np.full((S, A), float(noise))
    if noise.shape != (S, A):
        raise _bad(src, f"noise must be a number or have shape (S, A) = ({S}, {A}), got {noise.shape}")
    if not np.all(np.isfinite(noise)) or (noise < 0).any() or (noise > MAX_MAGNITUDE).any():
        raise _bad(src, f"noise (reward std) must be finite, >= 0 and at most {MAX_MAGNITUDE:g}")
    if rho is None:
        rho = np.zeros(S)
        rho[0] = 1.0
    try:
        rho = np.asarray(rho, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an integer beyond float range
        raise _bad(src, f"rho must be a probability vector of length {S}") from None
    if rho.shape != (S,) or not np.all(np.isfinite(rho)) or (rho < 0).any() or abs(rho.sum() - 1) > 1e-6:
        raise _bad(src, f"rho must be a probability vector of length {S}")
    if isinstance(gamma, bool) or not isinstance(gamma, (int, float, np.floating)) or not 0.0 <= float(gamma) < 1.0:
        raise _bad(src, f"gamma must be a number in [0, 1), got {gamma!r}")
    return MDP(P, R, noise, rho / rho.sum(), float(gamma), str(name) if name is not None else Path(src).stem)


def riverswim(states: int = 6, gamma: float = 0.95, noise: float = 0.1) -> MDP:
    if states < 2:
        raise ValueError(f"riverswim needs states >= 2, got {states}")
    S, A = states, 2
    check_size(S, A, "riverswim")
    P = np.zeros((S, A, S))
    R = np.zeros((S, A))
    for s in range(S):
        P[s, 0, max(s - 1, 0)] = 1.0
        if s == 0:
            P[s, 1, 0], P[s, 1, 1] = 0.4, 0.6
        elif s == S - 1:
            P[s, 1, s], P[s, 1, s - 1] = 0.6, 0.4
        else:
            P[s, 1, s + 1], P[s, 1, s], P[s, 1, s - 1] = 0.35, 0.6, 0.05
    R[0, 0] = 0.005
    R[S - 1, 1] = 1.0
    return validate(P, R, noise, None, gamma, "riverswim", f"riverswim{S}")


def garnet(
    states: int = 10, actions: int = 3, branching: int = 3, noise: float = 0.5, gamma: float = 0.9, seed: int = 0
) -> MDP:
    if not 1 <= branching <= states or actions < 1:
        raise ValueError(
            f"garnet needs 1 <= branching <= states and actions >= 1, got {branching}, {states}, {actions}"
        )
    check_size(states, actions, "garnet")
    rng = np.random.default_rng(seed)
    P = np.zeros((states, actions, states))
    for s in range(states):
        for a in range(actions):
            nxt = rng.choice(states, size=branching, replace=False)
            P[s, a, nxt] = rng.dirichlet(np.ones(branching))
    R = rng.uniform(0.0, 1.0, size=(states, actions))
    return validate(P, R, noise, None, gamma, "garnet", f"garnet-{states}x{actions}x{branching}-s{seed}")


def frozenlake(map_name: str = "4x4", gamma: float = 0.95, noise: float = 0.0) -> MDP:
    try:
        import gymnasium as gym
    except ImportError:
        from icml26.core.errors import MissingDataError

        raise MissingDataError(
            "frozenlake needs gymnasium: pip install 'icml26[rl]' (or pip install gymnasium)"
        ) from None
    env = gym.make("FrozenLake-v1", map_name=map_name, is_slippery=True)
    u = env.unwrapped
    S, A = u.observation_space.n, u.action_space.n
    P = np.zeros((S, A, S))
    R = np.zeros((S, A))
    desc = u.desc.reshape(-1)
    for s in range(S):
        for a in range(A):
            if desc[s] in (b"H", b"G"):
                P[s, a, s] = 1.0
                continue
            for p, t, r, _ in u.P[s][a]:
                P[s, a, t] += p
                R[s, a] += p * r
    rho = np.asarray(u.initial_state_distrib, dtype=float)
    env.close()
    return validate(P, R, noise, rho, gamma, "frozenlake", f"frozenlake{map_name}")


def _parse_opts(spec: str) -> tuple[str, dict]:
    name, _, q = spec.partition("?")
    return name.strip().lower(), parse_kwargs(q, spec)


def _check_opts(name: str, kw: dict) -> None:
    """InputError naming an unknown option or one of the wrong type (types from the maker's defaults)."""
    fn = {"riverswim": riverswim, "garnet": garnet}.get(name, frozenlake)
    params = {k: p.default for k, p in inspect.signature(fn).parameters.items() if k != "map_name"}
    for k, v in kw.items():
        if k not in params:
            raise InputError(f"{name} has no option {k!r}; valid options: {', '.join(params)}")
        d = params[k]
        if isinstance(d, int) and (isinstance(v, bool) or not isinstance(v, int)):
            raise InputError(f"{name} option {k}={v!r} must be an integer")
        if isinstance(d, float) and (isinstance(v, bool) or not isinstance(v, (int, float))):
            raise InputError(f"{name} option {k}={v!r} must be a number")


def _load_npz(p: Path, spec: str) -> MDP:
    """An MDP from a .npz file (arrays P, R; optional noise, rho, gamma, name); InputError if bad."""
    try:
        with np.load(p, allow_pickle=False) as z:
            d = {k: z[k] for k in z.files}
    except Exception as e:  # noqa: BLE001
        raise InputError(f"MDP {spec!r}: not a readable .npz file ({type(e).__name__})") from None
    for k in ("P", "R"):
        if k not in d:
            raise _bad(spec, f"missing array {k!r} (has {', '.join(sorted(d)) or 'none'})")
    g = d.get("gamma", 0.95)
    if np.ndim(g) == 0:
        try:
            g = float(np.asarray(g))
        except (TypeError, ValueError, OverflowError):  # OverflowError: an integer beyond float range
            raise _bad(spec, f"gamma must be a number in [0, 1), got {np.asarray(g)!r}") from None
    name = d.get("name")
    name = str(name.item() if np.ndim(name) == 0 else name.tolist()) if name is not None else None
    return validate(d["P"], d["R"], d.get("noise"), d.get("rho"), g, spec, name)


def load_mdp(spec: str) -> MDP:
    """A built-in name (with ``?key=value`` options) or a .yaml/.yml/.npz file; InputError if bad."""
    p = Path(spec)
    if p.suffix.lower() in (".yaml", ".yml", ".npz"):

        def _is_file(q: Path) -> bool:
            try:
                return q.is_file()
            except OSError:  # e.g. a name too long for the file system
                return False

        if not _is_file(p):
            alt = Path(__file__).resolve().parents[3] / p
            if not _is_file(alt):
                raise InputError(f"MDP file {spec[:200]!r} does not exist")
            p = alt
        if p.suffix.lower() == ".npz":
            return _load_npz(p, spec)

        d = read_yaml(p, "MDP")
        if not isinstance(d, dict):
            raise _bad(spec, "expected a mapping with keys P, R (and noise, gamma, rho/start, name)")
        known = {"P", "R", "noise", "gamma", "rho", "start", "name", "description"}
        bad = sorted(set(map(str, d)) - known)
        if bad:
            raise _bad(spec, f"unknown key {bad[0]!r}; valid keys: {', '.join(sorted(known))}")
        for k in ("P", "R"):
            if k not in d:
                raise _bad(spec, f"missing key {k!r}")
        rho = d.get("rho")
        if rho is None and "start" in d:
            st = d["start"]
            if isinstance(st, float) and st.is_integer():
                st = int(st)
            if isinstance(st, bool) or not isinstance(st, int) or not isinstance(d["P"], list):
                raise _bad(spec, f"start must be a state index (an integer), got {str(st)[:40]!r}")
            S = len(d["P"])
            if not 0 <= st < S:
                raise _bad(spec, f"start must be in [0, {S}), got {st}")
            rho = np.zeros(S)  # not np.eye(S): S x S floats for one row
            rho[st] = 1.0
        try:
            return validate(d["P"], d["R"], d.get("noise"), rho, d.get("gamma", 0.95), spec, d.get("name"))
        except ValueError as e:
            if isinstance(e, InputError):
                raise
            raise _bad(spec, f"P must be S x A x S and R S x A nested lists of numbers ({e})") from None
    name, kw = _parse_opts(spec)
    makers = {
        "riverswim": riverswim,
        "garnet": garnet,
        "frozenlake4x4": lambda **k: frozenlake("4x4", **k),
        "frozenlake8x8": lambda **k: frozenlake("8x8", **k),
    }
    if name not in makers:
        raise InputError(f"--mdp {spec!r}: not a file (.yaml/.npz) nor one of {', '.join(BUILTINS)}")
    _check_opts(name, kw)
    try:
        return makers[name](**kw)
    except TypeError as e:
        raise InputError(f"--mdp {spec!r}: bad option ({e})") from None
    except ValueError as e:
        if isinstance(e, InputError):
            raise
        raise InputError(f"--mdp {spec!r}: {e}") from None
