"""Pure-torch twins of the KV-eviction kernels (the implementation on CPU, and the test oracle).

``weighted_leverage(u, w, ridge, relative)``: the one-shot CapKV score
``s_i = w_i u_i^T A^{-1} u_i`` with ``A = rho I + sum_j w_j u_j u_j^T`` (a weighted ridge
leverage score; see ``icml26/methods/kvcache/scoring.py`` for the derivation).
"""

from __future__ import annotations

import torch


def weighted_leverage(u: torch.Tensor, w: torch.Tensor, ridge: float, relative: bool = True) -> torch.Tensor:
    """u: (..., T, D) capacity vectors; w: (..., T) non-negative weights -> (..., T) scores.

    relative=True: rho = ridge * trace(M) / D with M = sum_j w_j u_j u_j^T, so the scores are
    invariant to a rescaling of w. relative=False: rho = ridge (absolute, as kvpress' CapPress
    with ridge=1). Computed in float32 (float64 if the input is float64) with a Cholesky inverse of the (D x D) matrix.
    """
    dt = torch.float64 if u.dtype == torch.float64 else torch.float32
    u = u.to(dt)
    w = w.to(dt)
    d = u.shape[-1]
    m = (u * w.unsqueeze(-1)).transpose(-1, -2) @ u  # (..., D, D) = sum_t w_t u_t u_t^T
    eye = torch.eye(d, dtype=dt, device=u.device)
    if relative:
        tr = torch.diagonal(m, dim1=-2, dim2=-1).sum(-1).clamp_min(torch.finfo(dt).tiny)  # (...)
        rho = (ridge * tr / d)[..., None, None]
    else:
        rho = torch.as_tensor(ridge, dtype=dt, device=u.device)
    a = m + rho * eye  # (..., D, D), symmetric positive definite for rho > 0
    chol, info = torch.linalg.cholesky_ex(a)
    if bool((info != 0).any()):  # numerically singular: fall back to a general inverse
        ainv = torch.linalg.inv(a)
    else:
        ainv = torch.cholesky_inverse(chol)  # (..., D, D); D is small (head_dim)
    lev = ((u @ ainv) * u).sum(-1)  # (..., T) = u_i^T A^{-1} u_i
    return w * lev
