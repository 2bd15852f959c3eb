"""Invariant Contamination Ratio (ICR) of a feature map (Li et al., ICML 2026, arXiv 2606.09718,
Sec. 3).

Each image x0 is seen through V >= 2 perturbations (augmentation, then noise); its features
h (d-dim) split into an invariant part s(x0) = E_a[h | x0] and a residual xi = h - s, so that
Sigma_h = Sigma_s + Sigma_xi.  The ICR is

    ICR = 1 / (1 + mean_k lambda_k) = d / (d + Tr((Sigma_xi + tau I)^-1 Sigma_s)),

lambda_k the eigenvalues of the generalized problem Sigma_s v = lambda (Sigma_xi + tau I) v (Fisher
LDA with each image as its own class; all d eigenvalues, paper footnote 6). Lower is better:
0 when the features carry no residual, 1 when they carry no image identity.

Estimator (paper App. B.6, two views): t = (h1 + h2)/2, d = h1 - h2, Sigma_xi = Cov(d)/2,
Sigma_s = Cov(t) - Cov(d)/4. RECON for V views: Sigma_xi = the pooled within-image covariance
(each view first centred over images; divisor (N - 1)(V - 1)), Sigma_s = Cov(view mean) -
Sigma_xi / V; equal to the paper's formulas at V = 2. An indefinite Sigma_s estimate is not
clipped (RECON).

Shrinkage (paper: "a small tau", value not given): RECON rule tau = shrinkage_rel * Tr(Sigma_xi)/d,
returned as ``ICRResult.shrinkage``; its fallback and the computation (float64, one Cholesky
factorisation, no eigendecomposition): docs/icr.md, "Specification"."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SHRINKAGE_REL = 1e-6  # default relative shrinkage (RECON, see module docstring)


@dataclass(frozen=True)
class ICRResult:
    """icr in (0, 1] (lower = better); shrinkage = the absolute tau added to Sigma_xi;
    trace_ratio = Tr((Sigma_xi + tau I)^-1 Sigma_s) = d * mean lambda; traces of the two covariances."""

    icr: float
    shrinkage: float
    shrinkage_rel: float
    trace_ratio: float
    trace_sigma_s: float
    trace_sigma_xi: float
    feature_dim: int
    n_images: int
    n_views: int

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def _as_array(features) -> np.ndarray:
    """numpy array or torch tensor (any device, any float dtype) -> float64 numpy."""
    if hasattr(features, "detach") and hasattr(features, "cpu"):
        features = features.detach().cpu().double().numpy()
    x = np.asarray(features, dtype=np.float64)
    return x


def covariances(features) -> tuple[np.ndarray, np.ndarray]:
    """The two-view / V-view estimates (Sigma_s, Sigma_xi), each (d, d) float64.

    features: (N, V, d) features of N images under V >= 2 perturbations each (numpy or torch).
    Raises ValueError for a wrong shape, N < 2, V < 2 or non-finite values."""
    x = _as_array(features)
    if x.ndim != 3:
        raise ValueError(f"features must be (N, V, d) (images, views, feature dim), got shape {x.shape}")
    n, v, _ = x.shape
    if n < 2:
        raise ValueError(f"need at least 2 images, got {n}")
    if v < 2:
        raise ValueError(f"need at least 2 views per image, got {v}")
    if not np.isfinite(x).all():
        raise ValueError("features contain NaN or infinity")
    # 1. centre each view over images (removes a view-specific offset, as Cov(h1 - h2) does)
    xc = x - x.mean(axis=0, keepdims=True)  # (N, V, d)
    m = xc.mean(axis=1)  # (N, d) per-image mean over views
    r = (xc - m[:, None, :]).reshape(n * v, -1)  # (N V, d) within-image deviations
    # 2. residual covariance: pooled within-image covariance (= Cov(h1 - h2) / 2 at V = 2)
    sigma_xi = r.T @ r / ((n - 1) * (v - 1))
    # 3. signal covariance: Cov(view mean) - Sigma_xi / V (= Cov(t) - Cov(d) / 4 at V = 2)
    sigma_s = m.T @ m / (n - 1) - sigma_xi / v
    return sigma_s, sigma_xi


def shrinkage_for(sigma_s: np.ndarray, sigma_xi: np.ndarray, shrinkage_rel: float = SHRINKAGE_REL) -> float:
    """tau = shrinkage_rel * Tr(Sigma_xi) / d, or shrinkage_rel * Tr(Sigma_s + Sigma_xi) / d when the
    residual trace is <= 1e-12 of the total (the documented RECON rule)."""
    d = sigma_xi.shape[0]
    t_xi = float(np.trace(sigma_xi))
    t_h = float(np.trace(sigma_s)) + t_xi
    base = t_xi if t_xi > 1e-12 * max(abs(t_h), 0.0) else t_h
    return float(shrinkage_rel) * max(base, 0.0) / d


def icr_from_covariances(
    sigma_s: np.ndarray, sigma_xi: np.ndarray, *, tau: float | None = None, shrinkage_rel: float = SHRINKAGE_REL
) -> tuple[float, float, float]:
    """(icr, tau, trace_ratio) from the covariances. tau None = the documented rule.

    Raises ValueError when Sigma_xi + tau I is not positive definite (e.g. tau = 0 with a singular
    residual covariance): a Cholesky pivot <= 1e-13 of the features' scale (largest diagonal entry of
    Sigma_xi + tau I, or Tr(Sigma_s)/d if larger) counts as singular."""
    from scipy.linalg import LinAlgError, cho_factor, cho_solve

    s = np.asarray(sigma_s, dtype=np.float64)
    xi = np.asarray(sigma_xi, dtype=np.float64)
    d = s.shape[0]
    if s.shape != (d, d) or xi.shape != (d, d):
        raise ValueError(f"covariances must be square and equal in shape, got {s.shape} and {xi.shape}")
    if tau is None:
        tau = shrinkage_for(s, xi, shrinkage_rel)
    if not (np.isfinite(tau) and tau >= 0):
        raise ValueError(f"shrinkage tau must be finite and >= 0, got {tau}")
    a = 0.5 * (xi + xi.T) + tau * np.eye(d)
    try:
        c = cho_factor(a, lower=True, check_finite=False)
        piv = np.diag(c[0]) ** 2  # Cholesky pivots; numerically singular when tiny vs the largest diagonal
        scale = max(float(np.max(np.diag(a))), abs(float(np.trace(s))) / d, 0.0)  # the features' own scale
        if not piv.min() > 1e-13 * scale:
            raise LinAlgError("numerically singular")
    except LinAlgError:
        raise ValueError(
            f"residual covariance + tau I is not positive definite (tau = {tau:.3g}); "
            "use tau > 0 (the default rule) or more views / images"
        ) from None
    tr = float(np.trace(cho_solve(c, 0.5 * (s + s.T), check_finite=False)))  # Tr(A^-1 Sigma_s)
    return d / (d + tr), float(tau), tr


def icr(features, *, tau: float | None = None, shrinkage_rel: float = SHRINKAGE_REL) -> ICRResult:
    """ICR of features (N, V, d): N images x V >= 2 perturbations x d feature dims (numpy or torch).

    tau: the absolute shrinkage added to Sigma_xi; None = shrinkage_rel * Tr(Sigma_xi)/d (RECON rule,
    see module docstring); 0 = none (needs a non-singular residual covariance).
    Returns an :class:`ICRResult`. Raises ValueError on bad shapes, non-finite values or a
    residual covariance that is singular at tau = 0. Source: paper Eq. (ICR), App. B.6."""
    x = _as_array(features)
    sigma_s, sigma_xi = covariances(x)
    value, t, tr = icr_from_covariances(sigma_s, sigma_xi, tau=tau, shrinkage_rel=shrinkage_rel)
    return ICRResult(
        icr=value,
        shrinkage=t,
        shrinkage_rel=float(shrinkage_rel) if tau is None else float("nan"),
        trace_ratio=tr,
        trace_sigma_s=float(np.trace(sigma_s)),
        trace_sigma_xi=float(np.trace(sigma_xi)),
        feature_dim=int(x.shape[2]),
        n_images=int(x.shape[0]),
        n_views=int(x.shape[1]),
    )


def icr_two_view(h1, h2, *, tau: float | None = None, shrinkage_rel: float = SHRINKAGE_REL) -> ICRResult:
    """ICR from two views (N, d) and (N, d) of the same N images (the paper's two-view estimator)."""
    a, b = _as_array(h1), _as_array(h2)
    if a.shape != b.shape or a.ndim != 2:
        raise ValueError(f"h1 and h2 must both be (N, d), got {a.shape} and {b.shape}")
    return icr(np.stack([a, b], axis=1), tau=tau, shrinkage_rel=shrinkage_rel)


def spectrum(features, *, tau: float | None = None, shrinkage_rel: float = SHRINKAGE_REL) -> np.ndarray:
    """The d generalized eigenvalues lambda of Sigma_s v = lambda (Sigma_xi + tau I) v, ascending
    (scipy.linalg.eigh); ICR = 1 / (1 + mean lambda)."""
    from scipy.linalg import eigh

    sigma_s, sigma_xi = covariances(features)
    if tau is None:
        tau = shrinkage_for(sigma_s, sigma_xi, shrinkage_rel)
    d = sigma_s.shape[0]
    return eigh(0.5 * (sigma_s + sigma_s.T), 0.5 * (sigma_xi + sigma_xi.T) + tau * np.eye(d), eigvals_only=True)
