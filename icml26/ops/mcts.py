"""Tree search on synthetic stochastic trees: the C++ kernel (``torch.ops.icml26.mcts_tree_search``)
or its pure-Python twin (:mod:`icml26.ops._ref.mcts`)."""

from __future__ import annotations

import ctypes
import threading

import numpy as np

from icml26.core import ext
from icml26.ops._ref import mcts as _ref

# The reference search and its counter-based RNG are public: Python-stepped environments
# (gymnasium) run the twin directly, with the kernel's random numbers.
from icml26.ops._ref.mcts import (  # noqa: F401
    ALGO_STREAM,
    ALGOS,
    OUTCOME_C,
    Params,
    Search,
    TreeModel,
    key,
    std_normal_zig,
    u01,
)
from icml26.ops._ref.mcts import search as reference_search  # noqa: F401

FAMILY = "mcts"
SOURCES = ["cpu/mcts_cpu.cpp"]


def backend() -> str:
    """Load (JIT-build if needed) the kernel; "ext-cpu" or "ref"."""
    be = ext.backend(FAMILY)  # already resolved: no lock, no import
    return be if be is not None else ext.load(FAMILY, SOURCES, extra_cflags=["-ffp-contract=off"])


def run_seeds(base_seed: int, n: int) -> list[int]:
    """Per-run seeds (63-bit) derived from the command's seed; shared by every algorithm
    and budget, so all see the same reward streams (common random numbers)."""
    return [_ref.key(base_seed, _ref.ALGO_STREAM + 9, i, 0) >> 1 for i in range(n)]


def _tree_tensors(tree) -> tuple:
    """The kernel's view of ``tree``: (node_off, mean, scale, out_off, prob, child) as contiguous
    tensors, then noise_kind, df, gamma and the number of root actions; built once per tree
    object and kept on it (callers searching one tree many times, one seed at a time, skip
    the conversions)."""
    ident = (tree.node_off, tree.mean, tree.scale, tree.out_off, tree.prob, tree.child, tree.noise, tree.df, tree.gamma)
    cached = getattr(tree, "_kernel_tensors", None)
    if cached is not None and len(cached[0]) == len(ident) and all(x is y for x, y in zip(cached[0], ident)):
        return cached[1]
    import torch

    t = lambda x, dt: torch.as_tensor(np.ascontiguousarray(x), dtype=dt)  # noqa: E731
    arrs = (
        t(tree.node_off, torch.int64),
        t(tree.mean, torch.float64),
        t(tree.scale, torch.float64),
        t(tree.out_off, torch.int64),
        t(tree.prob, torch.float64),
        t(tree.child, torch.int64),
        int(tree.noise_kind),
        float(tree.df),
        float(tree.gamma),
        tree.n_actions_root,
    )
    # the C entry point's arguments: the six arrays' addresses, n_nodes, n_sa, n_out, noise_kind, df, gamma
    arrs = arrs + ((*(x.data_ptr() for x in arrs[:6]), len(arrs[0]) - 1, len(arrs[1]), len(arrs[4]), *arrs[6:9]),)
    try:
        object.__setattr__(tree, "_kernel_tensors", (ident, arrs))
    except (AttributeError, TypeError):  # a tree type without attribute storage: no cache
        pass
    return arrs


_OP = None  # torch.ops.icml26.mcts_tree_search.default, looked up on the first kernel call
_C = None  # the kernel's C entry point through ctypes (False: unavailable), looked up likewise
_IO = (
    threading.local()
)  # per-thread I/O buffer of the C entry point: [int64 array, its float64 view, address, prm tuple in it]


def _c_entry():
    """``icml26_mcts_tree_search`` from the kernel's shared library, or False.

    A batch-1 search (one seed, one budget per call, as a planner inside a loop calls it)
    spends ~11 us per call in the dispatcher's argument boxing when called as a torch op, 4%
    of a 2000-simulation search; the C entry point takes raw addresses instead (mcts_cpu.cpp)."""
    global _C
    if _C is None:
        _C = False
        path = ext.library_path(FAMILY)
        if path is not None:
            try:
                f = ctypes.CDLL(str(path)).icml26_mcts_tree_search
            except (OSError, AttributeError):
                return _C
            P, I, D = ctypes.c_void_p, ctypes.c_int64, ctypes.c_double
            f.argtypes = [P] * 6 + [I, I, I, I, D, D, I, P, P, I, P, I, P, P, P]
            f.restype = ctypes.c_int
            _C = f
    return _C


