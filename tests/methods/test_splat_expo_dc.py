"""Expo-GS's exposure-aware density control beyond GSDF's: the growth term omega_n (1 - |grad f|)
(Config.sdf_grow_eikonal) and GSDF's visibility gate (Config.visibility_gate); docs/hdr-gs.md."""

import math

import numpy as np
import torch

from icml26.methods.splatting import hdr_gs as H
from icml26.methods.splatting.model import ToneMapper


def _model(means, log_scales, logit_opacity, **cfg_kw):
    n = len(means)
    cfg = H.Config(init_points=n, max_gaussians=64, sdf_sigma=0.05, sdf_sigma_px=0.0, **cfg_kw)
    params = {
        "means": torch.as_tensor(means, dtype=torch.float32),
        "log_scales": torch.as_tensor(log_scales, dtype=torch.float32),
        "quats": torch.tensor([[1.0, 0, 0, 0]]).repeat(n, 1),
        "logit_opacity": torch.as_tensor(logit_opacity, dtype=torch.float32),
        "log_radiance": torch.zeros(n, 3),
    }
    m = H.Model(params, ToneMapper(cfg.tone_hidden), cfg, 3.0)
    with torch.no_grad():
        m.p["log_radiance"][:, 0] = torch.arange(float(n))  # tag each Gaussian
    return m, cfg


def _tags(m):
    return sorted(int(x) for x in m.p["log_radiance"].detach()[:, 0].tolist())


def test_grad_norm_of_the_pseudo_sdf_at_the_centres():
    """Two isotropic Gaussians (scale s, opacity a) at distance D on the x axis: at each centre
    d = a (1 + e), e = exp(-D^2 / 2 s^2), |grad d| = a e D / s^2, and f = s sqrt(-2 log d) gives
    |grad f| = s |grad d| / (d sqrt(-2 log d)). A lone Gaussian: f is flat at its centre, |grad f| = 0."""
    s, a, D = 0.1, 0.5, 0.15
    m, _ = _model(
        [[0.0, 0, 0], [D, 0, 0], [10.0, 0, 0]], np.full((3, 3), math.log(s)), np.full(3, math.log(a / (1 - a)))
    )
    e = math.exp(-D * D / (2 * s * s))
    d = a * (1 + e)
    want = s * (a * e * D / s**2) / (d * math.sqrt(-2 * math.log(d)))
    got = H.centre_sdf_grad_norm(m)
    torch.testing.assert_close(got, torch.tensor([want, want, 0.0]), atol=1e-5, rtol=1e-4)
    assert 0.2 < want < 1.0  # a case where the Eikonal residual 1 - |grad f| is neither 0 nor 1


def test_growth_term_omega_n_grows_where_the_sdf_is_not_eikonal():
    """Far from the surface (f = 1, s = 0.1: the omega_s term ~ 0) and a small view-space gradient
    (1e-5 < tau_g = 2e-4): eps_g = 1e-5 + 2e-4 (1 - |grad f|) is 2.1e-4 > tau_g at |grad f| = 0
    (grown: cloned), 1.1e-4 at 0.5 and negative at 2 (not grown). Without the term nothing grows."""
    for eikonal, want in ((True, [0, 0, 1, 2]), (False, [0, 1, 2])):
        m, cfg = _model(
            [[0.0, 0, 2], [0.5, 0, 2], [1.0, 0, 2]], np.full((3, 3), -6.0), np.full(3, 2.0), sdf_grow_eikonal=eikonal
        )
        m.grad_cnt[:] = 100
        m.vis_cnt[:] = 100
        m.grad_acc[:] = 1e-5 * 100
        H.density_control(
            m,
            cfg,
            True,
            torch.ones(3),
            torch.Generator().manual_seed(0),
            sigma=torch.full((3,), 0.1),
            grad_f=torch.tensor([0.0, 0.5, 2.0]),
        )
        assert _tags(m) == want, (eikonal, _tags(m))


