"""Density control for ``icml26 hdr-gs``: 3DGS clone / split / prune, and the SDF-guided rule of
Expo-GS stage 3 (GSDF, Eqs. 13-14: growth + omega_s exp(-f^2 / 2 s^2) + omega_n (1 - |grad f|),
pruning opacity - omega_p (1 - exp(-f^2 / 2 s^2)) on large Gaussians, GSDF's visibility gate),
with f the camera-projected SDF at the centres and s the pixel-footprint band (docs/hdr-gs.md)."""

from __future__ import annotations

import math

import numpy as np
import torch

from icml26.core.data import renders as R
from icml26.methods.splatting.config import Config
from icml26.methods.splatting.data import SceneData
from icml26.methods.splatting.gaussians import Model
from icml26.methods.splatting.model import pseudo_sdf
from icml26.ops.splat import quat_to_rotmat


def _split_clone(model: Model, grow, rng_t):
    """3DGS: clone small Gaussians, split large ones into two (scale / 1.6)."""
    p = model.p
    with torch.no_grad():
        sc = torch.exp(p["log_scales"])
        big = sc.max(1).values > 0.01 * model.extent
        clone, split = grow & ~big, grow & big
        new = {k: p[k].detach()[clone].clone() for k in Model.KEYS}
        if split.any():
            s = sc[split]
            Rm = quat_to_rotmat(p["quats"][split])
            parts = []
            for _ in range(2):
                eps = torch.randn(s.shape, generator=rng_t) * s
                d = {k: p[k].detach()[split].clone() for k in Model.KEYS}
                d["means"] = d["means"] + (Rm @ eps[..., None])[..., 0]
                d["log_scales"] = d["log_scales"] - math.log(1.6)
                parts.append(d)
            keep = ~split
            model.append({k: torch.cat([new[k]] + [q[k] for q in parts]) for k in Model.KEYS})
            keep = torch.cat([keep, torch.ones(model.n - keep.shape[0], dtype=torch.bool)])
            model.select(keep)
        else:
            model.append(new)


def centre_sdf(model: Model, sd: SceneData, depth_maps: dict) -> "torch.Tensor":  # noqa: F821
    """|f| at the centres: mean over the training views seeing a centre of |D(proj mu) - z| with D
    the model's rendered depth (RECON, module docstring); a centre no view sees gets +inf."""
    mu = model.p["means"].detach().double().numpy()
    acc = np.zeros(len(mu))
    cnt = np.zeros(len(mu))
    for i, D in depth_maps.items():
        cam = sd.cams[i]
        uv, z = R.project(mu, cam)
        u, v = np.floor(uv[:, 0]).astype(int), np.floor(uv[:, 1]).astype(int)
        ok = (z > 0.01) & (u >= 0) & (v >= 0) & (u < cam.width) & (v < cam.height)
        d = np.full(len(mu), np.nan)
        d[ok] = np.abs(D[v[ok], u[ok]] - z[ok])
        good = ok & np.isfinite(d)
        acc[good] += d[good]
        cnt[good] += 1
    f = np.where(cnt > 0, acc / np.maximum(cnt, 1), np.inf)
    return torch.as_tensor(f, dtype=torch.float32)


def centre_footprint(model: Model, sd: SceneData) -> "torch.Tensor":  # noqa: F821
    """(N,) scene units: the mean over the training views that see a centre of its pixel footprint
    z / fx (the depth resolution of a one-pixel depth read-out); +inf where no view sees it."""
    mu = model.p["means"].detach().double().numpy()
    acc = np.zeros(len(mu))
    cnt = np.zeros(len(mu))
    for i in sd.train:
        cam = sd.cams[i]
        uv, z = R.project(mu, cam)
        ok = (z > 0.01) & (uv[:, 0] >= 0) & (uv[:, 1] >= 0) & (uv[:, 0] < cam.width) & (uv[:, 1] < cam.height)
        acc[ok] += z[ok] / float(cam.K[0, 0])
        cnt[ok] += 1
    return torch.as_tensor(np.where(cnt > 0, acc / np.maximum(cnt, 1), np.inf), dtype=torch.float32)


def prune_band(model: Model, sd: SceneData, cfg: Config):
    """The per-Gaussian band s (N,) of the SDF-guided density control: max(sdf_sigma,
    sdf_sigma_px x :func:`centre_footprint`) (RECON, Config); None with sdf_sigma_px = 0 (fixed s)."""
    if cfg.sdf_sigma_px <= 0:
        return None
    fp = centre_footprint(model, sd)
    return torch.clamp(cfg.sdf_sigma_px * torch.where(torch.isfinite(fp), fp, torch.zeros_like(fp)), min=cfg.sdf_sigma)


