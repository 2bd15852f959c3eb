"""Evaluation of ``icml26 hdr-gs`` on the test views: LDR PSNR / SSIM at the training exposures
(OE) and at unseen ones (NE), HDR PSNR / SSIM (metrics.py), and floaters against the true
surface depth when the scene has it."""

from __future__ import annotations

import numpy as np
import torch

from icml26.core.data import renders as R
from icml26.methods.splatting import metrics as M
from icml26.methods.splatting.config import Config
from icml26.methods.splatting.data import SceneData
from icml26.methods.splatting.gaussians import Model
from icml26.methods.splatting.render import render


def floaters(model: Model, sd: SceneData, cfg: Config) -> dict:
    """Gaussians (opacity >= floater_min_opacity) in front of the true (POV-Ray) surface by more
    than floater_band in at least one view that sees them: count and fraction. The surface depth
    at a centre's pixel is the minimum over its 3x3 neighbourhood (at 48-64 px one pixel of a
    grazing floor or an occlusion edge spans more than the band)."""
    from scipy.ndimage import minimum_filter

    if not sd.depth:
        return {}
    with torch.no_grad():
        op = torch.sigmoid(model.p["logit_opacity"]).numpy()
        mu = model.p["means"].detach().double().numpy()
    sel = op >= cfg.floater_min_opacity
    fl = np.zeros(len(mu), bool)
    for i, D in sd.depth.items():
        cam = sd.cams[i]
        uv, z = R.project(mu, cam)
        u, v = np.floor(uv[:, 0]).astype(int), np.floor(uv[:, 1]).astype(int)
        ok = (z > 0.01) & (u >= 0) & (v >= 0) & (u < cam.width) & (v < cam.height)
        front = np.zeros(len(mu), bool)
        Dm = minimum_filter(np.where(np.isfinite(D), D, 1e30), size=3, mode="nearest")
        front[ok] = z[ok] < Dm[v[ok], u[ok]] - cfg.floater_band
        fl |= front & sel
    return {"floaters": int(fl.sum()), "floater_frac": float(fl.sum() / max(1, sel.sum()))}


def evaluate(model: Model, sd: SceneData, cfg: Config) -> dict:
    """The protocol's metrics on the test views (module docstring of metrics.py)."""
    oe, ne, hd = [], [], []
    with torch.no_grad():
        for i in sd.test:
            for group, ts in ((oe, cfg.test_exposures_oe), (ne, cfg.test_exposures_ne)):
                for t in ts:
                    pred = render(model, sd.cams[i], t)["ldr"].clamp(0, 1).numpy()
                    gt = sd.ldr[(t, i)]
                    group.append((M.psnr(pred, gt), M.ssim(pred, gt)))
            if i in sd.hdr:
                h = render(model, sd.cams[i], None)["hdr"].numpy()
                hd.append(M.hdr_metrics(h, sd.hdr[i]))
    out = {
        "psnr_ldr_oe": float(np.mean([a for a, _ in oe])) if oe else None,
        "ssim_ldr_oe": float(np.mean([b for _, b in oe])) if oe else None,
        "psnr_ldr_ne": float(np.mean([a for a, _ in ne])) if ne else None,
        "ssim_ldr_ne": float(np.mean([b for _, b in ne])) if ne else None,
        # None without HDR ground truth (HDR-NeRF's real scenes): LDR metrics only
        "psnr_hdr": float(np.mean([d["psnr_hdr"] for d in hd])) if hd else None,
        "psnr_hdr_predmax": float(np.mean([d["psnr_hdr_predmax"] for d in hd])) if hd else None,
        "ssim_hdr": float(np.mean([d["ssim_hdr"] for d in hd])) if hd else None,
        "test_views": len(sd.test),
    }
    out.update(floaters(model, sd, cfg))
    return out


LPIPS_NOTE = "lpips_* not reported: no LPIPS network (AlexNet weights) ships offline"
