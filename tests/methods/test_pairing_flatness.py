"""Flatness metrics against exact oracles: power-iteration top Hessian eigenvalue vs the eigenvalues of
torch.autograd.functional.hessian, Hutchinson trace vs the exact trace, filter normalisation, PGD, noise gap."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from icml26.methods.multimodal import flatness as fl


class TwoModal(nn.Module):
    """A tiny late-fusion model: tanh encoders per modality, concat, linear head."""

    def __init__(self):
        super().__init__()
        self.modalities = ("a", "b")
        self.ea, self.eb = nn.Linear(3, 3), nn.Linear(2, 2)
        self.head = nn.Linear(5, 3)

    def forward(self, xs):
        return self.head(torch.cat([torch.tanh(self.ea(xs["a"])), torch.tanh(self.eb(xs["b"]))], 1))


def _setup(seed=0, n=40):
    torch.manual_seed(seed)
    m = TwoModal()
    xa, xb = torch.randn(n, 3), torch.randn(n, 2)
    y = torch.randint(0, 3, (n,))

    def batches():  # two uneven batches: the HVP must weight them by size
        yield {"a": xa[:25], "b": xb[:25]}, y[:25]
        yield {"a": xa[25:], "b": xb[25:]}, y[25:]

    return m, batches, (xa, xb, y)


def _exact_hessian(m, data):
    xa, xb, y = data
    names = [k for k, p in m.named_parameters()]
    shapes = [p.shape for p in m.parameters()]
    sizes = [p.numel() for p in m.parameters()]
    flat0 = torch.cat([p.detach().flatten() for p in m.parameters()])

    def loss(flat):
        parts = torch.split(flat, sizes)
        params = {k: t.view(s) for k, t, s in zip(names, parts, shapes)}
        out = torch.func.functional_call(m, params, ({"a": xa, "b": xb},))
        return F.cross_entropy(out, y)

    return torch.autograd.functional.hessian(loss, flat0)


@pytest.mark.parametrize("seed", [0, 1])
def test_power_iteration_matches_the_exact_top_eigenvalue(seed):
    m, batches, data = _setup(seed)
    H = _exact_hessian(m, data)
    ev = torch.linalg.eigvalsh(0.5 * (H + H.T))
    top = float(ev[ev.abs().argmax()])  # power iteration finds the eigenvalue of largest magnitude
    est = fl.hessian_top_eig(m, batches, iters=500, tol=1e-9, seed=seed)
    assert est == pytest.approx(top, rel=2e-3), (est, ev[-3:].tolist())


def test_hutchinson_trace_within_its_standard_error():
    m, batches, data = _setup(2)
    H = _exact_hessian(m, data)
    exact = float(torch.trace(H))
    k = 150
    est = fl.hutchinson_trace(m, batches, samples=k, seed=0)
    var = 2.0 * float((H**2).sum() - (torch.diagonal(H) ** 2).sum())  # Var(v^T H v), Rademacher v
    assert abs(est - exact) < 4 * math.sqrt(var / k) + 1e-6, (est, exact, math.sqrt(var / k))


def test_filter_normalised_direction_matches_filter_norms():
    m, _, _ = _setup(0)
    d = fl.filter_normalized_direction(m, torch.Generator().manual_seed(0))
    for p, v in zip(m.parameters(), d):
        if p.ndim == 1:
            assert torch.count_nonzero(v) == 0
        else:
            assert torch.allclose(v.flatten(1).norm(dim=1), p.detach().flatten(1).norm(dim=1), rtol=1e-5)


def test_loss_curve_gap_and_landscape_centre():
    m, batches, _ = _setup(0)
    base = fl.mean_loss(m, batches)
    curve = fl.random_direction_curve(m, batches, [0.0, 0.5, 20.0], directions=4)
    assert curve[0] == pytest.approx(base) and curve[2] > curve[0]
    assert fl.weight_noise_gap(m, batches, sigma=0.0, draws=3) == pytest.approx(0.0, abs=1e-7)
    assert fl.weight_noise_gap(m, batches, sigma=0.5, draws=10) > 0
    c, z = fl.landscape_2d(m, batches, points=5, span=1.0)
    assert c[2] == 0 and z[2, 2] == pytest.approx(base, rel=1e-6)
    after = fl.mean_loss(m, batches)  # the weights are restored
    assert after == pytest.approx(base, rel=1e-7)


def test_pgd_lowers_accuracy_only_with_a_radius():
    torch.manual_seed(0)
    n = 200
    y = torch.randint(0, 3, (n,))
    xa = F.one_hot(y, 3).float() + 0.3 * torch.randn(n, 3)
    xb = torch.randn(n, 2)
    m = TwoModal()
    opt = torch.optim.Adam(m.parameters(), lr=0.1)
    for _ in range(60):
        loss = F.cross_entropy(m({"a": xa, "b": xb}), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    def batches():
        yield {"a": xa, "b": xb}, y

    clean = fl.accuracy(m, batches)
    assert clean > 0.8
    assert fl.pgd_accuracy(m, batches, "a", eps=1e-6, steps=5) == pytest.approx(clean, abs=0.01)
    hit = fl.pgd_accuracy(m, batches, "a", eps=0.8, steps=10)
    assert hit < clean - 0.3
    assert (
        fl.pgd_accuracy(m, batches, "a", eps=0.8, steps=10)
        <= fl.pgd_accuracy(m, batches, "a", eps=0.2, steps=10) + 0.02
    )
