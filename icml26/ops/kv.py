"""KV-eviction kernels: validation, then the torch implementation.

The one-shot leverage score is a batched (D x D) Cholesky solve per head, already BLAS-bound
in torch, so there is no C++ extension for it: ``backend()`` reports ``ref`` (the pure-torch
twin in ``icml26/ops/_ref/kv.py``), which is also what the tests use as the oracle.
"""

from __future__ import annotations

import math

import torch

from icml26.ops._ref import kv as _ref


def backend() -> str:
    return "ref"


def why() -> str:
    """What ``icml26 env`` shows beside ``ref``: this family has no C++ kernel, by design."""
    return "pure torch by design: the leverage score is a batched Cholesky solve, BLAS-bound"


def weighted_leverage(
    u: torch.Tensor, w: torch.Tensor, ridge: float = 1.0, *, relative: bool = True, check: bool = True
) -> torch.Tensor:
    """Weighted ridge leverage ``s_i = w_i u_i^T (rho I + sum_j w_j u_j u_j^T)^{-1} u_i``.

    u: (..., T, D) float; w: (..., T) float >= 0 (with ``check=False`` leading dims broadcast);
    ridge > 0. Returns (..., T) float32/64. Raises ValueError / TypeError on bad shapes, dtypes,
    non-finite input or ridge <= 0; ``check=False`` skips the checks (a caller's hot path whose
    inputs come from a model's own cache)."""
    if not check:
        return _ref.weighted_leverage(u, w, float(ridge), relative)
    if not isinstance(u, torch.Tensor) or not isinstance(w, torch.Tensor):
        raise TypeError("weighted_leverage: u and w must be torch tensors")
    if not u.is_floating_point() or not w.is_floating_point():
        raise TypeError(f"weighted_leverage: expected float tensors, got {u.dtype} and {w.dtype}")
    if u.ndim < 2 or tuple(w.shape) != tuple(u.shape[:-1]):
        raise ValueError(
            f"weighted_leverage: u must be (..., T, D) and w (..., T); got {tuple(u.shape)} and {tuple(w.shape)}"
        )
    if not (isinstance(ridge, (int, float)) and math.isfinite(ridge) and ridge > 0):
        raise ValueError(f"weighted_leverage: ridge must be a finite number > 0, got {ridge!r}")
    if not bool(torch.isfinite(u).all()) or not bool(torch.isfinite(w).all()):
        raise ValueError("weighted_leverage: non-finite values in u or w")
    if bool((w < 0).any()):
        raise ValueError("weighted_leverage: weights must be non-negative")
    return _ref.weighted_leverage(u, w, float(ridge), relative)