def centre_sdf_grad_norm(model: Model) -> "torch.Tensor":  # noqa: F821
    """|grad f| (N,) of the pseudo-SDF f (model.py ``pseudo_sdf``, the Expo-SDF of stage 2) at the
    Gaussians' centres, by autograd in the query point (the Gaussians held fixed); the Eikonal
    residual 1 - |grad f| is the growth term omega_n (1 - |grad f|) of Eq. 13 (docs/hdr-gs.md).
    Where d(p) saturates at 1 (inside an opaque cluster) f is flat and |grad f| = 0."""
    P = model.p
    with torch.enable_grad():
        mu = P["means"].detach()
        q = mu.clone().requires_grad_(True)
        f = pseudo_sdf(
            q, mu, torch.exp(P["log_scales"].detach()), P["quats"].detach(), torch.sigmoid(P["logit_opacity"].detach())
        )
        (g,) = torch.autograd.grad(f.sum(), q)
    return g.norm(dim=1).detach()


def density_control(model: Model, cfg: Config, sdf_guided: bool, f_centre, rng_t, sigma=None, grad_f=None) -> None:
    """Grow and prune once (module docstring); gradients are screen-space norms in NDC units.
    sigma: (N,) band s per Gaussian (scene units; :func:`prune_band`), None = ``cfg.sdf_sigma``.
    grad_f: (N,) |grad f| at the centres (:func:`centre_sdf_grad_norm`) for the growth term
    omega_n (1 - |grad f|) when ``cfg.sdf_grow_eikonal``; None = the term left out.
    With ``cfg.visibility_gate`` the SDF-guided control checks only the Gaussians seen often enough
    (Config) and resets only their counters; otherwise every counter is reset."""
    with torch.no_grad():
        g = model.grad_acc / model.grad_cnt.clamp_min(1)
        opac = torch.sigmoid(model.p["logit_opacity"].detach())
        s = cfg.sdf_sigma if sigma is None else sigma
        sc = torch.exp(model.p["log_scales"].detach()).max(1).values
        large = sc > 0.1 * model.extent
        guided = sdf_guided and f_centre is not None
        gated = guided and cfg.visibility_gate
        grow_ok = model.grad_cnt > cfg.densify_every * cfg.visibility_success * 0.5 if gated else None
        prune_ok = model.vis_cnt > cfg.densify_every * cfg.visibility_success if gated else None
        if guided:
            near = torch.exp(-(f_centre**2) / (2 * s**2))
            eg = g + cfg.omega_s * near
            if cfg.sdf_grow_eikonal and grad_f is not None:
                eg = eg + cfg.omega_n * (1 - grad_f)
            if cfg.sdf_prune_large_only:
                # GSDF: no SDF penalty outside the field's domain; prune only low-score Gaussians that are also large
                ep = opac - cfg.omega_p * (1 - torch.where(torch.isfinite(f_centre), near, torch.ones_like(near)))
                grow, prune = eg > cfg.tau_g, (ep < cfg.tau_p) & large
            else:
                ep = opac - cfg.omega_p * (1 - near)
                grow, prune = eg > cfg.tau_g, (ep < cfg.tau_p) | large
            grow &= model.grad_cnt > 0
            if gated:
                grow &= grow_ok
                prune &= prune_ok
            score = eg
        else:
            grow, prune = g > cfg.tau_g, (opac < cfg.tau_p) | large
            score = g
        room = cfg.max_gaussians - model.n + int(prune.sum())
        if int(grow.sum()) > max(room, 0):  # keep the largest scores within the cap
            score = torch.where(grow & ~prune, score, torch.full_like(score, -1.0))
            k = max(room, 0) // 2  # a split adds two
            grow = torch.zeros_like(grow)
            if k > 0:
                grow[score.topk(k).indices] = True
        grow &= ~prune
        if gated:  # GSDF resets the counters of the checked Gaussians only
            model.grad_acc[grow_ok] = 0
            model.grad_cnt[grow_ok] = 0
            model.vis_cnt[prune_ok] = 0
        else:
            model.grad_acc.zero_()
            model.grad_cnt.zero_()
            model.vis_cnt.zero_()
        model.select(~prune)
        grow = grow[~prune]
        if grow.any():
            _split_clone(model, grow, rng_t)
