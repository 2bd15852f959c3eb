"""Tree search over a gymnasium transition table (``env.unwrapped.P``: FrozenLake, Taxi,
CliffWalking, ...) in C++ (``icml26/csrc/cpu/mcts_table.h``), or its pure-Python twin: the
reference search (:class:`icml26.ops._ref.mcts.Search`) on
:class:`icml26.methods.exploration.gym_models.TableModel`.

The table is compiled once per problem to flat arrays (:func:`compile_table`); the kernel then
expands the search tree on demand exactly as the Python search does (one node per parent, action
and observed next state; the same counter-based outcome draws), so with the same seeds the
recommendations and root statistics are the same, bit for bit. :class:`TableSearch` keeps one
search alive between moves of an episode (``run``, ``reroot``, ``root_stats``)."""

from __future__ import annotations

import ctypes
import numbers
from dataclasses import dataclass

import numpy as np

from icml26.core import ext
from icml26.ops._ref import mcts as _ref

FAMILY = "mcts_table"
SOURCES = ["cpu/mcts_table_cpu.cpp"]


def backend() -> str:
    """Load (JIT-build if needed) the kernel; "ext-cpu" or "ref"."""
    be = ext.backend(FAMILY)
    return be if be is not None else ext.load(FAMILY, SOURCES, extra_cflags=["-ffp-contract=off"])


@dataclass(frozen=True)
class CompiledTable:
    """``P[s][a] = [(p, s', r, done), ...]`` as arrays: entries of (s, a) = ``off[s A + a] ..
    off[s A + a + 1] - 1`` in the table's order; ``nout[s A + a]`` distinct next states;
    ``noise`` (S A,) float64 the std of a Gaussian reward noise of (s, a) added to the entry's
    reward (MDP files), or None (deterministic rewards: gymnasium's tables)."""

    S: int
    A: int
    off: np.ndarray  # (S A + 1,) int64
    prob: np.ndarray  # (E,) float64
    next: np.ndarray  # (E,) int64
    rew: np.ndarray  # (E,) float64
    done: np.ndarray  # (E,) int64 0/1
    nout: np.ndarray  # (S A,) int64
    gamma: float
    noise: np.ndarray | None = None  # (S A,) float64 or None

    def args(self) -> tuple:
        """The C entry points' leading arguments (the arrays' addresses; the arrays live on self)."""
        return (
            self.S,
            self.A,
            self.off.ctypes.data,
            self.next.ctypes.data,
            self.done.ctypes.data,
            self.nout.ctypes.data,
            self.prob.ctypes.data,
            self.rew.ctypes.data,
            self.gamma,
            None if self.noise is None else self.noise.ctypes.data,
        )


def _exact_prob(p) -> bool:
    """A probability whose running sum in Python (``acc += p``, acc a float) is plain float64
    arithmetic: a Python float or int, or a NumPy float64 (a float32 would round the sum to
    float32 under NumPy's promotion rules)."""
    if isinstance(p, bool):
        return False
    return type(p) in (float, int, np.float64) or (isinstance(p, numbers.Integral) and not isinstance(p, np.floating))


def compile_table(P: dict, A: int, gamma: float, noise=None) -> CompiledTable | None:
    """The table as arrays, or None when the kernel cannot reproduce the Python model on it
    (states not numbered 0..S-1, or probabilities of a type other than float64 / int).
    ``noise``: None, or an (S, A) array of reward-noise std (``gym_models.TableModel``'s)."""
    S = len(P)
    if S == 0 or set(P) != set(range(S)):
        return None
    off = np.zeros(S * A + 1, np.int64)
    prob, nxt, rew, done, nout = [], [], [], [], np.zeros(S * A, np.int64)
    for s in range(S):
        for a in range(A):
            trs = P[s][a]
            seen = set()
            for tr in trs:
                p, s2, r, d = tr[0], tr[1], tr[2], tr[3]
                if not _exact_prob(p):
                    return None
                prob.append(float(p))
                nxt.append(int(s2))
                rew.append(float(r))
                done.append(1 if bool(d) else 0)
                seen.add(int(s2))
            nout[s * A + a] = len(seen)
            off[s * A + a + 1] = off[s * A + a] + len(trs)
    nz = None
    if noise is not None:
        nz = np.ascontiguousarray(np.asarray(noise, np.float64).reshape(S * A))
    return CompiledTable(
        S,
        A,
        off,
        np.asarray(prob, np.float64),
        np.asarray(nxt, np.int64),
        np.asarray(rew, np.float64),
        np.asarray(done, np.int64),
        nout,
        float(gamma),
        nz,
    )


_C = None  # the kernel's C entry points (a namespace of ctypes functions), or False


