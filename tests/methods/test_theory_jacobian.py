"""jacobian-spectrum: QR exponents, closed forms, alignment, fixed-gates factors, Prop 7.1 rates."""

import math

import numpy as np
import pytest
import torch

from icml26.methods.theory import jacobian as jac
from icml26.methods.theory import lyapunov as ly
from icml26.methods.theory import spectrum as sp


def _gauss(n, L, seed, p=1.0, s2=2.0, r=1):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(L):
        w = torch.randn(n, n, generator=g, dtype=torch.float64) * math.sqrt(s2 / n)
        if p < 1.0:
            w = jac.draw_gates(n, p, r, "relu", 0.0, g)[:, None] * w
        out.append(w)
    return out


def test_top_singular_matches_exact_svd_at_small_depth():
    fs = _gauss(24, 5, 0, p=0.5)
    ts = ly.top_singular(fs, 6, sweeps=40, oversample=6, gen=torch.Generator().manual_seed(1))
    ex = ly.exact_log_singular(fs, 6)
    assert torch.allclose(ts.log_s, ex, atol=1e-8)
    j = fs[0]
    for f in fs[1:]:
        j = f @ j
    # singular vectors: J v_k = s_k u_k
    assert torch.allclose(j @ ts.v, ts.u * torch.exp(ts.log_s), atol=1e-8 * float(torch.exp(ts.log_s[0])))


def test_lyap_qr_full_frame_is_log_det_and_single_factor_exact():
    fs = _gauss(10, 7, 2)
    lam = ly.lyap_qr(fs, 10)
    j = fs[0]
    for f in fs[1:]:
        j = f @ j
    assert abs(float(lam.sum()) * 7 - float(torch.linalg.slogdet(j)[1])) < 1e-9
    # one factor, start frame = its right singular vectors: exactly log s_k
    u, s, vt = torch.linalg.svd(fs[0])
    got = ly.lyap_qr(fs[:1], 4, q0=vt[:4].T)
    assert torch.allclose(got, torch.log(s[:4]), atol=1e-12)


def test_lyap_qr_newman_exponents_at_large_depth():
    fs = _gauss(16, 2000, 3, s2=1.0)
    got = ly.lyap_qr(fs, 5, gen=torch.Generator().manual_seed(0)).numpy()
    want = ly.newman(16, 1.0, 5)
    assert np.abs(got - want).max() < 0.012, (got, want)
    # lambda_1 of Ginibre products: (1/2)[log(2/n) + psi(n/2)] < 0 for sigma2 = 1
    assert want[0] < 0 and np.all(np.diff(want) < 0)


def test_masked_closed_form_against_monte_carlo():
    n, p, s2, k = 32, 0.5, 2.0, 8
    fs = _gauss(n, 4000, 4, p=p, s2=s2, r=k)
    got = ly.lyap_qr(fs, k, gen=torch.Generator().manual_seed(0)).numpy()
    want = ly.lyap_closed(n, p, s2, k, r=k)
    assert np.abs(got - want).max() < 0.015, (got, want)
    # p = 1 is Newman's formula; He init is near-critical: lambda_1 ~ 1/2 log(sigma2 p)
    assert np.allclose(ly.lyap_closed(n, 1.0, s2, k), ly.newman(n, s2, k))
    assert abs(ly.lyap_closed(4096, 0.5, 2.0, 1)[0]) < 2e-3
    with pytest.raises(ValueError):
        ly.lyap_closed(8, 0.5, 2.0, 9)


def test_haar_offset_against_monte_carlo():
    from scipy.stats import ortho_group

    n, k = 12, 3
    hs = ortho_group.rvs(n, size=6000, random_state=0)
    mc = [-np.mean([np.log(abs(np.linalg.det(h[:j, :j]))) for h in hs]) for j in range(1, k + 1)]
    assert np.allclose(mc, ly.haar_offset(n, k), atol=0.04), (mc, ly.haar_offset(n, k))


