"""Gymnasium environments as generative models for tree search (see mcts.py).

``--env`` takes a gymnasium id with keyword arguments in URL query form,
``FrozenLake-v1?map_name=8x8&is_slippery=true``; values are parsed as YAML scalars.
"""

from __future__ import annotations

import copy
import inspect
import math

import numpy as np

from icml26.core.errors import InputError
from icml26.core.recipe import parse_yaml_text
from icml26.ops import mcts as R
from icml26.ops import mcts_table
from icml26.ops.mcts import std_normal_zig
from icml26.ops.mcts_table import compile_table, table_search


def _shown(text: str) -> str:
    """An option as typed, or its repr when it holds a newline or another control character
    (a message stays one line)."""
    return text if text.isprintable() else repr(text)


def split_query(query: str, spec: str) -> dict[str, str]:
    """``"a=1&b=true"`` -> ``{"a": "1", "b": "true"}`` (the options as typed); InputError when
    malformed or when an option is given twice (``map_name=4x4&map_name=8x8``)."""
    out: dict[str, str] = {}
    for part in filter(None, (query or "").split("&")):
        k, eq, v = part.partition("=")
        if not eq or not k.strip():
            raise InputError(f"{spec!r}: expected key=value after '?', got {part!r}")
        if not k.strip().isidentifier():
            raise InputError(
                f"{spec!r}: option name {k.strip()!r} is not a keyword name (letters, digits and _, "
                "not starting with a digit)"
            )
        if k.strip() in out:
            key = _shown(k.strip())
            raise InputError(
                f"{spec!r}: option {key} is given twice ({key}={_shown(out[k.strip()])} and "
                f"{key}={_shown(v)}); give each option once"
            )
        out[k.strip()] = v
    return out


def typed_kwargs(raw: dict[str, str]) -> dict:
    """The values of split_query() read as YAML scalars (a list or mapping stays the text)."""
    import yaml

    out: dict = {}
    for k, v in raw.items():
        try:
            val = parse_yaml_text(v) if v.strip() else ""
        except yaml.YAMLError:
            val = v
        if isinstance(val, (dict, list)):
            val = v
        out[k] = val
    return out


def parse_kwargs(query: str, spec: str) -> dict:
    """``"a=1&b=true&c=8x8"`` -> ``{"a": 1, "b": True, "c": "8x8"}``; InputError when malformed."""
    return typed_kwargs(split_query(query, spec))


_TRUE, _FALSE = ("true", "1"), ("false", "0")


def _first_line(e: BaseException) -> str:
    t = str(e).strip()
    return t.splitlines()[0] if t else type(e).__name__


def _options_taking(gspec, kind: type) -> set[str]:
    """Keyword arguments of a registered env that take a ``kind`` (bool or float): those whose
    default (in the registration or the constructor) is one, or whose annotation is ``kind``
    (a bool default does not count as a float)."""

    def of_kind(v) -> bool:
        return isinstance(v, kind) and (kind is bool or not isinstance(v, bool))

    names = {k for k, v in (gspec.kwargs or {}).items() if of_kind(v)}
    ep = gspec.entry_point
    try:
        if isinstance(ep, str):
            import importlib

            mod, _, attr = ep.partition(":")
            ep = getattr(importlib.import_module(mod), attr)
        for p in inspect.signature(ep).parameters.values():
            if of_kind(p.default) or p.annotation in (kind, kind.__name__):
                names.add(p.name)
    except Exception:  # noqa: BLE001  (an entry point we cannot inspect: the registration's defaults only)
        pass
    return names


def check_number_kwargs(kwargs: dict, number_names: set[str], spec: str, raw: dict | None = None) -> None:
    """Real-valued options must be finite numbers; InputError otherwise (``nan`` reaches
    gymnasium as a string, ``1e400`` as inf, and either makes a table of NaN)."""
    for k, v in kwargs.items():
        if k not in number_names:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            typed = raw[k] if raw is not None and k in raw else v
            raise InputError(f"--env {spec!r}: option {k} takes a finite number, got {typed!r}")


# options that make no sense for planning: refused before gymnasium sees them
REFUSED_OPTIONS = {"render_mode": "planning does not render; remove it"}