def _entries():
    global _C
    if _C is None:
        _C = False
        path = ext.library_path(FAMILY)
        if path is None:
            return _C
        try:
            lib = ctypes.CDLL(str(path))
        except OSError:
            return _C
        P, I, D = ctypes.c_void_p, ctypes.c_int64, ctypes.c_double
        tab = [I, I, P, P, P, P, P, P, D, P]
        lib.icml26_mcts_table_search.argtypes = tab + [I, P, P, I, P, I, I, P, P, P]
        lib.icml26_mcts_table_search.restype = ctypes.c_int
        lib.icml26_mcts_table_new.argtypes = tab + [I, P, I, I, I]
        lib.icml26_mcts_table_new.restype = P
        lib.icml26_mcts_table_run.argtypes = [P, I]
        lib.icml26_mcts_table_run.restype = I
        lib.icml26_mcts_table_reroot.argtypes = [P, I, I]
        lib.icml26_mcts_table_reroot.restype = ctypes.c_int
        lib.icml26_mcts_table_stats.argtypes = [P, P, P]
        lib.icml26_mcts_table_stats.restype = I
        lib.icml26_mcts_table_free.argtypes = [P]
        lib.icml26_mcts_table_free.restype = None
        _C = lib
    return _C


def available() -> bool:
    """Whether the kernel builds and loads (JIT-building it on the first call)."""
    return backend() != "ref" and bool(_entries())


def table_search(table: CompiledTable, s0: int, algo: str, budgets, seeds, prm: "_ref.Params"):
    """One fresh search per (seed, budget) from env state ``s0`` in the kernel.

    Returns (rec (S, B) int64, visits (S, B, A) int64, q (S, B, A) float64): what
    ``_ref.search(TableModel(P, A, s0, gamma, seed), algo, prm, seed, budget)`` gives.
    RuntimeError when the kernel is unavailable or runs out of memory; ValueError on a bad
    algo or a budget < 1."""
    if algo not in _ref.ALGOS:
        raise ValueError(f"unknown algo {algo!r}; valid: {', '.join(_ref.ALGOS)}")
    budgets = [int(b) for b in budgets]
    if not budgets or min(budgets) < 1:
        raise ValueError(f"budgets must be >= 1, got {budgets}")
    if not available():
        raise RuntimeError("the mcts_table C++ kernel is unavailable")
    S, B, A = len(seeds), len(budgets), table.A
    sd = np.ascontiguousarray(seeds, np.int64)
    bd = np.ascontiguousarray(budgets, np.int64)
    pv = np.ascontiguousarray(prm.vector(), np.float64)
    rec = np.empty((S, B), np.int64)
    vis = np.empty((S, B, A), np.int64)
    q = np.empty((S, B, A), np.float64)
    rc = _C.icml26_mcts_table_search(
        *table.args(),
        _ref.ALGOS.index(algo),
        pv.ctypes.data,
        sd.ctypes.data,
        S,
        bd.ctypes.data,
        B,
        int(s0),
        rec.ctypes.data,
        vis.ctypes.data,
        q.ctypes.data,
    )
    if rc == -2:
        raise RuntimeError("mcts_table_search: out of memory (lower the simulations or the horizon)")
    if rc != 0:
        raise ValueError("mcts_table_search: inconsistent table arrays or arguments")
    return rec, vis, q


class TableSearch:
    """One search kept alive in the kernel (an episode's planner): the interface of
    ``_ref.Search`` that the episodes use. ``keep_cuts``: remember the horizon's cut states
    so that ``reroot`` can expand them (as ``Search.keep_cuts``)."""

    def __init__(
        self, table: CompiledTable, s0: int, algo: str, prm: "_ref.Params", seed: int, *, keep_cuts: bool = False
    ):
        if not available():
            raise RuntimeError("the mcts_table C++ kernel is unavailable")
        self.table, self.A = table, table.A
        self._pv = np.ascontiguousarray(prm.vector(), np.float64)
        self._h = _C.icml26_mcts_table_new(
            *table.args(), _ref.ALGOS.index(algo), self._pv.ctypes.data, int(seed), int(s0), int(keep_cuts)
        )
        if not self._h:
            raise RuntimeError("mcts_table_new: bad arguments or out of memory")

    def run(self, budget: int) -> int:
        a = _C.icml26_mcts_table_run(self._h, int(budget))
        if a < 0:
            raise RuntimeError(
                "mcts_table_run: out of memory (lower the simulations or the horizon)"
                if a == -2
                else "budget must be >= 1"
            )
        return int(a)

    def reroot(self, a: int, outcome: int) -> bool:
        rc = _C.icml26_mcts_table_reroot(self._h, int(a), int(outcome))
        if rc < 0:
            raise RuntimeError("mcts_table_reroot: out of memory")
        return rc == 1

    def root_stats(self) -> dict:
        vis = np.empty(self.A, np.int64)
        q = np.empty(self.A, np.float64)
        self.n_nodes = int(_C.icml26_mcts_table_stats(self._h, vis.ctypes.data, q.ctypes.data))
        return {"visits": vis.tolist(), "q": q.tolist()}

    def __del__(self):
        h = getattr(self, "_h", None)
        if h and _C:
            _C.icml26_mcts_table_free(h)
            self._h = None