def test_alignment_is_one_for_commuting_products_and_lower_otherwise():
    g = torch.Generator().manual_seed(5)
    q, _ = torch.linalg.qr(torch.randn(16, 16, generator=g, dtype=torch.float64))
    fs = [q @ torch.diag(torch.rand(16, generator=g, dtype=torch.float64) + 0.5) @ q.T for _ in range(6)]
    ts = ly.top_singular(fs, 4, sweeps=30, oversample=8, gen=g)
    left, right = jac.context_diagonality(fs, ts.u, ts.v)
    assert min(left + right) > 1 - 1e-9
    fs2 = _gauss(16, 6, 6)
    ts2 = ly.top_singular(fs2, 4, sweeps=30, oversample=8, gen=g)
    l2, r2 = jac.context_diagonality(fs2, ts2.u, ts2.v)
    # dense oracle: A_l = M_L ... M_l, B_l = M_{l-1} ... M_1
    for l in range(2, 7):
        A = fs2[l - 1]
        for m in range(l, 6):
            A = fs2[m] @ A
        B = torch.eye(16, dtype=torch.float64)
        for m in range(l - 1):
            B = fs2[m] @ B
        assert abs(l2[l - 2] - jac.diagonality(ts2.u.T @ A @ A.T @ ts2.u)) < 1e-9
        assert abs(r2[l - 2] - jac.diagonality(ts2.v.T @ B.T @ B @ ts2.v)) < 1e-9
    assert min(l2 + r2) < 0.99


def test_thm61_counterexample_row_condition():
    b = torch.tensor([[1.0, 0, 1], [2, 0, 2], [0, 1, 0]], dtype=torch.float64)
    for kk in (2.0, 3.0, 5.0):
        a = torch.diag(torch.tensor([kk * kk, kk, 1.0], dtype=torch.float64))
        u, _, _ = torch.linalg.svd(a @ b)
        assert torch.allclose(u[:, 1].abs(), torch.tensor([0.0, 0, 1], dtype=torch.float64), atol=1e-12)
    assert jac.column_condition(b, 2) and not jac.row_gram_condition(b, 2)
    assert jac.row_gram_condition(torch.eye(3), 2)


@pytest.mark.parametrize("arch,act", [("mlp", "relu"), ("mlp", "leaky_relu"), ("cnn", "relu")])
def test_fixed_gate_factors_equal_autograd_jacobian(arch, act):
    net = jac.GatedNet(arch, 3 if arch == "cnn" else 20, 4, act=act, negative_slope=0.1, seed=0).double()
    x = torch.randn(1, 784, dtype=torch.float64)
    h0 = net.embed(x).detach()

    def core(h):
        for layer in net.core:
            h = net.phi(layer(h))
        return h

    jfull = torch.func.jacrev(core)(h0).reshape(h0.numel(), h0.numel())
    fs = jac.core_factors(net, x, "fixed")
    n = h0.numel()
    eye = torch.eye(n, dtype=torch.float64)
    j = eye
    for f in fs:
        j = (f @ j) if isinstance(f, torch.Tensor) else f.mv(j)
    assert torch.allclose(j, jfull, atol=1e-10)
    if arch == "cnn":  # rmv is the transpose of mv
        y = torch.randn(n, 3, dtype=torch.float64)
        assert torch.allclose(fs[0].rmv(y), fs[0].mv(eye).T @ y, atol=1e-10)


def test_free_gates_are_bernoulli_with_rank_condition():
    g = torch.Generator().manual_seed(0)
    d = torch.stack([jac.draw_gates(64, 0.3, 10, "relu", 0.0, g) for _ in range(400)])
    assert abs(float(d.mean()) - 0.3) < 0.02 and float(d.sum(1).min()) >= 10
    d2 = jac.draw_gates(64, 0.5, 1, "leaky_relu", 0.2, g)
    assert set(d2.unique().tolist()) <= {0.2, 1.0}


