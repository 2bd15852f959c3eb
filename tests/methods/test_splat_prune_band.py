"""The pixel-footprint floor of the SDF-guided pruning band (Config.sdf_sigma_px; docs/hdr-gs.md)."""

import math

import numpy as np
import torch

from icml26.core.data import renders as R
from icml26.methods.splatting import hdr_gs as H
from icml26.methods.splatting.model import ToneMapper


def _scene_and_model(sigma_px, large_only=False):
    cfg = H.Config(
        init_points=4,
        max_gaussians=16,
        sdf_sigma=0.05,
        sdf_sigma_px=sigma_px,
        sdf_prune_large_only=large_only,
        visibility_gate=False,
    )  # the visibility gate: tests/methods/test_splat_expo_dc.py
    K = np.array([[40.0, 0, 32], [0, 40.0, 32], [0, 0, 1]])
    cams = [R.Camera(64, 64, K, np.eye(4)), R.Camera(64, 64, K, np.eye(4))]  # OpenCV: looking down +z
    sd = H.SceneData("s", cams, [0], [1], {}, {}, {}, 3.0, np.zeros(3))
    means = torch.tensor([[0.0, 0, 2.0], [0.1, 0, 2.0], [0.0, 0, 4.0], [0.0, 0, -1.0]])  # the last: behind the camera
    params = {
        "means": means,
        "log_scales": torch.full((4, 3), -6.0),
        "quats": torch.tensor([[1.0, 0, 0, 0]]).repeat(4, 1),
        "logit_opacity": torch.full((4,), 2.0),
        "log_radiance": torch.zeros(4, 3),
    }
    return H.Model(params, ToneMapper(cfg.tone_hidden), cfg, 3.0), sd, cfg


def test_footprint_and_band():
    model, sd, cfg = _scene_and_model(2.0)
    fp = H.centre_footprint(model, sd)
    torch.testing.assert_close(fp[:3], torch.tensor([2 / 40, 2 / 40, 4 / 40]))  # z / fx
    assert math.isinf(float(fp[3]))
    band = H.prune_band(model, sd, cfg)
    torch.testing.assert_close(band, torch.tensor([0.1, 0.1, 0.2, 0.05]))  # max(0.05, 2 z / fx); unseen: sdf_sigma
    m0, sd0, cfg0 = _scene_and_model(0.0)
    assert H.prune_band(m0, sd0, cfg0) is None  # sdf_sigma_px = 0: the fixed band


def test_band_keeps_a_gaussian_within_two_pixel_footprints():
    """f = 0.15 at z = 2 (footprint 0.05): with s = 0.05, 0.88 - (1 - exp(-4.5)) < tau_p: pruned; with
    the floor s = 0.1, 0.88 - (1 - exp(-1.125)) = 0.21 > tau_p: kept."""
    for px, kept in ((0.0, 0), (2.0, 1)):
        model, sd, cfg = _scene_and_model(px)
        f = torch.tensor([0.15, 0.0, 0.0, 0.0])
        model.grad_cnt[:] = 1
        before = model.p["means"][0].detach().clone()
        H.density_control(model, cfg, True, f, torch.Generator().manual_seed(0), sigma=H.prune_band(model, sd, cfg))
        assert int((model.p["means"].detach() == before).all(1).sum()) >= kept
        if kept == 0:
            assert not (model.p["means"].detach() == before).all(1).any()


def test_sdf_prune_only_large_gaussians_as_gsdf():
    """GSDF's adjust_anchor ANDs the SDF prune mask with "large" (max scale > 0.1 extent) and gives
    centres outside the field no penalty. Far from the surface (f = 1, s = 0.1: exp(-50) ~ 0), a small
    opaque Gaussian is kept and a large one pruned; a small transparent one is kept too (GSDF prunes
    no small Gaussian); a centre no view sees (f = inf) is kept even when large. The earlier reading
    (sdf_prune_large_only = False) prunes every small far one and the unseen one as well."""
    for large_only, want_kept in ((True, [0, 2]), (False, [])):
        model, sd, cfg = _scene_and_model(2.0, large_only)
        with torch.no_grad():
            model.p["log_scales"][1] = math.log(0.5)  # 0.5 > 0.1 x extent 3
            model.p["log_scales"][3] = math.log(0.5)
            model.p["logit_opacity"][2] = -8.0  # opacity 3e-4 < tau_p
        with torch.no_grad():
            model.p["log_radiance"][:, 0] = torch.arange(4.0)  # tag each Gaussian
        f = torch.tensor([1.0, 1.0, 1.0, float("inf")])
        model.grad_cnt[:] = 1  # grad 0: nothing grows
        H.density_control(model, cfg, True, f, torch.Generator().manual_seed(0), sigma=torch.full((4,), 0.1))
        kept = sorted(int(x) for x in model.p["log_radiance"].detach()[:, 0].tolist())
        assert kept == (want_kept + [3] if large_only else want_kept), (large_only, kept)
