"""Gaussian rasterizer: brute-force forward oracle, closed-form footprint, float64 gradcheck of
the kernel and the twin, kernel-vs-twin parity in float32, gsplat parity on CUDA (skips)."""

import math

import numpy as np
import pytest
import torch

from icml26.ops import splat
from icml26.ops._ref import splat as ref


def _cam(w, h, f=None, dtype=torch.float64):
    f = f if f is not None else 0.9 * w
    return splat.PinholeCamera(w, h, f, f, w / 2, h / 2, torch.eye(4, dtype=dtype))


def _scene(n, seed, dtype=torch.float64, spread=0.6, c=3):
    g = torch.Generator().manual_seed(seed)
    means = torch.cat(
        [
            (torch.rand(n, 2, generator=g, dtype=dtype) - 0.5) * 2 * spread,
            2.0 + 2.0 * torch.rand(n, 1, generator=g, dtype=dtype),
        ],
        1,
    )
    scales = 0.03 + 0.12 * torch.rand(n, 3, generator=g, dtype=dtype)
    quats = torch.randn(n, 4, generator=g, dtype=dtype)
    colors = torch.rand(n, c, generator=g, dtype=dtype)
    opac = 0.1 + 0.85 * torch.rand(n, generator=g, dtype=dtype)
    return means, scales, quats, colors, opac


def _kernel():
    if splat.backend() == "ref":
        pytest.skip("the splat C++ kernel does not build here")


@pytest.mark.parametrize("use", ["ref", "ext"])
def test_forward_matches_brute_force(use):
    if use == "ext":
        _kernel()
    W, H = 37, 21  # not multiples of the 16-px tile
    cam = _cam(W, H)
    means, scales, quats, colors, opac = _scene(40, 0)
    out = splat.rasterize(means, scales, quats, colors, opac, cam, use=use)
    p = splat.project(means, scales, quats, opac, cam)
    img, alpha = ref.rasterize_brute_force(p.mean2d, p.conic, colors, opac, p.depth, p.valid, W, H)
    assert out.backend == ("ref" if use == "ref" else "ext-cpu")
    assert alpha.max() > 0.9 and (alpha < 1e-6).mean() > 0.01  # the scene covers some pixels, not all
    np.testing.assert_allclose(out.image.detach().numpy(), img, atol=1e-10)
    np.testing.assert_allclose(out.alpha.detach().numpy(), alpha, atol=1e-10)


