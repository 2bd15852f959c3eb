"""Mini-batch rules: squared volume sampling's probabilities against the determinant formula
(enumerated), the preconditioned-gradient property of the expected SNG step, leverage scores."""

import itertools
import math

import numpy as np
import pytest
import torch

from icml26.methods.pinn import sampling as S


def _det_probs(L: torch.Tensor, k: int) -> dict:
    N = L.shape[0]
    subsets = list(itertools.combinations(range(N), k))
    dets = np.array([float(torch.linalg.det(L[list(s)][:, list(s)])) for s in subsets])
    return dict(zip(subsets, dets / dets.sum()))


def _empirical(B, k, lam, n, seed=0):
    rng = np.random.default_rng(seed)
    counts: dict = {}
    w, U = S._factor_eig(B)
    assert tuple(S.sample_kdpp(B, k, lam, np.random.default_rng(seed))) == tuple(
        S.sample_kdpp_eig(w, U, k, lam, np.random.default_rng(seed))
    )
    for _ in range(n):
        s = tuple(S.sample_kdpp_eig(w, U, k, lam, rng))
        counts[s] = counts.get(s, 0) + 1
    return counts


@pytest.mark.parametrize(
    "N,m,k,lam",
    [
        (7, 2, 3, 0.3),
        pytest.param(7, 4, 3, 0.1, marks=pytest.mark.slow),
        pytest.param(6, 6, 2, 0.0, marks=pytest.mark.slow),
    ],
)
def test_squared_volume_sampling_matches_the_determinant_formula(N, m, k, lam):
    # (7, 2, 3): rank 2 < k, so one eigenvector comes from the lam-eigenspace complement
    g = torch.Generator().manual_seed(N * 10 + m)
    B = torch.randn(N, m, generator=g, dtype=torch.float64) * torch.linspace(2.0, 0.5, m, dtype=torch.float64)
    L = B @ B.T + lam * torch.eye(N, dtype=torch.float64)
    p = _det_probs(L, k)
    n = 4000
    c = _empirical(B, k, lam, n)
    assert all(len(s) == k and len(set(s)) == k for s in c)
    # every subset within 4.5 binomial standard deviations, and chi-square-like total error
    for s, ps in p.items():
        sd = math.sqrt(ps * (1 - ps) / n) + 1e-12
        assert abs(c.get(s, 0) / n - ps) <= 4.5 * sd + 1e-9, (s, c.get(s, 0) / n, ps)
    tv = 0.5 * sum(abs(c.get(s, 0) / n - ps) for s, ps in p.items())
    assert tv < 0.06


def test_volume_sampling_needs_rank_without_damping():
    B = torch.randn(6, 2, dtype=torch.float64)
    with pytest.raises(ValueError, match="rank"):
        S.sample_kdpp(B, 3, 0.0, np.random.default_rng(0))
    with pytest.raises(ValueError):
        S.sample_kdpp(B, 7, 0.1, np.random.default_rng(0))


def test_expected_sng_step_under_volume_sampling_is_a_preconditioned_gradient_step():
    # shared/methods/sng.md item 6: E_S[J_S^T K_S^-1 r_S] = M J^T r with M symmetric PSD, and
    # E[P_S] = V diag(d_i) V^T in closed form (elementary symmetric polynomials)
    N, P, k, lam = 8, 6, 3, 0.2
    g = torch.Generator().manual_seed(5)
    J = torch.randn(N, P, generator=g, dtype=torch.float64)
    L = J @ J.T + lam * torch.eye(N, dtype=torch.float64)
    probs = _det_probs(L, k)
    EP = torch.zeros(P, P, dtype=torch.float64)
    EW = torch.zeros(P, N, dtype=torch.float64)  # E[J_S^T K_S^-1 E_S]: the map r -> expected step
    for s, ps in probs.items():
        Js = J[list(s)]
        Kinv = torch.linalg.inv(Js @ Js.T + lam * torch.eye(k, dtype=torch.float64))
        EP += ps * Js.T @ Kinv @ Js
        E = torch.zeros(k, N, dtype=torch.float64)
        E[range(k), list(s)] = 1.0
        EW += ps * Js.T @ Kinv @ E
    M = EW @ torch.linalg.pinv(J.T)  # EW = M J^T
    assert torch.allclose(M @ J.T, EW, atol=1e-12)
    assert torch.allclose(M, M.T, atol=1e-12) and torch.linalg.eigvalsh(M).min() > -1e-12
    # closed form of E[P_S]
    U, sv, Vh = torch.linalg.svd(J, full_matrices=False)
    s2 = (sv**2).numpy()

    def e(j, x):
        return sum(math.prod(c) for c in itertools.combinations(x, j)) if j >= 0 else 0.0

    x_all = list(s2) + [0.0] * (N - P)
    den = sum(lam ** (k - j) * math.comb(N - j, k - j) * e(j, s2) for j in range(k + 1))
    d = [
        sum(
            lam ** (k - j) * math.comb(N - j, k - j) * s2[i] * e(j - 1, [v for t, v in enumerate(s2) if t != i])
            for j in range(1, k + 1)
        )
        / den
        for i in range(P)
    ]
    closed = Vh.T @ torch.diag(torch.tensor(d, dtype=torch.float64)) @ Vh
    assert len(x_all) == N
    assert torch.allclose(closed, EP, atol=1e-12)


def test_ridge_leverage_scores():
    g = torch.Generator().manual_seed(1)
    for N, m in ((10, 4), (5, 9)):
        B = torch.randn(N, m, generator=g, dtype=torch.float64)
        lam = 0.3
        K = B @ B.T
        ref = torch.diagonal(K @ torch.linalg.inv(K + lam * torch.eye(N, dtype=torch.float64)))
        assert torch.allclose(S.ridge_leverage(B, lam), ref, atol=1e-12)


@pytest.mark.parametrize("rule", S.SAMPLINGS)
def test_select_returns_k_distinct_rows(rule):
    J = torch.randn(40, 12, dtype=torch.float64)
    idx = S.select(J, 8, rule, lam=1e-3, rng=np.random.default_rng(0))
    assert len(idx) == 8 and len(set(idx)) == 8 and all(0 <= i < 40 for i in idx)
    assert idx == S.select(J, 8, rule, lam=1e-3, rng=np.random.default_rng(0))  # same seed, same batch


def test_volume_sampling_prefers_large_rows():
    # rows with 10x norm are chosen far more often than under uniform sampling
    J = torch.randn(30, 30, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    J[:5] *= 10
    rng = np.random.default_rng(1)
    hits = sum(sum(i < 5 for i in S.select(J, 5, "volume", lam=1e-6, rng=rng)) for _ in range(200))
    assert hits / (200 * 5) > 0.5  # uniform: 5/30
