"""Expo-GS pieces: monotone invertible tone mapper, reliability weight, pseudo-SDF closed form,
metrics against known values, SDF-guided pruning, checkpoint round trip."""

import math

import numpy as np
import pytest
import torch

from icml26.methods.splatting import hdr_gs as H
from icml26.methods.splatting import metrics as M
from icml26.methods.splatting.model import ToneMapper, pseudo_sdf, reliability


@pytest.mark.parametrize("seed", [0, 1])
def test_tone_mapper_monotone_and_invertible(seed):
    torch.manual_seed(seed)
    tm = ToneMapper(16)
    with torch.no_grad():
        for p in tm.parameters():
            p.add_(torch.randn_like(p))  # any parameters: monotone by construction
    x = torch.linspace(-12, 8, 401)[:, None].repeat(1, 3)
    y = tm(x)
    assert (y[1:] - y[:-1] >= 0).all()
    assert ((y >= 0) & (y <= 1)).all() and y[0].max() < 0.5 and y[-1].min() > 0.5
    mask = (y > 0.02) & (y < 0.98) & (torch.cat([y[1:] - y[:-1], torch.ones(1, 3)]) > 1e-6)
    xi = tm.inverse(y)
    torch.testing.assert_close(tm(xi)[mask], y[mask], atol=1e-5, rtol=0)
    assert (xi - x)[mask].abs().max() < 1e-3


def test_reliability_low_where_saturated_or_black():
    ldr = torch.tensor([[[0.0, 0.0, 0.0], [1.0, 1.0, 1.0], [0.5, 0.1, 0.2], [0.02, 0.01, 0.0], [0.99, 0.3, 0.3]]])
    r = reliability(ldr)[0]
    assert r[2] == pytest.approx(1.0)
    assert r[0] < 0.05 and r[1] < 0.05 and r[3] < 0.06 and r[4] < 0.06
    assert r[0] == pytest.approx(math.exp(-0.25 / 0.08))


def test_psnr_ssim_known_values():
    rng = np.random.default_rng(0)
    a = rng.random((32, 32, 3))
    assert M.psnr(a, a + 0.1) == pytest.approx(20.0)
    assert M.ssim(a, a) == pytest.approx(1.0)
    # constant images: SSIM = (2 x y + C1) / (x^2 + y^2 + C1)
    x, y, c1 = 0.3, 0.5, 0.01**2
    assert M.ssim(np.full((20, 20), x), np.full((20, 20), y)) == pytest.approx((2 * x * y + c1) / (x * x + y * y + c1))
    # mu-law HDR: the prediction's own max makes the metric scale-free, the GT max does not
    h = 0.01 + 10 * rng.random((16, 16, 3))
    d = M.hdr_metrics(2 * h, h)
    assert d["psnr_hdr_predmax"] == float("inf") and 5 < d["psnr_hdr"] < 30
    assert M.mu_law(np.array([1.0]))[0] == pytest.approx(1.0)
    assert M.mu_law(np.array([0.001]))[0] == pytest.approx(math.log(6) / math.log(5001))


def test_pseudo_sdf_closed_form():
    means = torch.tensor([[0.0, 0.0, 0.0], [10.0, 0.0, 0.0]])
    scales = torch.tensor([[0.5, 0.2, 0.05], [1.0, 1.0, 1.0]])
    quats = torch.tensor([[1.0, 0, 0, 0], [1.0, 0, 0, 0]])
    opac = torch.tensor([1.0, 1.0])
    pts = torch.tensor([[0.0, 0.0, 0.0], [0.0, 0.0, 0.1], [0.0, 0.0, 0.05]])
    f = pseudo_sdf(pts, means, scales, quats, opac, k=1)
    # along the smallest axis d = exp(-k^2 / 2) at k scales, f = s_min sqrt(-2 log d) = k s_min: the distance
    torch.testing.assert_close(f, torch.tensor([0.0, 0.1, 0.05]), atol=2e-4, rtol=1e-4)


def _model(n=50, seed=0):
    cfg = H.Config(
        init_points=n, max_gaussians=4 * n, sdf_sigma=0.05, visibility_gate=False
    )  # gate: test_splat_expo_dc.py
    torch.manual_seed(seed)
    params = {
        "means": torch.randn(n, 3),
        "log_scales": torch.full((n, 3), -5.0),
        "quats": torch.randn(n, 4),
        "logit_opacity": torch.full((n,), 2.0),
        "log_radiance": torch.randn(n, 3),
    }
    return H.Model(params, ToneMapper(cfg.tone_hidden), cfg, 3.0), cfg