def test_growth_term_from_the_field_itself():
    """End to end: three lone Gaussians (|grad f| = 0 at each centre) with the same small gradient
    are all grown through omega_n (1 - |grad f|) computed by centre_sdf_grad_norm."""
    m, cfg = _model([[0.0, 0, 2], [5.0, 0, 2], [10.0, 0, 2]], np.full((3, 3), -6.0), np.full(3, 2.0))
    m.grad_cnt[:] = 100
    m.vis_cnt[:] = 100
    m.grad_acc[:] = 1e-5 * 100
    H.density_control(
        m,
        cfg,
        True,
        torch.ones(3),
        torch.Generator().manual_seed(0),
        sigma=torch.full((3,), 0.1),
        grad_f=H.centre_sdf_grad_norm(m),
    )
    assert _tags(m) == [0, 0, 1, 1, 2, 2]


def test_visibility_gate_rarely_seen_gaussian_neither_grown_nor_pruned():
    """GSDF's adjust_anchor with check_interval = densify_every = 100, success_threshold = 0.8: grow
    only if seen > 40 times, prune only if seen > 80 times since the last check; the counters of the
    Gaussians not checked keep accumulating. 0: near the surface, gradient above tau_g, seen 50 times
    -> cloned, counters reset; 1: the same but seen 30 times -> not grown, counters kept; 2: large
    and far (an SDF prune), seen 90 times -> pruned; 3: the same seen 70 times -> kept, its count kept.
    Without the gate 1 grows and 3 is pruned too."""
    for gate, want in ((True, [0, 0, 1, 3]), (False, [0, 0, 1, 1])):
        ls = np.full((4, 3), -6.0)
        ls[2:] = math.log(0.5)  # > 0.1 x extent 3: large
        m, cfg = _model([[0.0, 0, 2], [0.5, 0, 2], [1.0, 0, 2], [1.5, 0, 2]], ls, np.full(4, 2.0), visibility_gate=gate)
        seen = torch.tensor([50.0, 30.0, 90.0, 70.0])
        m.grad_cnt[:] = seen
        m.vis_cnt[:] = seen
        m.grad_acc[:] = torch.tensor([1e-4, 1e-4, 0.0, 0.0]) * seen
        f = torch.tensor([0.0, 0.0, 1.0, 1.0])
        H.density_control(m, cfg, True, f, torch.Generator().manual_seed(0), sigma=torch.full((4,), 0.1))
        assert _tags(m) == want, (gate, _tags(m))
        tag = m.p["log_radiance"].detach()[:, 0]
        if gate:
            assert float(m.grad_cnt[tag == 0].max()) == 0.0  # checked: reset (the clone starts at 0)
            assert float(m.grad_cnt[tag == 1][0]) == 30.0 and float(m.vis_cnt[tag == 1][0]) == 30.0
            assert float(m.vis_cnt[tag == 3][0]) == 70.0
            assert sorted(m.vis_cnt[tag == 0].tolist()) == [0.0, 50.0]  # 50 < 80: not prune-checked, kept; clone 0
        else:
            assert float(m.grad_cnt.abs().sum()) == 0.0 and float(m.vis_cnt.abs().sum()) == 0.0


def test_visibility_gate_leaves_the_standard_rule_alone():
    """3DGS's rule (HDR-GS; Expo-GS's stage 1) has no visibility gate: a Gaussian seen once with a
    gradient above tau_g grows, with or without the flag."""
    for gate in (True, False):
        m, cfg = _model([[0.0, 0, 2]], np.full((1, 3), -6.0), np.full(1, 2.0), visibility_gate=gate)
        m.grad_cnt[:] = 1
        m.vis_cnt[:] = 1
        m.grad_acc[:] = 3e-4
        H.density_control(m, cfg, False, None, torch.Generator().manual_seed(0))
        assert _tags(m) == [0, 0]


def test_visibility_counter_round_trips_a_checkpoint(tmp_path):
    m, cfg = _model([[0.0, 0, 2], [0.5, 0, 2]], np.full((2, 3), -6.0), np.full(2, 2.0))
    m.vis_cnt[:] = torch.tensor([3.0, 7.0])
    p = tmp_path / "c.safetensors"
    H.save_ckpt(p, m, {"config": H._cfg_json(cfg), "extent": 3.0, "iteration": 1, "train_s": 0.0})
    m2, _ = H.load_ckpt(p)
    torch.testing.assert_close(m2.vis_cnt, torch.tensor([3.0, 7.0]))
    assert m2.cfg.visibility_gate and m2.cfg.sdf_grow_eikonal