def check_table(P: dict, A: int, spec: str, raw: dict) -> None:
    """InputError unless the transition table ``P[s][a] = [(p, s', r, done), ...]`` is a
    distribution over outcomes for every (s, a) (probabilities finite, in [0, 1], summing to 1
    within 1e-6) with finite rewards; the message names the options given (they made it)."""
    given = "; check its options (" + ", ".join(f"{_shown(k)}={_shown(v)}" for k, v in raw.items()) + ")" if raw else ""

    def bad(what: str):
        return InputError(f"--env {spec!r}: the environment's transition {what}{given}")

    for s in P:
        for a in range(A):
            trs = P[s].get(a) if isinstance(P[s], dict) else (P[s][a] if a < len(P[s]) else None)
            if not trs:
                raise bad(f"table has no outcomes for state {s} action {a}")
            total = 0.0
            for tr in trs:
                try:  # an option of the wrong type (reward_schedule=[1,0,0] reaches gymnasium as text)
                    p, r = float(tr[0]), float(tr[2])
                    if not 0 <= int(tr[1]) < len(P):
                        raise ValueError
                except (TypeError, ValueError, IndexError, OverflowError):
                    raise bad(
                        f"table is not made of (probability, next state, reward, done) entries "
                        f"(state {s} action {a} has {str(tr)[:60]})"
                    ) from None
                if not math.isfinite(p) or not 0.0 <= p <= 1.0:
                    raise bad(f"probabilities are not a distribution (state {s} action {a} has probability {p:.6g})")
                if not math.isfinite(r):
                    raise bad(f"rewards are not finite (state {s} action {a} has reward {r})")
                total += p
            if abs(total - 1.0) > 1e-6:
                raise bad(f"probabilities are not a distribution (state {s} action {a} sums to {total:.6g})")


def check_bool_kwargs(kwargs: dict, bool_names: set[str], spec: str, raw: dict | None = None) -> dict:
    """Boolean options must be written true/false/1/0 (any case); InputError otherwise
    (YAML would read "maybe" as a string, which gymnasium then treats as true, and "yes" or
    "on" as true). ``raw``: the options as typed, before YAML parsing."""
    out = dict(kwargs)
    for k, v in kwargs.items():
        if k not in bool_names:
            continue
        typed = raw[k] if raw is not None and k in raw else v
        t = str(typed).strip().lower() if not isinstance(typed, bool) else ("true" if typed else "false")
        if t in _TRUE or t in _FALSE:
            out[k] = t in _TRUE
        else:
            raise InputError(f"--env {spec!r}: option {k} takes true/false/1/0, got {typed!r}")
    return out


def _blame(e: BaseException, kwargs: dict) -> str:
    """Which option(s) gymnasium rejected, when its message names a value or a key."""
    if not kwargs:
        return "no options"
    msg = str(e)
    by_value = [k for k, v in kwargs.items() if repr(v) in msg or (isinstance(v, str) and v and v in msg)]
    by_key = [k for k in kwargs if repr(k) in msg or k in msg]
    hit = by_value or by_key
    name = lambda k: k if k.isidentifier() else repr(k)  # a key such as '0\n0' stays on one line
    if hit:
        return "option " + ", ".join(f"{name(k)}={kwargs[k]!r}" for k in hit)
    return "options " + ", ".join(f"{name(k)}={v!r}" for k, v in kwargs.items())


def _gym():
    try:
        import gymnasium as gym
    except ImportError:
        from icml26.core.errors import MissingDataError

        raise MissingDataError(
            "gymnasium environments need gymnasium: pip install 'icml26[rl]' (or pip install gymnasium)"
        ) from None
    return gym


def _freeze(obs):
    """A hashable key for an observation."""
    if isinstance(obs, (int, float, str, bool)):
        return obs
    if isinstance(obs, np.ndarray):
        return (obs.dtype.str, obs.shape, obs.tobytes())
    if isinstance(obs, (tuple, list)):
        return tuple(_freeze(o) for o in obs)
    if isinstance(obs, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in obs.items()))
    if hasattr(obs, "item"):
        return obs.item()
    return repr(obs)