def test_sdf_guided_density_control_prunes_far_from_surface():
    import dataclasses

    for large_only in (True, False):
        model, cfg = _model()
        cfg = dataclasses.replace(cfg, sdf_prune_large_only=large_only)
        with torch.no_grad():
            model.p["log_scales"][:5] = math.log(0.5)  # five of the far ones are large (> 0.1 x extent 3)
        orig = model.p["means"].detach().clone()
        f = torch.full((model.n,), 0.01)
        f[:10] = 1.0  # ten Gaussians far from the surface
        model.grad_cnt[:] = 1
        model.grad_acc[:] = 1e-5  # below tau_g = 2e-4 alone
        H.density_control(model, cfg, True, f, torch.Generator().manual_seed(0))
        # far: opacity sigmoid(2) = 0.88, 0.88 - 1 * (1 - exp(-200)) < tau_p -> pruned if large (GSDF's rule),
        # every far one with the earlier reading; near: 1e-5 + 2e-4 exp(-0.01^2 / (2 0.05^2)) = 2.06e-4 > tau_g
        # -> cloned (small Gaussians)
        kept = orig[5:] if large_only else orig[10:]
        assert model.n == len(kept) + 40
        torch.testing.assert_close(model.p["means"][: len(kept)].detach(), kept)
        torch.testing.assert_close(model.p["means"][len(kept) :].detach(), orig[10:])
    m2, cfg2 = _model()
    m2.grad_cnt[:] = 1
    m2.grad_acc[:] = 1e-5
    H.density_control(m2, cfg2, False, None, torch.Generator().manual_seed(0))
    assert m2.n == 50  # standard control: gradient below tau_g, opacity above tau_p -> unchanged


def test_checkpoint_round_trip(tmp_path):
    model, cfg = _model(20)
    from icml26.core.data.renders import Camera, intrinsics, look_at

    cam = Camera(24, 24, intrinsics(24, 24, 60), look_at((0, 0, 5), (0, 0, 0)))
    H.render(model, cam, 2.0)["ldr"].sum().backward()
    model.step()
    p = tmp_path / "c.safetensors"
    H.save_ckpt(
        p, model, {"config": H._cfg_json(cfg), "extent": 3.0, "iteration": 1, "adam_step": model.step_n, "train_s": 0.0}
    )
    m2, meta = H.load_ckpt(p)
    assert meta["iteration"] == 1 and m2.cfg == cfg and m2.step_n == 1
    for k in H.Model.KEYS:
        torch.testing.assert_close(m2.p[k], model.p[k])
        torch.testing.assert_close(m2.v[k], model.v[k])
    with torch.no_grad():
        torch.testing.assert_close(H.render(m2, cam, 0.5)["ldr"], H.render(model, cam, 0.5)["ldr"])


def test_bad_checkpoint_is_input_error(tmp_path):
    from icml26.core.errors import InputError

    p = tmp_path / "x.safetensors"
    p.write_bytes(b"not a checkpoint")
    with pytest.raises(InputError):
        H.load_ckpt(p)


def test_floaters_against_true_depth():
    """Centres on a wall at z = 5 are not floaters; the same centres 0.5 in front of it are."""
    from icml26.core.data.renders import Camera, intrinsics, look_at

    cam = Camera(32, 32, intrinsics(32, 32, 60), look_at((0, 0, 0), (0, 0, 5)))
    g = torch.Generator().manual_seed(0)
    xy = (torch.rand(40, 2, generator=g) - 0.5) * 4
    depth = {0: np.full((32, 32), 5.0, np.float32)}
    sd = H.SceneData("wall", [cam], [0], [], {}, {}, depth, 5.0, np.zeros(3))
    model, cfg = _model(40)
    with torch.no_grad():
        model.p["means"].copy_(torch.cat([xy, torch.full((40, 1), 5.0)], 1))
    assert H.floaters(model, sd, cfg) == {"floaters": 0, "floater_frac": 0.0}
    with torch.no_grad():
        model.p["means"][:10, 2] = 4.5
        model.p["logit_opacity"][5:10] = -5.0  # transparent ones are not counted
    f = H.floaters(model, sd, cfg)
    assert f["floaters"] == 5 and f["floater_frac"] == pytest.approx(5 / 35)