def test_fgln_rates_exact_equals_dense_formula_and_finite_difference():
    torch.manual_seed(0)
    net = jac.GatedNet("fgln", 12, 4, in_dim=20, out_dim=5, init="lecun", gate_p=0.7, seed=1).double()
    x = torch.randn(32, 20, dtype=torch.float64)
    y = torch.randint(0, 5, (32,))
    g = torch.Generator().manual_seed(0)
    r = sp.fgln_rates(net, x, y, 3, 40, 6, g)
    # dense Prop 7.1: ds_k/dt = -sum_l u^T A_l A_l^T G B_l^T B_l v
    fs = jac.core_factors(net, None, "fixed")
    ts = ly.top_singular(fs, 3, sweeps=40, oversample=6, gen=g)
    u, v = ts.u, ts.v
    h0 = net.embed(x).detach()
    delta = (torch.softmax(net(x), 1) - torch.nn.functional.one_hot(y, 5).double()).detach() / 32
    G = (delta @ net.head.weight.detach()).T @ h0
    L = 4
    want = torch.zeros(3, dtype=torch.float64)
    for l in range(L):
        A = torch.diag(net.masks[l].double())
        for m in range(l + 1, L):
            A = fs[m] @ A
        B = torch.eye(12, dtype=torch.float64)
        for m in range(l):
            B = fs[m] @ B
        want -= (u.T @ A @ A.T @ G @ B.T @ B @ v).diagonal()
    assert np.allclose(r["exact"], want.numpy(), rtol=1e-8, atol=1e-12)
    # one small SGD step on the core weights moves s_k by -lr * (ds/dt) to first order
    lr = 1e-4
    net.zero_grad()
    torch.nn.functional.cross_entropy(net(x), y).backward()
    s0 = torch.exp(ly.exact_log_singular(fs, 3))
    with torch.no_grad():
        for layer in net.core:
            layer.weight -= lr * layer.weight.grad
    s1 = torch.exp(ly.exact_log_singular(jac.core_factors(net, None, "fixed"), 3))
    assert np.allclose(((s1 - s0) / lr).numpy(), r["exact"], rtol=2e-3, atol=1e-6)


def test_run_is_deterministic_and_meets_the_masked_model_at_depth():
    cfg = sp.Config(
        width=32, depths=(48,), top_k=4, gates=("free",), n_samples=2, data="noise", qr_sweeps=1, oversample=4
    )
    a = [r for r in sp.run(cfg, seed=3) if r["kind"] == "result"]
    b = [r for r in sp.run(cfg, seed=3) if r["kind"] == "result"]
    assert a[0]["lyapunov"] == b[0]["lyapunov"] and a[0]["log_sv"] == b[0]["log_sv"]
    # ~4 standard errors at 96 layer-draws; Newman's p = 1 law would be ~0.35 off
    assert a[0]["pred_exact"] is True and a[0]["max_abs_err"] < 0.07
    assert all(x >= 1.0 for x in a[0]["gap_ratio"])  # ordered singular values


def test_trained_on_fashion_mnist_learns_and_logs_trajectories():
    from tests.conftest import need_debian

    need_debian("dataset-fashion-mnist")
    cfg = sp.Config(
        width=32,
        depths=(4,),
        top_k=3,
        gates=("fixed",),
        n_samples=2,
        train="fashion-mnist",
        train_steps=150,
        train_examples=5000,
        log_every=50,
        qr_sweeps=1,
        oversample=3,
    )
    recs = list(sp.run(cfg, seed=0))
    steps = [r for r in recs if r["kind"] == "step"]
    trained = [r for r in recs if r["kind"] == "result" and r["phase"] == "trained"][0]
    assert [s["step"] for s in steps] == [0, 50, 100, 150] and len(steps[0]["log_s"]) == 3
    assert steps[-1]["loss"] < steps[0]["loss"]
    assert trained["test_accuracy"] > 0.6 and trained["lyapunov_pred"] is None