class TableModel:
    """Generative model from a toy-text transition table ``P[s][a] = [(p, s', r, done), ...]``
    (FrozenLake, Taxi, CliffWalking), with counter-based random numbers: the j-th sample of
    (tree node, a) is a pure function of (seed, node, a, j). State = (node uid, env state).
    ``noise``: None, or per state a list of A reward-noise std (MDP files): the reward of an
    entry of (s, a) is then ``r + noise[s][a] z``, z the ziggurat N(0, 1) draw
    ``std_normal_zig(seed, uid A + a, j)`` (the tree files' reward draw)."""

    def __init__(self, P: dict, A: int, s0: int, gamma: float, seed: int, noise=None):
        self.P, self.A, self.s0, self.gamma, self.seed = P, A, s0, gamma, seed
        self.noise = noise
        self.uid = 0

    def root(self):
        return (0, self.s0)

    def n_actions(self, state) -> int:
        return self.A

    def step(self, state, a: int, j: int):
        from icml26.ops.mcts import OUTCOME_C, key, u01

        uid, s = state
        u = u01(key(self.seed, uid * self.A + a, j, OUTCOME_C))
        trs = self.P[s][a]
        pick, acc = trs[-1], 0.0
        for tr in trs:
            acc += tr[0]
            if u < acc:
                pick = tr
                break
        _, s2, r, done = pick
        r = float(r)
        if self.noise is not None:
            sd = self.noise[s][a]
            if sd != 0.0:
                r = r + sd * std_normal_zig(self.seed, uid * self.A + a, j)
        self.uid += 1
        return r, int(s2), (self.uid, int(s2)), bool(done)


class CopyModel:
    """Generative model of any gymnasium env whose state survives ``copy.deepcopy`` (the
    environment's RNG is reseeded from (seed, node, a, j) before each step)."""

    def __init__(self, env, obs, A: int, gamma: float, seed: int):
        self.env0, self.obs0, self.A, self.gamma, self.seed = env, obs, A, gamma, seed
        self.uid = 0

    def root(self):
        return (0, self.env0)

    def n_actions(self, state) -> int:
        return self.A

    def step(self, state, a: int, j: int):
        uid, env = state
        e = copy.deepcopy(env)
        e.unwrapped.np_random = np.random.default_rng([self.seed, uid, a, j])
        obs, r, term, trunc, _ = e.step(a)
        self.uid += 1
        return float(r), _freeze(obs), (self.uid, e), bool(term or trunc)


