"""PDE problems: the exact solution has ~0 residual; samplers stay on the domain / boundary;
the spectral-decay fit; one short training run reaches a small error (quality threshold)."""

import math

import pytest
import torch

from icml26.methods.pinn import baselines as B
from icml26.methods.pinn import problems as PR
from icml26.methods.pinn import train as T


@pytest.mark.parametrize("name", list(PR.PROBLEMS))
def test_exact_solution_has_zero_residual(name):
    p = PR.get_problem(name)
    g = torch.Generator().manual_seed(0)
    Xi, Xb = p.interior(50, g), p.on_boundary(50, g)

    def u(x):
        return p.exact(x.unsqueeze(0)).reshape(())

    r_int = torch.stack([p.operator(u, x) - p.source(x.unsqueeze(0)).reshape(()) for x in Xi])
    assert float(r_int.abs().max()) < 1e-10
    assert float((p.exact(Xb) - p.boundary(Xb)).abs().max()) < 1e-12
    assert float(r_int.abs().max()) < 1e-10 < float(p.source(Xi).abs().max()) or name == "heat1d"
    # points lie in the closed unit cube; boundary points on a face (heat: t = 0 or x in {0, 1})
    assert float(Xi.min()) >= 0 and float(Xi.max()) <= 1
    on_face = ((Xb == 0) | (Xb == 1)).any(1)
    assert bool(on_face.all())
    if name == "heat1d":
        assert not bool((Xb[:, 1] == 1).any())  # no final-time boundary


def test_wrong_operator_is_caught_by_the_residual():
    p = PR.get_problem("poisson2d")
    x = torch.tensor([0.3, 0.6], dtype=torch.float64)
    u = lambda y: p.exact(y.unsqueeze(0)).reshape(())  # noqa: E731
    assert abs(float(PR.laplacian(u, x)) + 2 * math.pi**2 * float(u(x))) < 1e-10
    assert abs(float(-PR.laplacian(u, x) * 0.5 - p.source(x.unsqueeze(0))[0])) > 1.0


def test_unknown_problem():
    with pytest.raises(ValueError, match="poisson2d"):
        PR.get_problem("burgers9d")


@pytest.mark.parametrize("a", [0.5, 1.0, 2.0])
def test_spectral_decay_recovers_the_exponent(a):
    U, _ = torch.linalg.qr(torch.randn(60, 40, dtype=torch.float64, generator=torch.Generator().manual_seed(0)))
    V, _ = torch.linalg.qr(torch.randn(50, 40, dtype=torch.float64, generator=torch.Generator().manual_seed(1)))
    s = torch.arange(1, 41, dtype=torch.float64) ** -a
    assert B.spectral_decay(U @ torch.diag(s) @ V.T) == pytest.approx(a, abs=1e-8)


def _run(cfg, seed=0):
    return list(T.run(cfg, seed=seed))


def test_same_seed_same_records():
    cfg = T.Config(
        optim=("sng", "spring", "adam"),
        batch=(16,),
        max_iterations=4,
        width=8,
        pool_interior=48,
        pool_boundary=12,
        eval_points=128,
        time_budget_s=120,
    )
    a, b = _run(cfg), _run(cfg)
    strip = lambda rs: [{k: v for k, v in r.items() if k != "wall_s" and not k.startswith("time_to")} for r in rs]  # noqa: E731
    assert strip(a) == strip(b)
    c = _run(cfg, seed=1)
    assert strip(a) != strip(c)
    steps = [r for r in a if r["kind"] == "step"]
    assert {"optim", "seed", "iteration", "wall_s", "loss", "rel_l2"} <= set(steps[0])
    res = [r for r in a if r["kind"] == "result"]
    for r in res:
        assert {
            "final_rel_l2",
            "best_rel_l2",
            "time_to_1e-3_s",
            "time_to_1e-5_s",
            "iterations",
            "seeds",
            "jacobian_spectral_decay",
        } <= set(r)
    assert a[-1]["kind"] == "summary"


def test_sng_quality_threshold_poisson2d():
    # 40 SNG steps at batch 96 on Poisson 2D with a 2-16-16-1 net: rel. L2 well below Adam's;
    # 40 L-BFGS iterations make progress (measured 0.23; torch's L-BFGS called with max_iter=1
    # stalled at 0.85 with the line search returning t = 0)
    cfg = T.Config(
        optim=("sng", "adam", "lbfgs"),
        batch=(96,),
        max_iterations=40,
        width=16,
        pool_interior=240,
        pool_boundary=60,
        eval_points=1024,
        time_budget_s=300,
        pool_resample_every=0,
    )
    res = {r["optim"]: r for r in _run(cfg) if r["kind"] == "result"}
    assert res["sng"]["best_rel_l2"] < 2e-2, res["sng"]
    assert res["sng"]["best_rel_l2"] < 0.1 * res["adam"]["best_rel_l2"]
    assert res["lbfgs"]["best_rel_l2"] < 0.5 and res["lbfgs"]["iterations"] == 40
