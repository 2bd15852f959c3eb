"""ICR oracle tests on constructed features (shared/methods/icr.md; arXiv 2606.09718)."""

import numpy as np
import pytest
import scipy.linalg

from icml26.methods.diffusion import estimator as I


def _features(n, v, d, sig_s, sig_xi, seed=0):
    """h_iv = s_i + xi_iv with s ~ N(0, sig_s), xi ~ N(0, sig_xi) independent of the image."""
    g = np.random.default_rng(seed)
    s = g.multivariate_normal(np.zeros(d), sig_s, size=n) if sig_s is not None else np.zeros((n, d))
    xi = g.multivariate_normal(np.zeros(d), sig_xi, size=(n, v)) if sig_xi is not None else np.zeros((n, v, d))
    return s[:, None, :] + xi


def _random_spd(d, seed, cond=10.0):
    g = np.random.default_rng(seed)
    q, _ = np.linalg.qr(g.normal(size=(d, d)))
    return (q * np.geomspace(1.0, cond, d)) @ q.T


def test_two_view_estimator_is_the_papers_formula():
    h = _features(300, 2, 6, _random_spd(6, 1), _random_spd(6, 2))
    s, xi = I.covariances(h)
    t, dd = h.mean(1), h[:, 0] - h[:, 1]
    np.testing.assert_allclose(xi, 0.5 * np.cov(dd, rowvar=False), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(s, np.cov(t, rowvar=False) - 0.25 * np.cov(dd, rowvar=False), rtol=1e-12, atol=1e-12)


def test_zero_residual_gives_the_lower_limit():
    d = 8
    h = _features(200, 3, d, _random_spd(d, 3), None)  # every view identical: no residual
    r = I.icr(h)
    assert r.trace_sigma_xi == pytest.approx(0.0, abs=1e-12)
    # tau falls back to the total trace; ICR = d / (d + Tr(Sigma_s) / tau) -> 0
    assert r.shrinkage == pytest.approx(1e-6 * r.trace_sigma_s / d, rel=1e-9)
    assert r.icr == pytest.approx(d / (d + r.trace_sigma_s / r.shrinkage), rel=1e-9)
    assert r.icr < 1e-5
    with pytest.raises(ValueError, match="not positive definite"):
        I.icr(h, tau=0.0)


def test_identity_free_residual_gives_the_upper_limit():
    # no image identity at all: the invariant part is constant, every feature is residual
    h = _features(4000, 2, 5, None, _random_spd(5, 4))
    r = I.icr(h)
    # E[Tr(Sigma_xi^-1 Sigma_s)] = 0; sampling error of Tr is ~ d * sqrt(2/N)-sized
    assert abs(r.icr - 1.0) < 0.02
    assert abs(r.trace_ratio) < 5 * 5 * np.sqrt(2 / 4000)


@pytest.mark.parametrize("k", [0.25, 1.0, 4.0])
def test_signal_matched_in_scale_to_the_residual(k):
    # Sigma_s = k * Sigma_xi (same shape, scale k): every lambda = k, ICR = 1 / (1 + k)
    d = 6
    sx = _random_spd(d, 5)
    h = _features(6000, 2, d, k * sx, sx, seed=int(k * 10))
    r = I.icr(h, tau=0.0)
    assert r.icr == pytest.approx(1.0 / (1.0 + k), abs=0.02)


def test_closed_form_generalized_eigenproblem_with_scipy():
    h = _features(500, 4, 7, _random_spd(7, 6, cond=30), _random_spd(7, 7, cond=5), seed=3)
    r = I.icr(h)
    s, xi = I.covariances(h)
    lam = scipy.linalg.eigh(s, xi + r.shrinkage * np.eye(7), eigvals_only=True)
    assert r.icr == pytest.approx(1.0 / (1.0 + lam.mean()), rel=1e-10)
    np.testing.assert_allclose(I.spectrum(h), lam, rtol=1e-10)


def test_invariant_to_an_invertible_linear_map():
    d = 6
    h = _features(400, 2, d, _random_spd(d, 8), _random_spd(d, 9), seed=4)
    g = np.random.default_rng(10)
    a = g.normal(size=(d, d)) + 3 * np.eye(d)  # invertible, cond ~ 10
    ha = h @ a.T
    assert I.icr(ha, tau=0.0).icr == pytest.approx(I.icr(h, tau=0.0).icr, rel=1e-9)  # exact
    # with the default shrinkage (1e-6 of the mean residual variance) the map moves ICR by < 1e-4
    assert abs(I.icr(ha).icr - I.icr(h).icr) < 1e-4
    # and an offset per feature changes nothing
    assert I.icr(h + 5.0, tau=0.0).icr == pytest.approx(I.icr(h, tau=0.0).icr, rel=1e-10)


def test_singular_residual_covariance_is_well_defined_with_shrinkage():
    d = 6
    g = np.random.default_rng(11)
    h = _features(300, 2, d, _random_spd(d, 12), None)
    basis = g.normal(size=(2, d))  # residual confined to a 2-dim subspace
    h = h + (g.normal(size=(300, 2, 2)) @ basis)
    s, xi = I.covariances(h)
    assert np.linalg.matrix_rank(xi, tol=1e-10 * np.trace(xi)) == 2
    with pytest.raises(ValueError):
        I.icr(h, tau=0.0)
    vals = [I.icr(h, tau=t).icr for t in (1e-8, 1e-6, 1e-4, 1e-2)]
    assert all(np.isfinite(v) and 0.0 < v < 1.0 for v in vals)
    assert vals == sorted(vals)  # more shrinkage, more ICR (monotone in tau)
    r = I.icr(h)
    assert r.shrinkage == pytest.approx(1e-6 * np.trace(xi) / d, rel=1e-12) and 0.0 < r.icr < 1.0


def test_torch_input_and_v_views_agree_with_numpy():
    torch = pytest.importorskip("torch")
    h = _features(200, 3, 5, _random_spd(5, 13), _random_spd(5, 14), seed=5)
    a = I.icr(h)
    b = I.icr(torch.tensor(h, dtype=torch.float32))
    assert b.icr == pytest.approx(a.icr, rel=1e-5)
    two = I.icr_two_view(h[:, 0], h[:, 1])
    assert two.n_views == 2 and two.icr == pytest.approx(I.icr(h[:, :2]).icr, rel=1e-12)


def test_v_view_estimator_is_unbiased():
    # V = 2 and V = 5 estimate the same population ICR (1 / (1 + 1)); large N
    sx = _random_spd(4, 15)
    for v in (2, 5):
        assert I.icr(_features(5000, v, 4, sx, sx, seed=v), tau=0.0).icr == pytest.approx(0.5, abs=0.02)


@pytest.mark.parametrize("shape", [(10, 5), (1, 2, 3), (10, 1, 3)])
def test_bad_shapes(shape):
    with pytest.raises(ValueError):
        I.icr(np.zeros(shape))


def test_non_finite_is_refused():
    h = np.ones((4, 2, 3))
    h[0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        I.icr(h)
