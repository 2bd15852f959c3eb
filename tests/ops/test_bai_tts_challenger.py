"""Top-two Thompson sampling, gaussian model: the challenger drawn directly from the posterior
conditioned on argmax != leader has the law of Russo's (2016) redraw-until-different rule.

Oracle (independent of the engine): P(J = j | argmax != I) = pi_j / (1 - pi_I) with
pi_j = int phi_j(x) prod_{k != j} Phi_k(x) dx, by quadrature on a fine grid."""

import numpy as np
import pytest
from scipy import stats

from icml26.ops._ref import bai_fc as R


def _oracle(mu, sd, lead):
    lo, hi = (mu - 12 * sd).min(), (mu + 12 * sd).max()
    x = np.linspace(lo, hi, 400001)
    cdf = stats.norm.cdf(x[None, :], mu[:, None], sd[:, None])
    pdf = stats.norm.pdf(x[None, :], mu[:, None], sd[:, None])
    pi = np.array([np.trapezoid(pdf[j] * np.prod(np.delete(cdf, j, axis=0), axis=0), x) for j in range(mu.size)])
    pi[lead] = 0.0
    return pi / pi.sum()


@pytest.mark.parametrize(
    "mu,var,n",
    [  # P(argmax != leader) ~ 0.5, then ~5e-4 (about 2000 redraws by rejection)
        ([0.50, 0.45, 0.30, 0.47, 0.40], [0.04, 0.09, 0.01, 0.02, 0.25], [50, 30, 20, 40, 10]),
        ([0.50, 0.45, 0.46, 0.44, 0.30], [0.04, 0.05, 0.03, 0.09, 0.04], [600, 500, 500, 400, 300]),
    ],
)
def test_gaussian_challenger_law_matches_quadrature(mu, var, n):
    mu, var, n = np.array(mu), np.array(var), np.array(n, dtype=np.int64)
    lead, M = 0, 30000
    sd = np.sqrt(var / n)
    want = _oracle(mu, sd, lead)
    got = R._gauss_challenger(
        np.arange(M, dtype=np.uint64) + 7,
        np.full(M, 123, dtype=np.int64),
        np.zeros(M, dtype=np.int64),
        np.tile(n, (M, 1)),
        np.tile(mu, (M, 1)),
        np.tile(var, (M, 1)),
        np.tile(np.linspace(0.1, 0.9, 5), (M, 1)),
        1000,
    )
    assert (got != lead).all()
    freq = np.bincount(got, minlength=mu.size) / M
    # 5 binomial standard errors at most 0.0029 each
    np.testing.assert_allclose(freq, want, atol=0.015)
    assert (want > 0.05).sum() >= 3  # three challengers with real mass: the test can tell them apart


def test_trunc_normal_law():
    for a in (-1.0, 0.3, 2.0, 8.0):
        M = 40000
        z = R.trunc_normal(np.arange(M, dtype=np.uint64), np.zeros(M, np.uint64), np.zeros(M, np.uint64), np.full(M, a))
        assert (z > a).all()
        # conditional mean of N(0,1) above a: phi(a) / (1 - Phi(a)) (inverse Mills ratio)
        want = stats.norm.pdf(a) / stats.norm.sf(a)
        assert abs(z.mean() - want) < 5 * z.std() / np.sqrt(M) + 1e-3, (a, z.mean(), want)
