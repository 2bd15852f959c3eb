"""Differentiable 3D Gaussian splatting rasterizer: EWA projection and tile binning, then a
tile-based compositor — the C++ kernel (``icml26/csrc/cpu/splat_cpu.cpp``: projection + binning
``torch.ops.icml26.splat_project_bin/_backward`` and the compositor ``splat_forward/backward``),
its pure torch twin (:func:`project`, :func:`bin_gaussians`, :mod:`icml26.ops._ref.splat`, same tiles),
or gsplat (PyPI ``gsplat``) on CUDA tensors when it is installed (never required).

Model (3DGS, Kerbl et al. 2023, Sec. 4 and Eq. 3; official code graphdeco-inria/gaussian-splatting):
- Sigma = R S S^T R^T from unit quaternions (w, x, y, z) and scales (world units);
- camera-space mean t = W mu + w (world-to-camera ``viewmat``), culled when t_z <= near;
- 2D covariance J W Sigma W^T J^T + 0.3 I (EWA; J with x/z, y/z clamped at 1.3 tan(fov/2));
- screen-space extent: the box of half-width ceil(sqrt(2 ln(255 o) lambda_max)) pixels, beyond
  which o exp(power) < 1/255, so culling to the tiles that box touches changes no pixel
  (gsplat's opacity-aware radius; 3DGS uses 3 sigma, which drops the outer alphas of opaque
  Gaussians);
- binning: a Gaussian goes into every 16x16 tile its box touches; each tile's list is sorted by
  camera depth (ties by index). The kernel and the twin read the same lists.

Pixel coordinates: the centre of column u is at u + 0.5 (``K`` as in icml26.core.data.renders).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch

from icml26.core import ext
from icml26.ops._ref import splat as _ref

FAMILY = "splat"
SOURCES = ["cpu/splat_cpu.cpp"]
TILE = _ref.TILE
BLUR = 0.3
NEAR = 0.01


def backend() -> str:
    """Load (JIT-build if needed) the kernel; "ext-cpu" or "ref"."""
    be = ext.backend(FAMILY)
    return be if be is not None else ext.load(FAMILY, SOURCES, extra_cflags=["-fno-math-errno"])


@dataclass(frozen=True)
class PinholeCamera:
    """A pinhole view. viewmat: (4, 4) world-to-camera (OpenCV axes: x right, y down, z forward);
    fx, fy, cx, cy in pixels; width, height in pixels."""

    width: int
    height: int
    fx: float
    fy: float
    cx: float
    cy: float
    viewmat: torch.Tensor

    @staticmethod
    def from_camera(cam, dtype=torch.float32, device="cpu") -> "PinholeCamera":
        """From an :class:`icml26.core.data.renders.Camera` (K, c2w)."""
        import numpy as np

        w2c = np.linalg.inv(np.asarray(cam.c2w, float))
        K = np.asarray(cam.K, float)
        return PinholeCamera(
            int(cam.width),
            int(cam.height),
            float(K[0, 0]),
            float(K[1, 1]),
            float(K[0, 2]),
            float(K[1, 2]),
            torch.as_tensor(w2c, dtype=dtype, device=device),
        )


class Projected(NamedTuple):
    mean2d: torch.Tensor  # (N, 2) pixels
    conic: torch.Tensor  # (N, 3) inverse 2D covariance (a, b, c)
    depth: torch.Tensor  # (N,) camera z
    radii: torch.Tensor  # (N,) int64 pixels; 0 = culled
    valid: torch.Tensor  # (N,) bool


class RasterOutput(NamedTuple):
    image: torch.Tensor  # (H, W, C)
    alpha: torch.Tensor  # (H, W) = 1 - final transmittance
    mean2d: torch.Tensor  # (N, 2) screen means (retain_grad() on it for densification statistics)
    radii: torch.Tensor  # (N,) int64 pixels, 0 = not drawn
    backend: str


def quat_to_rotmat(q: torch.Tensor) -> torch.Tensor:
    """(N, 4) quaternions (w, x, y, z), normalised here -> (N, 3, 3) rotation matrices."""
    q = q / q.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    w, x, y, z = q.unbind(-1)
    return torch.stack(
        [
            1 - 2 * (y * y + z * z),
            2 * (x * y - w * z),
            2 * (x * z + w * y),
            2 * (x * y + w * z),
            1 - 2 * (x * x + z * z),
            2 * (y * z - w * x),
            2 * (x * z - w * y),
            2 * (y * z + w * x),
            1 - 2 * (x * x + y * y),
        ],
        -1,
    ).reshape(q.shape[:-1] + (3, 3))


def project(
    means: torch.Tensor,
    scales: torch.Tensor,
    quats: torch.Tensor,
    opacities: torch.Tensor,
    camera: PinholeCamera,
    *,
    near: float = NEAR,
    blur: float = BLUR,
) -> Projected:
    """EWA projection of 3D Gaussians (module docstring); differentiable in means, scales, quats.

    means (N, 3) world; scales (N, 3) > 0 world units; quats (N, 4); opacities (N,) in [0, 1]."""
    V = camera.viewmat.to(means)
    R, tr = V[:3, :3], V[:3, 3]
    pc = means @ R.T + tr
    z = pc[:, 2]
    valid = z > near
    zs = torch.where(valid, z, torch.ones_like(z))
    limx = 1.3 * 0.5 * camera.width / camera.fx
    limy = 1.3 * 0.5 * camera.height / camera.fy
    txz = torch.clamp(pc[:, 0] / zs, -limx, limx)
    tyz = torch.clamp(pc[:, 1] / zs, -limy, limy)
    mean2d = torch.stack([camera.fx * pc[:, 0] / zs + camera.cx, camera.fy * pc[:, 1] / zs + camera.cy], -1)
    Rg = quat_to_rotmat(quats)
    M = Rg * scales[:, None, :]  # R S
    cov = M @ M.transpose(1, 2)
    covc = R @ cov @ R.T
    zero = torch.zeros_like(zs)
    J = torch.stack(
        [camera.fx / zs, zero, -camera.fx * txz / zs, zero, camera.fy / zs, -camera.fy * tyz / zs], -1
    ).reshape(-1, 2, 3)
    c2 = J @ covc @ J.transpose(1, 2)
    sxx, sxy, syy = c2[:, 0, 0] + blur, c2[:, 0, 1], c2[:, 1, 1] + blur
    det = sxx * syy - sxy * sxy
    valid = valid & (det > 0)
    dets = torch.where(valid, det, torch.ones_like(det))
    conic = torch.stack([syy / dets, -sxy / dets, sxx / dets], -1)
    with torch.no_grad():
        mid = 0.5 * (sxx + syy)
        lam = mid + torch.sqrt(torch.clamp(mid * mid - dets, min=0.1))
        o = opacities.detach().to(lam)
        k = torch.log(torch.clamp(o * 255.0, min=1.0))
        radii = torch.ceil(torch.sqrt(2.0 * k * lam)).long()
        radii = torch.where(valid & (o >= _ref.ALPHA_MIN) & torch.isfinite(lam), radii, torch.zeros_like(radii))
    return Projected(mean2d, conic, z, radii, valid & (radii > 0))


def bin_gaussians(
    mean2d: torch.Tensor, radii: torch.Tensor, depth: torch.Tensor, width: int, height: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Tile lists: (point_list (M,) int32 Gaussian ids, tile_offsets (tiles + 1,) int64).

    A Gaussian with radius r > 0 goes into every tile that its box [mean - r, mean + r] touches;
    each tile's run is sorted front to back (depth, ties by index). Row-major tiles of 16 px."""
    tx, ty = (width + TILE - 1) // TILE, (height + TILE - 1) // TILE
    with torch.no_grad():
        m = mean2d.detach().double().cpu()
        r = radii.cpu().double()
        n = m.shape[0]
        x0, x1 = torch.floor((m[:, 0] - r) / TILE), torch.floor((m[:, 0] + r) / TILE)
        y0, y1 = torch.floor((m[:, 1] - r) / TILE), torch.floor((m[:, 1] + r) / TILE)
        inside = (r > 0) & (m[:, 0] + r >= 0) & (m[:, 0] - r < width) & (m[:, 1] + r >= 0) & (m[:, 1] - r < height)
        inside &= torch.isfinite(m).all(1)
        x0 = torch.where(inside, x0.clamp(0, tx - 1), torch.zeros_like(x0)).long()
        x1 = torch.where(inside, x1.clamp(0, tx - 1), torch.zeros_like(x1)).long()
        y0 = torch.where(inside, y0.clamp(0, ty - 1), torch.zeros_like(y0)).long()
        y1 = torch.where(inside, y1.clamp(0, ty - 1), torch.zeros_like(y1)).long()
        wdt = x1 - x0 + 1
        cnt = torch.where(inside, wdt * (y1 - y0 + 1), torch.zeros_like(wdt))
        total = int(cnt.sum())
        if total == 0:
            return torch.zeros(0, dtype=torch.int32), torch.zeros(tx * ty + 1, dtype=torch.int64)
        gid = torch.repeat_interleave(torch.arange(n), cnt)
        start = torch.cumsum(cnt, 0) - cnt
        loc = torch.arange(total) - start[gid]
        tid = (y0[gid] + loc // wdt[gid]) * tx + x0[gid] + loc % wdt[gid]
        order = torch.argsort(depth.detach().cpu(), stable=True)
        rank = torch.empty(n, dtype=torch.int64)
        rank[order] = torch.arange(n)
        perm = torch.argsort(tid * n + rank[gid])
        plist = gid[perm].to(torch.int32)
        offsets = torch.zeros(tx * ty + 1, dtype=torch.int64)
        offsets[1:] = torch.cumsum(torch.bincount(tid, minlength=tx * ty), 0)
    return plist, offsets


class _Composite(torch.autograd.Function):
    """The C++ compositor as an autograd function (inputs as the ``_ref`` twin's)."""

    @staticmethod
    def forward(ctx, mean2d, conic, colors, opacities, plist, offsets, width, height):
        img, tfin, ncon = torch.ops.icml26.splat_forward(
            mean2d, conic, colors, opacities, plist, offsets, width, height
        )
        ctx.save_for_backward(mean2d, conic, colors, opacities, plist, offsets, tfin, ncon)
        ctx.size = (width, height)
        return img, 1.0 - tfin

    @staticmethod
    def backward(ctx, g_img, g_alpha):
        mean2d, conic, colors, opacities, plist, offsets, tfin, ncon = ctx.saved_tensors
        w, h = ctx.size
        if g_img is None:
            g_img = torch.zeros(h, w, colors.shape[1], dtype=colors.dtype)
        if g_alpha is None:
            g_alpha = torch.zeros(h, w, dtype=colors.dtype)
        gm, gc, gcol, gop = torch.ops.icml26.splat_backward(
            mean2d, conic, colors, opacities, plist, offsets, w, h, tfin, ncon, g_img.contiguous(), g_alpha.contiguous()
        )
        return gm, gc, gcol, gop, None, None, None, None


class _ProjectBin(torch.autograd.Function):
    """The C++ projection + binning (``torch.ops.icml26.splat_project_bin``; the formulas of
    :func:`project` and the lists of :func:`bin_gaussians`) as an autograd function: mean2d and
    conic are differentiable in means, scales, quats (opacities get no gradient here, as in
    :func:`project`); depth, radii, point list and offsets are not."""

    @staticmethod
    def forward(ctx, means, scales, quats, opacities, viewmat, cam: tuple):
        m2, cn, depth, radii, plist, offsets = torch.ops.icml26.splat_project_bin(
            means, scales, quats, opacities, viewmat, *cam
        )
        ctx.save_for_backward(means, scales, quats, viewmat)
        ctx.cam = cam
        ctx.mark_non_differentiable(depth, radii, plist, offsets)
        return m2, cn, depth, radii, plist, offsets

    @staticmethod
    def backward(ctx, g_m2, g_cn, *_):
        means, scales, quats, viewmat = ctx.saved_tensors
        n = means.shape[0]
        g_m2 = means.new_zeros(n, 2) if g_m2 is None else g_m2.contiguous()
        g_cn = means.new_zeros(n, 3) if g_cn is None else g_cn.contiguous()
        gm, gs, gq = torch.ops.icml26.splat_project_backward(means, scales, quats, viewmat, *ctx.cam, g_m2, g_cn)
        return gm, gs, gq, None, None, None


def project_bin_ext(
    means: torch.Tensor,
    scales: torch.Tensor,
    quats: torch.Tensor,
    opacities: torch.Tensor,
    camera: PinholeCamera,
    *,
    near: float = NEAR,
    blur: float = BLUR,
):
    """:func:`project` + :func:`bin_gaussians` in the C++ kernel (CPU tensors; RuntimeError without
    the kernel). Returns (Projected, point_list, tile_offsets); ``Projected.mean2d`` and ``.conic`` are
    differentiable in means, scales, quats; the radii and lists are those of the torch functions up
    to float rounding of the projection (the binning's own arithmetic is the same)."""
    if backend() == "ref":
        raise RuntimeError(f"the splat C++ kernel is unavailable ({ext.why(FAMILY)})")
    cam = (
        float(camera.fx),
        float(camera.fy),
        float(camera.cx),
        float(camera.cy),
        int(camera.width),
        int(camera.height),
        float(near),
        float(blur),
    )
    V = camera.viewmat.detach().to(device="cpu", dtype=means.dtype).contiguous()
    m2, cn, depth, radii, plist, offsets = _ProjectBin.apply(
        means.contiguous(),
        scales.contiguous(),
        quats.contiguous(),
        opacities.detach().to(means.dtype).contiguous(),
        V,
        cam,
    )
    return Projected(m2, cn, depth, radii, radii > 0), plist, offsets


def composite(mean2d, conic, colors, opacities, plist, offsets, width: int, height: int, *, use: str = "auto"):
    """Tile compositor only (inputs of :func:`icml26.ops._ref.splat.rasterize_tiles`).
    use: "auto" | "ext" (RuntimeError without the kernel) | "ref". Returns (image, alpha, backend)."""
    be = "ref" if use == "ref" else backend()
    if use == "ext" and be == "ref":
        raise RuntimeError(f"the splat C++ kernel is unavailable ({ext.why(FAMILY)})")
    if be != "ref" and mean2d.device.type == "cpu":
        img, alpha = _Composite.apply(
            mean2d.contiguous(),
            conic.contiguous(),
            colors.contiguous(),
            opacities.contiguous(),
            plist,
            offsets,
            int(width),
            int(height),
        )
        return img, alpha, be
    img, alpha = _ref.rasterize_tiles(mean2d, conic, colors, opacities, plist.to(mean2d.device), offsets, width, height)
    return img, alpha, "ref"


def gsplat_available() -> bool:
    """gsplat importable and a CUDA device present (gsplat has no CPU rasterizer)."""
    import importlib.util

    return torch.cuda.is_available() and importlib.util.find_spec("gsplat") is not None


def _rasterize_gsplat(means, scales, quats, colors, opacities, camera: PinholeCamera) -> RasterOutput:
    from gsplat import rasterization

    K = means.new_tensor([[camera.fx, 0, camera.cx], [0, camera.fy, camera.cy], [0, 0, 1]])[None]
    img, alpha, meta = rasterization(
        means,
        quats,
        scales,
        opacities,
        colors,
        camera.viewmat.to(means)[None],
        K,
        camera.width,
        camera.height,
        near_plane=NEAR,
        eps2d=BLUR,
        packed=False,
        radius_clip=0.0,
        rasterize_mode="classic",
    )
    return RasterOutput(
        img[0],
        alpha[0, ..., 0],
        meta["means2d"][0],
        meta["radii"][0].long().reshape(means.shape[0], -1).amax(-1),
        "gsplat",
    )


def rasterize(
    means: torch.Tensor,
    scales: torch.Tensor,
    quats: torch.Tensor,
    colors: torch.Tensor,
    opacities: torch.Tensor,
    camera: PinholeCamera,
    *,
    use: str = "auto",
) -> RasterOutput:
    """Render N 3D Gaussians into one view; differentiable in every float input.

    means (N, 3) world; scales (N, 3) > 0 (world units, not log); quats (N, 4) (w, x, y, z), any
    norm; colors (N, C) any C (e.g. LDR, HDR, depth as extra channels); opacities (N,) in [0, 1];
    camera: :class:`PinholeCamera`. Black background (composite with ``alpha`` yourself).
    use: "auto" (gsplat for CUDA tensors when installed, else the C++ kernel, else the twin),
    "ext", "ref" or "gsplat". Returns :class:`RasterOutput`.
    Raises ValueError on mismatched shapes; RuntimeError when ``use`` names an unavailable path."""
    n = means.shape[0]
    if (
        means.shape != (n, 3)
        or scales.shape != (n, 3)
        or quats.shape != (n, 4)
        or colors.dim() != 2
        or colors.shape[0] != n
        or opacities.shape != (n,)
    ):
        raise ValueError(
            f"rasterize: shapes means {tuple(means.shape)}, scales {tuple(scales.shape)}, quats {tuple(quats.shape)}, "
            f"colors {tuple(colors.shape)}, opacities {tuple(opacities.shape)} do not fit (N,3) (N,3) (N,4) (N,C) (N,)"
        )
    if use == "gsplat" or (use == "auto" and means.is_cuda and gsplat_available()):
        if not gsplat_available():
            raise RuntimeError("gsplat is not installed or no CUDA device is present")
        return _rasterize_gsplat(means, scales, quats, colors, opacities, camera)
    if use != "ref" and means.device.type == "cpu" and backend() != "ref":
        # the kernel path: projection and binning in C++ too
        p, plist, offsets = project_bin_ext(means, scales, quats, opacities, camera)
    else:
        p = project(means, scales, quats, opacities, camera)
        plist, offsets = bin_gaussians(p.mean2d, p.radii, p.depth, camera.width, camera.height)
    img, alpha, be = composite(
        p.mean2d, p.conic, colors, opacities, plist, offsets, camera.width, camera.height, use=use
    )
    return RasterOutput(img, alpha, p.mean2d, p.radii, be)


def footprint(r2_pixels: float, sigma2_pixels: float, opacity: float) -> float:
    """Closed-form alpha of one isotropic 2D Gaussian at squared pixel distance r2 (tests)."""
    a = min(_ref.ALPHA_MAX, opacity * math.exp(-0.5 * r2_pixels / sigma2_pixels))
    return a if a >= _ref.ALPHA_MIN else 0.0