def _c_search(f, view, aid: int, prm, seeds: list[int], budgets: list[int], A: int):
    """One call of the C entry point; (rec, vis, q) as fresh arrays. The inputs and outputs go
    through one per-thread int64 buffer, laid out [prm (16, as float64) | seeds | budgets | rec |
    vis | q (as float64)], whose address is taken when it is (re)allocated, not per call."""
    S, B = len(seeds), len(budgets)
    SB = S * B
    P = len(_ref.Params.FIELDS)  # 16
    o = P + S + B
    n = o + SB * (1 + 2 * A)
    io = getattr(_IO, "io", None)
    if io is None or len(io[0]) < n:
        arr = np.empty(max(n, 256), np.int64)
        io = _IO.io = [arr, arr.view(np.float64), arr.ctypes.data, None]
    arr, farr, addr, last = io
    v = prm.vector()
    if v is not last:  # (the same tuple while prm is unchanged: a planner's calls)
        farr[:P] = v
        io[3] = v
    if S == 1 and B == 1:
        arr[P], arr[P + 1] = seeds[0], budgets[0]
    else:
        arr[P:o] = seeds + budgets
    if (
        f(
            *view,
            aid,
            addr,
            addr + 8 * P,
            S,
            addr + 8 * (P + S),
            B,
            addr + 8 * o,
            addr + 8 * (o + SB),
            addr + 8 * (o + SB * (1 + A)),
        )
        != 0
    ):
        raise ValueError("mcts_tree_search: inconsistent tree arrays or arguments")
    out = arr[o:n].copy()
    return (
        out[:SB].reshape(S, B),
        out[SB : SB * (1 + A)].reshape(S, B, A),
        out[SB * (1 + A) :].view(np.float64).reshape(S, B, A),
    )


def tree_search(tree, algo: str, budgets, seeds, prm: "_ref.Params", *, use: str = "auto"):
    """Run one search per (seed, budget) on ``tree``.

    algo: one of ``_ref.ALGOS``. budgets: (B,) simulations; seeds: (S,) run seeds.
    use: "auto" (kernel if it builds), "ext" (kernel or RuntimeError) or "ref".
    Returns (rec (S, B) int64 recommended root action, visits (S, B, A) int64,
    q (S, B, A) float64 root statistics) and the backend used.
    Raises ValueError on an unknown algo or a budget < 1."""
    if algo not in _ref.ALGOS:
        raise ValueError(f"unknown algo {algo!r}; valid: {', '.join(_ref.ALGOS)}")
    budgets = [int(b) for b in budgets]
    seeds = [int(s) for s in seeds]
    if not budgets or min(budgets) < 1:
        raise ValueError(f"budgets must be >= 1, got {budgets}")
    aid = _ref.ALGOS.index(algo)
    be = "ref" if use == "ref" else backend()
    if use == "ext" and be == "ref":
        raise RuntimeError("the mcts C++ kernel is unavailable")
    if be != "ref":
        tt = _tree_tensors(tree)
        f = _C if _C is not None else _c_entry()
        if f:
            return (*_c_search(f, tt[10], aid, prm, seeds, budgets, tt[9]), be)
        global _OP
        if _OP is None:
            import torch

            _OP = torch.ops.icml26.mcts_tree_search.default
        # prm, seeds and budgets go as plain lists (the op's float[] / int[] arguments)
        rec, vis, q = _OP(*tt[:9], aid, prm.vector(), seeds, budgets)
        return rec.numpy(), vis.numpy(), q.numpy(), be
    A = tree.n_actions_root
    rec = np.zeros((len(seeds), len(budgets)), np.int64)
    vis = np.zeros((len(seeds), len(budgets), A), np.int64)
    q = np.zeros((len(seeds), len(budgets), A))
    for i, s in enumerate(seeds):
        model = _ref.TreeModel(tree, s)
        for j, b in enumerate(budgets):
            a, st = _ref.search(model, aid, prm, s, b)
            rec[i, j] = a
            vis[i, j] = st["visits"]
            q[i, j] = st["q"]
    return rec, vis, q, "ref"