class GymProblem:
    """A root state of a gymnasium env with (when it has a transition table) exact values of
    the root actions over the search horizon."""

    def __init__(self, spec: str, horizon: int, gamma: float):
        gym = _gym()
        name, _, q = spec.partition("?")
        name = name.strip()
        raw = split_query(q, spec)
        kwargs = typed_kwargs(raw)
        try:
            gspec = gym.spec(name)
        except Exception as e:  # noqa: BLE001  (unknown id or version)
            raise InputError(
                f"--env {spec!r}: not a tree file (.yaml) and gymnasium cannot make it: {_first_line(e)}"
            ) from None
        for k in raw:
            if k in REFUSED_OPTIONS:
                raise InputError(f"--env {spec!r}: option {k} is not supported ({REFUSED_OPTIONS[k]})")
        kwargs = check_bool_kwargs(kwargs, _options_taking(gspec, bool), spec, raw)
        check_number_kwargs(kwargs, _options_taking(gspec, float), spec, raw)
        try:
            env = gym.make(name, **kwargs)
        except Exception as e:  # noqa: BLE001  (bad keyword or value, missing dependency)
            raise InputError(
                f"--env {spec!r}: gymnasium cannot make {name!r} with {_blame(e, kwargs)}: "
                f"{type(e).__name__}: {_first_line(e)}"
            ) from None
        if not hasattr(env.action_space, "n"):
            raise InputError(f"--env {spec!r}: tree search needs a discrete action space, got {env.action_space}")
        self.spec, self.horizon, self.gamma = spec, horizon, gamma
        self.A = int(env.action_space.n)
        self.env = env
        u = env.unwrapped
        self.P = getattr(u, "P", None) if isinstance(getattr(u, "P", None), dict) else None
        self.q_root = None
        if self.P is not None:
            check_table(self.P, self.A, spec, raw)
        try:  # options gymnasium took at make() can still break reset() or a step
            if self.P is not None:
                obs, _ = env.reset(seed=0)
                self.s0 = int(obs)
                self._exact()
            else:
                self.obs0, _ = env.reset(seed=0)
                self._rollout_range()
        except InputError:
            raise
        except Exception as e:  # noqa: BLE001
            raise InputError(
                f"--env {spec!r}: gymnasium made {name!r} with {_blame(e, kwargs)} but cannot run it: "
                f"{type(e).__name__}: {_first_line(e)}"
            ) from None

    def _exact(self) -> None:
        """Backward induction over the horizon: Q_h(s, a) = sum_tr p (r + gamma (1 - done) V_{h-1}(s'))."""
        P, A, g = self.P, self.A, self.gamma
        S = len(P)
        v = np.zeros(S)
        vmin = np.zeros(S)
        rs = [tr[2] for s in P for a in P[s] for tr in P[s][a]]
        self.r_span = float(max(rs) - min(rs)) or 1.0
        for _ in range(self.horizon):
            q = np.zeros((S, A))
            qmin = np.zeros((S, A))
            for s in range(S):
                for a in range(A):
                    for p, s2, r, done in P[s][a]:
                        q[s, a] += p * (r + (0.0 if done else g * v[s2]))
                        qmin[s, a] += p * (r + (0.0 if done else g * vmin[s2]))
            v, vmin = q.max(axis=1), qmin.min(axis=1)
        self.q_root = q[self.s0]
        self.v_lo, self.v_hi = float(vmin[self.s0]), float(v[self.s0])
        if self.v_hi - self.v_lo < 1e-12:
            self.v_hi = self.v_lo + self.r_span

    def _rollout_range(self, n: int = 200) -> None:
        """Range of returns of uniformly random rollouts: the value scale when there is no table."""
        rng = np.random.default_rng(0)
        model = CopyModel(self.env, self.obs0, self.A, self.gamma, 12345)
        rets, rewards = [], []
        for i in range(n):
            st, G, disc = model.root(), 0.0, 1.0
            for t in range(self.horizon):
                r, _, st, done = model.step(st, int(rng.integers(self.A)), i * self.horizon + t)
                rewards.append(r)
                G += disc * r
                disc *= self.gamma
                if done:
                    break
            rets.append(G)
        self.v_lo, self.v_hi = float(min(rets)), float(max(rets))
        if self.v_hi - self.v_lo < 1e-12:
            self.v_hi = self.v_lo + 1.0
        self.r_span = float(max(rewards) - min(rewards)) or 1.0

    noise = None  # reward-noise std per (state, action) of the table (MDP files), else None

    def table_model(self, s0: int, seed: int) -> TableModel:
        """The Python generative model of the table from state ``s0``."""
        return TableModel(self.P, self.A, s0, self.gamma, seed, self.noise)

    def model(self, seed: int):
        if self.P is not None:
            return self.table_model(self.s0, seed)
        return CopyModel(self.env, self.obs0, self.A, self.gamma, seed)

    def table(self):
        """The transition table compiled for the C++ search (``icml26.ops.mcts_table.CompiledTable``),
        built once per problem; None without a table or when the kernel cannot reproduce the
        Python model on it (see ``compile_table``)."""
        if self.P is None:
            return None
        if not hasattr(self, "_table"):
            self._table = compile_table(self.P, self.A, self.gamma, self.noise)
        return self._table

    def kernel_path(self, use: str = "auto") -> bool:
        """Whether searches on this problem run in the C++ table kernel: a compiled table, the
        kernel available (JIT-built on first use) and ``use`` not "ref". RuntimeError when
        ``use`` is "ext" and either is missing."""
        if use == "ref":
            return False

        ok = self.table() is not None and mcts_table.available()
        if use == "ext" and not ok:
            why = (
                "the env has no transition table the kernel can read"
                if self.table() is None
                else "the mcts_table C++ kernel is unavailable"
            )
            raise RuntimeError(f"backend ext: {why}")
        return ok

    def search(self, algo: str, budgets, seeds, prm, use: str = "auto"):
        """One search per (seed, budget) from the root state: ((S, B) recommended root actions,
        backend) with backend "ext-cpu" (the C++ table kernel: envs with a transition table)
        or "python" (the reference search; envs without a table, or ``use="ref"``). Both give
        the same recommendations on a table env (same seeds, bit-for-bit root statistics)."""
        if self.kernel_path(use):
            return table_search(self.table(), self.s0, algo, budgets, seeds, prm)[0], "ext-cpu"
        aid = R.ALGOS.index(algo)
        rec = np.zeros((len(seeds), len(budgets)), np.int64)
        for i, s in enumerate(seeds):
            for j, b in enumerate(budgets):
                rec[i, j] = R.reference_search(self.model(s), aid, prm, s, b)[0]
        return rec, "python"


def make_problem(spec: str, *, horizon: int, gamma: float) -> GymProblem:
    return GymProblem(spec, horizon, gamma)