@pytest.mark.parametrize("use", ["ref", "ext"])
def test_single_gaussian_closed_form_footprint(use):
    if use == "ext":
        _kernel()
    W, H, f, z, s, o = 48, 40, 40.0, 2.0, 0.1, 0.8
    cam = _cam(W, H, f)
    # an isotropic Gaussian on the optical axis: sigma^2 = (f s / z)^2 + 0.3 pixels^2
    means = torch.tensor([[0.0, 0.0, z]], dtype=torch.float64)
    out = splat.rasterize(
        means,
        torch.full((1, 3), s, dtype=torch.float64),
        torch.tensor([[1.0, 0, 0, 0]], dtype=torch.float64),
        torch.tensor([[1.0, 0.5, 0.25]], dtype=torch.float64),
        torch.tensor([o], dtype=torch.float64),
        cam,
        use=use,
    )
    s2 = (f * s / z) ** 2 + splat.BLUR
    want = np.array(
        [[splat.footprint((u + 0.5 - W / 2) ** 2 + (v + 0.5 - H / 2) ** 2, s2, o) for u in range(W)] for v in range(H)]
    )
    np.testing.assert_allclose(out.alpha.detach().numpy(), want, atol=1e-12)
    np.testing.assert_allclose(out.image[..., 1].detach().numpy(), 0.5 * want, atol=1e-12)
    # the footprint ends where o exp(-r^2 / 2 sigma^2) = 1/255
    edge = math.sqrt(2 * s2 * math.log(255 * o))
    assert want[H // 2, W // 2] == pytest.approx(o * math.exp(-0.25 / s2))
    assert (want > 0).sum() == pytest.approx(math.pi * edge**2, rel=0.08)
    # a rotated anisotropic one: sigma_x = f sx / z along the image x axis after a 90 degree turn about z
    q = torch.tensor([[math.cos(math.pi / 4), 0, 0, math.sin(math.pi / 4)]], dtype=torch.float64)
    out2 = splat.rasterize(
        means,
        torch.tensor([[0.05, 0.15, 0.01]], dtype=torch.float64),
        q,
        torch.ones(1, 1, dtype=torch.float64),
        torch.tensor([o], dtype=torch.float64),
        cam,
        use=use,
    )
    sx2, sy2 = (f * 0.15 / z) ** 2 + 0.3, (f * 0.05 / z) ** 2 + 0.3
    want2 = np.array(
        [
            [
                splat.footprint(
                    0.0, 1.0, o * math.exp(-0.5 * ((u + 0.5 - W / 2) ** 2 / sx2 + (v + 0.5 - H / 2) ** 2 / sy2))
                )
                for u in range(W)
            ]
            for v in range(H)
        ]
    )
    np.testing.assert_allclose(out2.alpha.detach().numpy(), want2, atol=1e-12)


@pytest.mark.parametrize("use,fast", [("ref", True), ("ext", True), pytest.param("ext", False, marks=pytest.mark.slow)])
def test_gradcheck_float64(use, fast):
    if use == "ext":
        _kernel()
    W, H = 10, 8
    cam = _cam(W, H, 9.0)
    means, scales, quats, colors, opac = _scene(5, 3, spread=0.5)
    scales = scales * 2
    opac = opac.clamp(max=0.8)  # away from the 0.99 cap (a kink)
    args = [t.clone().requires_grad_(True) for t in (means, scales, quats, colors, opac)]

    def f(m, s, q, c, o):
        r = splat.rasterize(m, s, q, c, o, cam, use=use)
        return r.image, r.alpha

    assert torch.autograd.gradcheck(f, args, eps=1e-6, atol=1e-6, rtol=1e-4, fast_mode=fast)


def test_kernel_matches_twin_float32():
    _kernel()
    W, H = 48, 32
    cam = _cam(W, H, dtype=torch.float32)
    tensors = [t.float().requires_grad_(True) for t in _scene(150, 7, dtype=torch.float64, spread=0.9)]
    outs, grads = [], []
    for use in ("ext", "ref"):
        for t in tensors:
            t.grad = None
        r = splat.rasterize(*tensors, cam, use=use)
        w = torch.linspace(-1, 1, W * H * 3).reshape(H, W, 3)
        ((r.image * w).sum() + (r.alpha**2).sum()).backward()
        outs.append((r.image.detach(), r.alpha.detach()))
        grads.append([t.grad.clone() for t in tensors])
    assert outs[0][1].max() > 0.99
    torch.testing.assert_close(outs[0][0], outs[1][0], atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(outs[0][1], outs[1][1], atol=2e-5, rtol=1e-4)
    for a, b in zip(*grads):
        scale = b.abs().max().item()
        assert scale > 0
        torch.testing.assert_close(a, b, atol=1e-4 * scale, rtol=1e-3)


def test_binning_lists_every_touched_tile_front_to_back():
    W, H = 40, 33
    m2 = torch.tensor([[5.0, 5.0], [20.0, 17.0], [39.0, 32.0], [-30.0, 5.0]])
    radii = torch.tensor([3, 10, 1, 5])
    depth = torch.tensor([2.0, 1.0, 3.0, 1.0])
    plist, off = splat.bin_gaussians(m2, radii, depth, W, H)
    tiles = {t: plist[off[t] : off[t + 1]].tolist() for t in range(len(off) - 1)}
    assert tiles[0] == [1, 0]  # both touch tile 0; Gaussian 1 is nearer
    assert 3 not in plist.tolist()  # off screen
    assert tiles[8] == [2]  # tile (2, 2)
    assert sum(len(v) for v in tiles.values()) == 1 + 4 + 2  # (2, 1) and (2, 2) for Gaussian 2


def test_gsplat_parity_on_cuda():
    if not splat.gsplat_available():
        pytest.skip("gsplat runs only on CUDA with PyPI gsplat installed")
    W, H = 64, 48
    cam = _cam(W, H, dtype=torch.float32)
    t = [x.float() for x in _scene(200, 5)]
    a = splat.rasterize(*t, cam, use="ext" if splat.backend() != "ref" else "ref")
    camc = splat.PinholeCamera(W, H, cam.fx, cam.fy, cam.cx, cam.cy, cam.viewmat.cuda())
    b = splat.rasterize(*[x.cuda() for x in t], camc, use="gsplat")
    assert (a.image - b.image.cpu()).abs().mean() < 5e-3


def _posed_cam(W, H, dtype):
    """A rotated, translated, non-square camera (the C++ projection must use every viewmat entry)."""
    th = 0.3
    V = torch.eye(4, dtype=dtype)
    V[:3, :3] = torch.tensor(
        [[math.cos(th), 0, math.sin(th)], [0, 1, 0], [-math.sin(th), 0, math.cos(th)]], dtype=dtype
    )
    V[:3, 3] = torch.tensor([0.1, -0.2, 0.3], dtype=dtype)
    return splat.PinholeCamera(W, H, 0.9 * W, 1.0 * W, W / 2 + 1, H / 2 - 2, V)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_cpp_projection_and_binning_match_torch(dtype):
    """splat_project_bin against project() + bin_gaussians() (values, radii, tile lists) and its
    backward against torch autograd of project(), with Gaussians behind the camera (culled) and
    far off axis (the clamped Jacobian) in the scene."""
    _kernel()
    W, H = 48, 32
    cam = _posed_cam(W, H, dtype)
    means, scales, quats, colors, opac = [x.to(dtype) for x in _scene(300, 7, spread=1.5)]
    means[:10, 2] = -1.0  # behind the camera
    means[10:20, 0] = 6.0  # beyond the 1.3 tan(fov/2) clamp
    opac[20:25] = 0.002  # below 1/255: radius 0
    means, scales, quats = [x.clone().requires_grad_(True) for x in (means, scales, quats)]
    p = splat.project(means, scales, quats, opac, cam)
    pl, off = splat.bin_gaussians(p.mean2d, p.radii, p.depth, W, H)
    q, pl2, off2 = splat.project_bin_ext(means, scales, quats, opac, cam)
    assert (~p.valid[:10]).all() and (q.radii[:10] == 0).all() and (q.radii[20:25] == 0).all()
    assert int(p.valid.sum()) > 200 and pl.numel() > 300
    tol = dict(atol=1e-12, rtol=1e-10) if dtype == torch.float64 else dict(atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(q.mean2d, p.mean2d, **tol)
    torch.testing.assert_close(q.conic, p.conic, **tol)
    torch.testing.assert_close(q.depth, p.depth, **tol)
    assert torch.equal(q.radii, p.radii)
    assert torch.equal(pl2, pl) and torch.equal(off2, off)
    g = torch.Generator().manual_seed(1)
    gm, gc = torch.randn(300, 2, generator=g, dtype=dtype), torch.randn(300, 3, generator=g, dtype=dtype)
    want = torch.autograd.grad((p.mean2d * gm).sum() + (p.conic * gc).sum(), [means, scales, quats])
    got = torch.autograd.grad((q.mean2d * gm).sum() + (q.conic * gc).sum(), [means, scales, quats])
    for a, b in zip(got, want):
        scale = b.abs().max().item()
        assert scale > 0
        torch.testing.assert_close(a, b, atol=(1e-12 if dtype == torch.float64 else 1e-5) * scale, rtol=1e-4)


def test_cpp_projection_gradcheck_float64():
    _kernel()
    cam = _posed_cam(12, 10, torch.float64)
    means, scales, quats, colors, opac = _scene(6, 4, spread=0.8)
    means[0, 0] = 4.0  # clamped Jacobian
    args = [t.clone().requires_grad_(True) for t in (means, scales, quats)]

    def f(m, s, q):
        p, _, _ = splat.project_bin_ext(m, s, q, opac, cam)
        return p.mean2d, p.conic

    assert torch.autograd.gradcheck(f, args, eps=1e-6, atol=1e-6, rtol=1e-4)


def test_kernel_path_dead_chunks_and_many_channels_match_twin():
    """float32 kernel vs twin on a scene dense enough that most pixels stop early (the forward's
    and backward's skipped 8-pixel chunks) with 7 channels (as the training renders)."""
    _kernel()
    W, H = 32, 16
    cam = _cam(W, H, dtype=torch.float32)
    m, s, q, c, o = _scene(250, 11, spread=0.8, c=7)
    o = 0.5 + 0.45 * o
    tensors = [t.float().requires_grad_(True) for t in (m, s * 3, q, c, o)]
    outs, grads = [], []
    for use in ("ext", "ref"):
        for t in tensors:
            t.grad = None
        r = splat.rasterize(*tensors, cam, use=use)
        wgt = torch.linspace(-1, 1, W * H * 7).reshape(H, W, 7)
        ((r.image * wgt).sum() + (r.alpha**2).sum()).backward()
        outs.append((r.image.detach(), r.alpha.detach()))
        grads.append([t.grad.clone() for t in tensors])
    assert (outs[1][1] > 1 - 2e-4).float().mean() > 0.5  # most pixels saturate before their list ends
    torch.testing.assert_close(outs[0][0], outs[1][0], atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(outs[0][1], outs[1][1], atol=2e-5, rtol=1e-4)
    for a, b in zip(*grads):
        scale = b.abs().max().item()
        assert scale > 0
        torch.testing.assert_close(a, b, atol=1e-4 * scale, rtol=1e-3)


def test_kernel_gradients_repeat_bit_for_bit_with_two_threads():
    """Per-thread gradient buffers with a static tile schedule: the same call gives the same bits."""
    _kernel()
    W, H = 64, 48
    cam = _cam(W, H, dtype=torch.float32)
    tensors = [t.float().requires_grad_(True) for t in _scene(400, 9, spread=0.9)]
    nth = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        grads = []
        for _ in range(4):
            for t in tensors:
                t.grad = None
            r = splat.rasterize(*tensors, cam, use="ext")
            (r.image.square().sum() + r.alpha.sum()).backward()
            grads.append([t.grad.clone() for t in tensors])
    finally:
        torch.set_num_threads(nth)
    for g in grads[1:]:
        for a, b in zip(g, grads[0]):
            assert torch.equal(a, b)
