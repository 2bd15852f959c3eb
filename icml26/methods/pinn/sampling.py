"""Mini-batch selection rules for subsampled natural gradient (arXiv 2508.21022).

From a pool of N residual rows with Jacobian J (N, P), pick k rows:

- ``uniform``: k rows uniformly without replacement (the PINN runs stratify: interior and
  boundary rows in proportion to the pool, see ``train.py``).
- ``leverage``: k rows without replacement with probabilities proportional to the ridge
  leverage scores l_i = [J (J^T J + lam I)^-1 J^T]_ii = sum_j U_ij^2 s_j^2 / (s_j^2 + lam)
  (J = U diag(s) V^T).
- ``volume`` (squared volume sampling, the proxy of Goldshlager, Hu & Lin, arXiv 2508.21022):
  P(S) proportional to det(J_S J_S^T + lam I_k) over |S| = k, i.e. the k-DPP with
  L = J J^T + lam I_N. Under it E_S[J_S^T (J_S J_S^T + lam I)^-1 r_S] = M J^T r with M
  symmetric PSD (RECON; checked by enumeration in the tests). The form with +lam I is RECON;
  lam = 0 gives det(J_S J_S^T). Exact sampler: the spectral algorithm (Hough et al. 2006;
  Kulesza & Taskar 2012, Alg. 8), as DPPy's ``proj_dpp_sampler_eig_GS``, O(min(N,P)^3 + N k^2).
- ``volume-approx``: the same sampler on L' = (J G)(J G)^T + lam I, G a Gaussian sketch
  (P, m) / sqrt(m) with m = sketch_factor * k columns: O(N P m + m^3 + N k^2), approximate
  (J G G^T J^T ~ J J^T).

The lam-eigenspace beyond the rank of the factor is handled exactly: the k-DPP does not depend
on the choice of orthonormal basis within an eigenspace, so the selected count of those
eigenvectors is drawn as a Haar-random orthonormal set of the complement."""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

SAMPLINGS = ("uniform", "leverage", "volume", "volume-approx")


def _factor_eig(B: Tensor) -> tuple[Tensor, Tensor]:
    """Nonzero spectrum of B B^T for B (N, m): (eigenvalues (r,), orthonormal U (N, r))."""
    N, m = B.shape
    if m < N:
        w, W = torch.linalg.eigh(B.T @ B)  # (m,), (m, m)
        keep = w > w.max().clamp_min(0) * 1e-13 * max(N, m)
        w, W = w[keep], W[:, keep]
        U = (B @ W) / torch.sqrt(w)
        U, _ = torch.linalg.qr(U)  # re-orthonormalise (the division loses a few digits)
    else:
        w, U = torch.linalg.eigh(B @ B.T)
        keep = w > w.max().clamp_min(0) * 1e-13 * max(N, m)
        w, U = w[keep], U[:, keep]
    return w, U


