"""Rendering for ``icml26 hdr-gs`` on the rasterizer of icml26.ops.splat: LDR through the learned
tone mapper at an exposure, linear HDR radiance, alpha and depth (``render``); the D-SSIM loss's
differentiable SSIM; writing rendered views as PNG / Radiance HDR / OpenEXR (``render_views``)."""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Iterator

import numpy as np
import torch
import torch.nn.functional as F

from icml26.core.data import hdr_nerf as HN
from icml26.core.data import renders as R
from icml26.core.output import atomic_write_bytes
from icml26.methods.splatting.gaussians import Model
from icml26.ops.splat import PinholeCamera, rasterize


def _cam(c):
    return PinholeCamera.from_camera(c)


def render(model: Model, cam, exposure_s: float | None, *, depth: bool = False, use: str = "auto"):
    """Render one view: dict with ldr (H, W, 3) (when exposure_s), hdr (H, W, 3), alpha, depth
    (alpha-normalised z, when asked), mean2d, radii."""
    p = model.p
    pc = _cam(cam)
    scales = torch.exp(p["log_scales"])
    opac = torch.sigmoid(p["logit_opacity"])
    chans = [torch.exp(p["log_radiance"])]
    if exposure_s is not None:
        chans.insert(0, model.tone(p["log_radiance"] + math.log(exposure_s)))
    if depth:
        V = pc.viewmat
        chans.append((p["means"] @ V[2, :3] + V[2, 3])[:, None])
    cols = torch.cat(chans, 1)
    out = rasterize(p["means"], scales, p["quats"], cols, opac, pc, use=use)
    img = out.image
    r = {"alpha": out.alpha, "mean2d": out.mean2d, "radii": out.radii}
    o = 0
    if exposure_s is not None:
        r["ldr"] = img[..., 0:3]
        o = 3
    r["hdr"] = img[..., o : o + 3]
    if depth:
        r["depth"] = img[..., o + 3] / out.alpha.clamp_min(1e-4)
    return r


def _ssim_torch(a, b):
    """Differentiable SSIM (11x11 Gaussian window, 'valid') of (H, W, 3) images, for the D-SSIM loss."""
    x = torch.arange(11, dtype=a.dtype) - 5
    g = torch.exp(-x * x / (2 * 1.5**2))
    g = g / g.sum()
    w = (g[:, None] * g[None, :])[None, None].repeat(3, 1, 1, 1)
    A, B = a.permute(2, 0, 1)[None], b.permute(2, 0, 1)[None]
    f = lambda z: F.conv2d(z, w, groups=3)  # noqa: E731
    ma, mb = f(A), f(B)
    saa, sbb, sab = f(A * A) - ma * ma, f(B * B) - mb * mb, f(A * B) - ma * mb
    c1, c2 = 0.01**2, 0.03**2
    return (((2 * ma * mb + c1) * (2 * sab + c2)) / ((ma * ma + mb * mb + c1) * (saa + sbb + c2))).mean()


def render_views(model: Model, scene, views: list[int], exposure_s: float | None, out: str | Path) -> Iterator[dict]:
    """Write ``ldr_NNN.png`` (at ``exposure_s``, when given), ``hdr_NNN.hdr`` (linear radiance,
    Radiance RGBE) and ``hdr_NNN.exr`` (the same, OpenEXR float32) for the cameras ``views`` of
    ``scene`` (renders.RenderedScene or hdr_nerf.HdrNerfScene); one result record per view."""
    d = Path(out)
    for i in views:
        with torch.no_grad():
            r = render(model, scene.cameras[i], exposure_s)
        h = d / f"hdr_{i:03d}.hdr"
        hdr = r["hdr"].numpy()
        R.write_hdr(h, hdr)
        e = HN.write_exr(d / f"hdr_{i:03d}.exr", hdr)
        rec = {"kind": "result", "view": i, "hdr": str(h), "exr": str(e), "exposure_s": exposure_s}
        if exposure_s is not None:
            p = d / f"ldr_{i:03d}.png"

            from PIL import Image

            b = io.BytesIO()
            Image.fromarray(np.round(255 * r["ldr"].clamp(0, 1).numpy()).astype(np.uint8)).save(b, format="PNG")
            atomic_write_bytes(p, b.getvalue())
            rec["ldr"] = str(p)
        yield rec
    yield {"kind": "summary", "views": len(views), "out": str(d)}
