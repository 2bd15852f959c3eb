"""Lyapunov exponents of long matrix products: QR (Benettin) estimates and closed forms.

Haas, Gatine, Cosse & Bouraoui, "Why Deep Jacobian Spectra Separate: Depth-Induced Scaling
and Singular-Vector Alignment", ICML 2026, arXiv 2602.12384 (Thm 5.3, the masked model).
Protocol and formulas: docs/theory.md.

A product J_L = M_L ... M_1 of n x n factors (dense tensors or :class:`LinearOp`) is never
formed: a k-column frame is pushed through it and re-orthonormalised by QR after every factor,
so the cost is O(L n^2 k) and nothing overflows at depth 100+ (float64 throughout).

- :func:`lyap_qr`  Benettin et al. (1980): (1/L) sum_l log |R_l[j, j]|, an estimate of the
  exponents lambda_j = lim (1/L) log s_j(J_L).
- :func:`top_singular`  the finite-depth top-k singular triplets of J_L: orthogonal
  (subspace) iteration on J^T J with an oversampled frame, then Rayleigh-Ritz.
- :func:`lyap_closed`  RECON (derived in the notes, not the paper's printed expression): the
  exponents of the masked model, W iid N(0, sigma2/n), gates iid Bernoulli(p) conditioned on
  rank >= r:  lambda_k = 1/2 [log(2 sigma2/n) + E_m psi((m-k+1)/2)],  m ~ Bin(n, p) | m >= r;
  p = 1 is Newman's (1986) formula for products of Ginibre matrices.
- :func:`haar_offset`  RECON: the finite-depth correction E log(s_1...s_k)(J_L)
  ~ L sum_j lambda_j - E log|det H_k|, H_k the k x k block of a Haar orthogonal matrix.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence, Union

import numpy as np
import torch


@dataclass(frozen=True)
class LinearOp:
    """A matrix given by its action: ``mv(X)`` = M @ X for X (n_in, k), ``rmv(Y)`` = M^T @ Y
    for Y (n_out, k). Used for convolutions, whose dense matrix is never built."""

    mv: Callable[[torch.Tensor], torch.Tensor]
    rmv: Callable[[torch.Tensor], torch.Tensor]
    n_in: int
    n_out: int


Factor = Union[torch.Tensor, LinearOp]


def _mv(f: Factor, x: torch.Tensor) -> torch.Tensor:
    return f @ x if isinstance(f, torch.Tensor) else f.mv(x)


def _rmv(f: Factor, y: torch.Tensor) -> torch.Tensor:
    return f.T @ y if isinstance(f, torch.Tensor) else f.rmv(y)


def _n_in(f: Factor) -> int:
    return int(f.shape[1]) if isinstance(f, torch.Tensor) else f.n_in


def _n_out(f: Factor) -> int:
    return int(f.shape[0]) if isinstance(f, torch.Tensor) else f.n_out


def _check_chain(factors: Sequence[Factor]) -> int:
    if len(factors) == 0:
        raise ValueError("factors: the product needs at least one factor")
    for i in range(1, len(factors)):
        if _n_in(factors[i]) != _n_out(factors[i - 1]):
            raise ValueError(
                f"factors: factor {i} takes {_n_in(factors[i])} inputs but factor {i - 1} gives "
                f"{_n_out(factors[i - 1])}"
            )
    return _n_in(factors[0])


def random_frame(n: int, k: int, gen: torch.Generator | None = None, dtype=torch.float64) -> torch.Tensor:
    """A Haar-random orthonormal k-frame in R^n, (n, k)."""
    q, r = torch.linalg.qr(torch.randn(n, k, generator=gen, dtype=dtype))
    return q * torch.sign(torch.diagonal(r)).where(torch.diagonal(r) != 0, torch.ones(k, dtype=dtype))


def _log_abs_diag(r: torch.Tensor) -> torch.Tensor:
    d = torch.diagonal(r).abs()
    return torch.log(d)  # an exact zero (a dead direction) gives -inf, reported as null


def lyap_qr(
    factors: Sequence[Factor], k: int, *, q0: torch.Tensor | None = None, gen: torch.Generator | None = None
) -> torch.Tensor:
    """Benettin QR estimate of the top-k Lyapunov exponents of M_L ... M_1.

    factors: L tensors (n_l, n_{l-1}) or LinearOps, applied first to last; k <= every width.
    q0: the start frame (n_0, k), default Haar-random. Returns (k,) float64, nats per factor:
    (1/L) sum_l log |R_l[j, j]| with M_l Q_{l-1} = Q_l R_l. Cost O(L n^2 k).
    Raises ValueError for an empty or inconsistent chain or a k above a width."""
    n0 = _check_chain(factors)
    k = int(k)
    if k < 1 or k > min([n0] + [_n_out(f) for f in factors]):
        raise ValueError(f"k must be in [1, min width], got {k}")
    q = random_frame(n0, k, gen) if q0 is None else q0.to(torch.float64)
    acc = torch.zeros(k, dtype=torch.float64)
    for f in factors:
        q, r = torch.linalg.qr(_mv(f, q))
        acc += _log_abs_diag(r)
    return acc / len(factors)


@dataclass(frozen=True)
class TopSingular:
    """Top-k singular triplets of a product: log_s (k,) natural logs, u (n_L, k), v (n_0, k)."""

    log_s: torch.Tensor
    u: torch.Tensor
    v: torch.Tensor


def top_singular(
    factors: Sequence[Factor], k: int, *, sweeps: int = 2, oversample: int = 16, gen: torch.Generator | None = None
) -> TopSingular:
    """Top-k singular values/vectors of J = M_L ... M_1 without forming J.

    1. frame Q (n_0, k + oversample), Haar-random;
    2. ``sweeps`` rounds of orthogonal iteration on J^T J (forward with M_l, back with M_l^T,
       QR after every factor);
    3. a last forward pass accumulates J Q = Q_L R with R = R_L ... R_1 (rescaled, the scale
       kept in logs), and the SVD of the small R gives the Ritz values (Rayleigh-Ritz).
    A Ritz value more than 1e12 below the largest (beyond float64's reach in the small SVD) is
    replaced by the converged frame's log |R[j, j]|. Exact for the top k once the frame spans
    them; the error falls like (s_{k+p+1}/s_j)^(2 sweeps). Returns :class:`TopSingular`."""
    n0 = _check_chain(factors)
    widths = [n0] + [_n_out(f) for f in factors]
    if k < 1 or k > min(widths):
        raise ValueError(f"k must be in [1, min width], got {k}")
    if sweeps < 0 or oversample < 0:
        raise ValueError(f"sweeps and oversample must be >= 0, got {sweeps}, {oversample}")
    kk = min(k + oversample, min(widths))
    q = random_frame(n0, kk, gen)
    for _ in range(sweeps):
        for f in factors:  # 2. forward
            q, _ = torch.linalg.qr(_mv(f, q))
        for f in reversed(factors):  # back through J^T
            q, _ = torch.linalg.qr(_rmv(f, q))
    q_start = q
    racc = torch.eye(kk, dtype=torch.float64)
    log_scale = 0.0
    diag = torch.zeros(kk, dtype=torch.float64)
    for f in factors:  # 3.
        q, r = torch.linalg.qr(_mv(f, q))
        diag += _log_abs_diag(r)
        racc = r @ racc
        m = float(racc.abs().max())
        if m > 0 and math.isfinite(m):
            racc = racc / m
            log_scale += math.log(m)
    ur, s, vrt = torch.linalg.svd(racc)
    with np.errstate(divide="ignore"):
        log_s = torch.log(s) + log_scale
    low = s < s[0] * 1e-12
    if bool(low.any()):
        log_s = torch.where(low, diag, log_s)
    u = q @ ur[:, :k]
    v = q_start @ vrt[:k].T
    return TopSingular(log_s[:k].clone(), u, v)


def exact_log_singular(factors: Sequence[Factor], k: int) -> torch.Tensor:
    """log s_1..s_k of the product formed densely in float64 (the oracle; O(L n^3)).
    Dense tensors only."""
    _check_chain(factors)
    j = factors[0].to(torch.float64)
    for f in factors[1:]:
        j = f.to(torch.float64) @ j
    return torch.log(torch.linalg.svdvals(j)[:k])


# ----------------------------------------------------------------------------- closed forms
def _binomial_conditioned(n: int, p: float, r: int) -> tuple[np.ndarray, np.ndarray]:
    """Support m = r..n and the probabilities of Binomial(n, p) conditioned on m >= r."""
    from scipy.stats import binom

    m = np.arange(r, n + 1)
    w = binom.pmf(m, n, p) if p < 1.0 else (m == n).astype(float)
    tot = w.sum()
    if not tot > 0:
        raise ValueError(f"P(m >= {r}) is 0 for n={n}, p={p}")
    return m, w / tot


def lyap_closed(n: int, p: float, sigma2: float, k: int, r: int | None = None) -> np.ndarray:
    """RECON closed-form exponents lambda_1..lambda_k of the masked model (nats per layer).

    n: width; p: gate probability in (0, 1]; sigma2: weight variance times n (He: 2);
    r: rank conditioning (default k), k <= r <= n.
    lambda_j = 1/2 [log(2 sigma2 / n) + E_m psi((m - j + 1)/2)], m ~ Bin(n, p) | m >= r.
    Raises ValueError for parameters out of range."""
    from scipy.special import digamma

    r = k if r is None else int(r)
    if not (1 <= k <= r <= n):
        raise ValueError(f"need 1 <= k <= r <= n, got k={k}, r={r}, n={n}")
    if not (0.0 < p <= 1.0) or not sigma2 > 0:
        raise ValueError(f"need p in (0, 1] and sigma2 > 0, got p={p}, sigma2={sigma2}")
    m, w = _binomial_conditioned(n, p, r)
    j = np.arange(1, k + 1)
    e_psi = (w[None, :] * digamma((m[None, :] - j[:, None] + 1) / 2.0)).sum(1)
    return 0.5 * (math.log(2.0 * sigma2 / n) + e_psi)


def newman(n: int, sigma2: float, k: int) -> np.ndarray:
    """Newman (1986) / Isopi & Newman (1992) exponents of products of n x n Gaussian matrices
    with entry variance sigma2/n: lambda_j = 1/2 [log(2 sigma2/n) + psi((n - j + 1)/2)]."""
    from scipy.special import digamma

    j = np.arange(1, k + 1)
    return 0.5 * (math.log(2.0 * sigma2 / n) + digamma((n - j + 1) / 2.0))


def haar_offset(n: int, k: int) -> np.ndarray:
    """RECON -E log|det H_j| for j = 1..k, H_j the j x j block of a Haar orthogonal n x n matrix:
    1/2 sum_{i<=j} [psi((n-i+1)/2) - psi((j-i+1)/2)]  (|det H_j|^2 ~ prod Beta((j-i+1)/2, (n-j)/2))."""
    from scipy.special import digamma

    out = np.zeros(k)
    for jj in range(1, k + 1):
        i = np.arange(1, jj + 1)
        out[jj - 1] = 0.5 * np.sum(digamma((n - i + 1) / 2.0) - digamma((jj - i + 1) / 2.0))
    return out


def finite_depth_log_sv(n: int, p: float, sigma2: float, k: int, depth: int, r: int | None = None) -> np.ndarray:
    """RECON prediction of (1/L) E log s_j(J_L), j = 1..k, for the masked model with every factor
    masked: lambda_j + c_j / L, c_j = haar_offset_j - haar_offset_{j-1}."""
    lam = lyap_closed(n, p, sigma2, k, r)
    h = haar_offset(n, k)
    c = np.diff(np.concatenate([[0.0], h]))
    return lam + c / depth