def _esp_log_table(lams: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Scaled elementary symmetric polynomials: E[l, n] * exp(s[n]) = e_l(lams[:n]).

    Returns (E (k+1, N+1), s (N+1,)); each column is rescaled to max 1 (no overflow)."""
    N = len(lams)
    E = np.zeros((k + 1, N + 1))
    s = np.zeros(N + 1)
    E[0, 0] = 1.0
    for n in range(1, N + 1):
        col = E[:, n - 1].copy()
        col[1:] += lams[n - 1] * E[:-1, n - 1]
        c = col.max()
        E[:, n] = col / c
        s[n] = s[n - 1] + math.log(c)
    return E, s


def _select_eigen(lams: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """Phase 1 of the k-DPP spectral sampler: indices of k eigenvectors (Kulesza & Taskar Alg. 8)."""
    E, s = _esp_log_table(lams, k)
    chosen = []
    l = k
    for n in range(len(lams), 0, -1):
        if l == 0:
            break
        if n == l:  # every remaining one must be taken
            chosen.extend(range(n - 1, -1, -1))
            break
        # P(take n | l left) = lam_n e_{l-1}(lams[:n-1]) / e_l(lams[:n])
        p = lams[n - 1] * E[l - 1, n - 1] / E[l, n] * math.exp(s[n - 1] - s[n])
        if rng.random() < p:
            chosen.append(n - 1)
            l -= 1
    return np.array(sorted(chosen), dtype=np.int64)


def sample_projection_dpp(V: Tensor, rng: np.random.Generator) -> list[int]:
    """Exact sample of the projection DPP with kernel K = V V^T (V (N, k) orthonormal columns).

    Chain rule: pick i with probability d_i / (k - t), d = the conditional diagonal, and update
    d by the new Cholesky column c = (K[:, i] - C C[i]^T) / sqrt(d_i). O(N k^2)."""
    N, k = V.shape
    d = (V * V).sum(1).clone()  # K_ii
    C = torch.zeros(N, k, dtype=V.dtype)
    out: list[int] = []
    for t in range(k):
        p = d.clamp_min(0).numpy()
        p = p / p.sum()
        i = int(rng.choice(N, p=p))
        out.append(i)
        c = (V @ V[i] - C[:, :t] @ C[i, :t]) / math.sqrt(max(float(d[i]), 1e-300))
        C[:, t] = c
        d = d - c * c
        d[out] = 0.0
    return out


def sample_kdpp(B: Tensor, k: int, lam: float, rng: np.random.Generator) -> list[int]:
    """Exact k-DPP sample with L = B B^T + lam I_N (B (N, m), lam >= 0): P(S) ∝ det(L_S).

    Raises ValueError when k > N, or when lam = 0 and k exceeds the rank of B."""
    N = B.shape[0]
    if not 1 <= k <= N:
        raise ValueError(f"k must be in [1, N={N}], got {k}")
    if lam < 0 or not math.isfinite(lam):
        raise ValueError(f"lam must be finite and >= 0, got {lam}")
    w, U = _factor_eig(B.to(torch.float64))
    return sample_kdpp_eig(w, U, k, lam, rng)


def sample_kdpp_eig(w: Tensor, U: Tensor, k: int, lam: float, rng: np.random.Generator) -> list[int]:
    """``sample_kdpp`` from the nonzero spectrum of B B^T: w (r,), U (N, r) orthonormal
    (reuse one eigendecomposition for many draws)."""
    N, r = U.shape
    if not 1 <= k <= N:
        raise ValueError(f"k must be in [1, N={N}], got {k}")
    if lam == 0 and k > r:
        raise ValueError(f"k = {k} exceeds the rank {r} of J with lam = 0: det(J_S J_S^T) = 0 for every S")
    scale = float(w.max()) if r else 1.0  # the k-DPP is invariant to scaling L
    lams = np.concatenate([(w.numpy() + lam) / scale, np.full(N - r, lam / scale)])
    idx = _select_eigen(lams, k, rng)
    top = [int(i) for i in idx if i < r]
    n_rest = k - len(top)
    cols = [U[:, top]]
    if n_rest:
        G = torch.from_numpy(rng.standard_normal((N, n_rest)))
        G = G - U @ (U.T @ G)
        G = G - U @ (U.T @ G)
        Q, _ = torch.linalg.qr(G)
        cols.append(Q)
    V = torch.cat(cols, dim=1)
    return sorted(sample_projection_dpp(V, rng))


def ridge_leverage(B: Tensor, lam: float) -> Tensor:
    """l_i = [B B^T (B B^T + lam I)^-1]_ii for B (N, m): (N,), each in [0, 1]."""
    w, U = _factor_eig(B.to(torch.float64))
    return (U * U) @ (w / (w + lam))


def select(
    J: Tensor | None, k: int, rule: str, *, lam: float, rng: np.random.Generator, sketch_factor: int = 2
) -> list[int]:
    """Indices of k rows of the pool under ``rule`` (one of SAMPLINGS).

    J: (N, P) pool Jacobian (unused by ``uniform``, which needs only N = J.shape[0])."""
    N = J.shape[0]
    if rule == "uniform":
        return sorted(rng.choice(N, size=k, replace=False).tolist())
    if rule == "leverage":
        lev = ridge_leverage(J, lam).clamp_min(1e-300).numpy()
        return sorted(rng.choice(N, size=k, replace=False, p=lev / lev.sum()).tolist())
    if rule == "volume":
        return sample_kdpp(J, k, lam, rng)
    if rule == "volume-approx":
        m = min(J.shape[1], max(k + 1, sketch_factor * k))
        G = torch.from_numpy(rng.standard_normal((J.shape[1], m))) / math.sqrt(m)
        return sample_kdpp(J.to(torch.float64) @ G, k, lam, rng)
    raise ValueError(f"sampling {rule!r} is not one of {', '.join(SAMPLINGS)}")
