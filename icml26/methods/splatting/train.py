"""Training loop of ``icml26 hdr-gs`` (one method on one scene): Expo-GS's three stages
(irradiance, geometry, joint) or HDR-GS's single one; LDR loss 0.8 L1 + 0.2 D-SSIM (+ the
optional mu-law HDR term), Expo-SDF loss weighted by exposure reliability, the disk loss;
step records, checkpoints every ``ckpt_every`` iterations, then the evaluation record."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Iterator

import numpy as np
import torch

from icml26.core.diverge import Diverged, check, check_params, diverged_fields, warn
from icml26.core.progress import progress
from icml26.methods.splatting.config import Config
from icml26.methods.splatting.config import cfg_json as _cfg_json
from icml26.methods.splatting.data import SceneData, init_points
from icml26.methods.splatting.density import centre_sdf, centre_sdf_grad_norm, density_control, prune_band
from icml26.methods.splatting.evaluate import evaluate
from icml26.methods.splatting.gaussians import Model, _make_tone, export_ply, load_ckpt, save_ckpt
from icml26.methods.splatting.model import pseudo_sdf, reliability
from icml26.methods.splatting.render import _cam, _ssim_torch, render

METRICS = ("psnr_ldr_oe", "ssim_ldr_oe", "psnr_ldr_ne", "ssim_ldr_ne", "psnr_hdr", "psnr_hdr_predmax", "ssim_hdr")


def _stage(it: int, cfg: Config) -> int:
    a = int(round(cfg.iters * cfg.stage_fractions[0]))
    b = a + int(round(cfg.iters * cfg.stage_fractions[1]))
    return 1 if it < a else (2 if it < b else 3)


def init_model(sd: SceneData, cfg: Config, seed: int) -> Model:
    rng = np.random.default_rng([seed, 7])
    pts = init_points(sd, cfg, rng)
    n = len(pts)
    torch.manual_seed(seed)
    tree_d = torch.cdist(
        torch.as_tensor(pts[: min(n, 4000)], dtype=torch.float32), torch.as_tensor(pts, dtype=torch.float32)
    )
    nn3 = tree_d.topk(4, largest=False).values[:, 1:].mean(1)
    s0 = float(nn3.median()) if len(nn3) else 0.01 * sd.extent
    # initial colour: radiance of a mid-grey pixel at the middle training exposure (the response is learned)
    tmid = sorted(cfg.train_exposures)[len(cfg.train_exposures) // 2]
    params = {
        "means": torch.as_tensor(pts, dtype=torch.float32),
        "log_scales": torch.full((n, 3), math.log(max(s0, 1e-4))),
        "quats": torch.tensor([[1.0, 0, 0, 0]]).repeat(n, 1),
        "logit_opacity": torch.full((n,), math.log(0.1 / 0.9)),
        "log_radiance": torch.full((n, 3), math.log(0.2 / tmid)),
    }
    return Model(params, _make_tone(cfg), cfg, sd.extent)


def train_one(
    sd: SceneData,
    cfg: Config,
    method: str,
    *,
    seed: int,
    ckpt: Path | None,
    resume: bool,
    stop_after_iters: int | None = None,
) -> Iterator[dict]:
    """Train ``method`` on one scene; yield step records, then a result record (evaluation)."""
    use_sdf = method != "hdr-gs"
    use_rel = method != "expo-gs-norel"
    sdf_dc = method in ("expo-gs", "expo-gs-norel")
    model, start, spent = None, 0, 0.0
    if resume and ckpt is not None and ckpt.is_file():
        model, meta = load_ckpt(ckpt, cfg)
        start, spent = int(meta["iteration"]), float(meta["train_s"])
    if model is None:
        model = init_model(sd, cfg, seed)
    pairs = [(t, i) for i in sd.train for t in cfg.train_exposures]
    gt_t = {k: torch.as_tensor(v) for k, v in sd.ldr.items()}
    rel_t = {k: reliability(v) for k, v in gt_t.items()}
    hdr_t = {i: torch.as_tensor(sd.hdr[i]) for i in sd.train if i in sd.hdr}
    hmax = {i: float(sd.hdr[i].max()) or 1.0 for i in sd.train if i in sd.hdr}
    depth_maps: dict = {}
    f_centre = None
    t0 = time.perf_counter()
    end = cfg.iters if stop_after_iters is None else min(cfg.iters, start + stop_after_iters)
    failed = None
    with progress(end - start, f"hdr-gs {method} {sd.name}") as bar:
        try:
            for it in range(start, end):
                stage = _stage(it, cfg)
                rng = np.random.default_rng([seed, it, 11])
                rng_t = torch.Generator().manual_seed(int(rng.integers(1 << 62)))
                t, i = pairs[int(rng.integers(len(pairs)))]
                geo = use_sdf and stage >= 2
                r = render(model, sd.cams[i], t, depth=geo)
                r["mean2d"].retain_grad()
                gt = gt_t[(t, i)]
                pred = r["ldr"]
                loss = 0.8 * (pred - gt).abs().mean() + 0.2 * (1 - _ssim_torch(pred, gt))
                if cfg.hdr_weight > 0:
                    mu = lambda x: torch.log1p(5000 * x.clamp_min(0)) / math.log(5001)  # noqa: E731
                    loss = loss + cfg.hdr_weight * (mu(r["hdr"] / hmax[i]) - mu(hdr_t[i] / hmax[i])).abs().mean()
                lsdf = torch.zeros(())
                if geo:
                    w = 0.5 if stage == 3 else 1.0
                    vis = torch.nonzero(r["radii"] > 0).squeeze(1)
                    if len(vis) > 0:
                        j = vis[torch.randint(len(vis), (cfg.sdf_samples,), generator=rng_t)]
                        P = model.p
                        sc = torch.exp(P["log_scales"])
                        from icml26.ops.splat import quat_to_rotmat

                        eps = torch.randn((len(j), 3), generator=rng_t).clamp(-2, 2)
                        pts = P["means"][j] + (quat_to_rotmat(P["quats"][j]) @ (sc[j] * eps)[..., None])[..., 0]
                        pc = _cam(sd.cams[i])
                        V = pc.viewmat
                        cp = pts @ V[:3, :3].T + V[:3, 3]
                        z = cp[:, 2]
                        u = (pc.fx * cp[:, 0] / z.clamp_min(1e-3) + pc.cx).detach()
                        v = (pc.fy * cp[:, 1] / z.clamp_min(1e-3) + pc.cy).detach()
                        ui, vi = u.floor().long(), v.floor().long()
                        ok = (z > 0.01) & (ui >= 0) & (vi >= 0) & (ui < pc.width) & (vi < pc.height)
                        ok &= r["alpha"].detach()[vi.clamp(0, pc.height - 1), ui.clamp(0, pc.width - 1)] > 0.5
                        if ok.any():
                            D = r["depth"].detach()[vi[ok], ui[ok]]
                            fhat = D - z[ok]
                            f = pseudo_sdf(pts[ok], P["means"], sc, P["quats"], torch.sigmoid(P["logit_opacity"]))
                            wr = rel_t[(t, i)][vi[ok], ui[ok]] if use_rel else torch.ones_like(D)
                            lsdf = (wr * (f - fhat.abs()).abs()).mean() / (0.1 * sd.extent)
                            loss = loss + w * cfg.lambda_sdf * lsdf
                    ldisk = torch.exp(model.p["log_scales"]).min(1).values.mean() / (0.01 * sd.extent)
                    loss = loss + w * cfg.lambda_disk * ldisk
                check(it + 1, loss=loss)
                loss.backward()
                with torch.no_grad():
                    g = r["mean2d"].grad
                    if g is not None:
                        seen = r["radii"] > 0
                        gn = (g * torch.tensor([sd.cams[i].width / 2.0, sd.cams[i].height / 2.0])).norm(dim=1)
                        model.grad_acc[seen] += gn[seen]
                        model.grad_cnt[seen] += 1
                        model.vis_cnt[seen] += 1
                model.step()
                check_params(it + 1, model.p.values(), "Gaussian parameters")
                bar.advance(1, loss=float(loss.detach()), gaussians=model.n)
                done = it + 1
                densify = stage != 2 and done >= cfg.densify_from and done % cfg.densify_every == 0 and done < cfg.iters
                if densify:
                    guided = sdf_dc and stage == 3
                    if guided and (f_centre is None or done % cfg.sdf_refresh == 0 or not depth_maps):
                        with torch.no_grad():
                            depth_maps = {
                                k: render(model, sd.cams[k], None, depth=True)["depth"].numpy() for k in sd.train
                            }
                    f_centre = centre_sdf(model, sd, depth_maps) if guided else None
                    gf = centre_sdf_grad_norm(model) if guided and cfg.sdf_grow_eikonal else None
                    density_control(
                        model,
                        cfg,
                        guided,
                        f_centre,
                        rng_t,
                        sigma=prune_band(model, sd, cfg) if guided else None,
                        grad_f=gf,
                    )
                if cfg.opacity_reset_every and done % cfg.opacity_reset_every == 0 and done < cfg.iters:
                    with torch.no_grad():
                        model.p["logit_opacity"].clamp_(max=math.log(0.01 / 0.99))
                if done % cfg.log_every == 0 or done == cfg.iters:
                    yield {
                        "kind": "step",
                        "method": method,
                        "scene": sd.name,
                        "iteration": done,
                        "stage": stage,
                        "loss": float(loss.detach()),
                        "sdf_loss": float(lsdf.detach()),
                        "gaussians": model.n,
                    }
                if ckpt is not None and (done % cfg.ckpt_every == 0 or done == end):
                    save_ckpt(
                        ckpt,
                        model,
                        {
                            "config": _cfg_json(cfg),
                            "method": method,
                            "scene": sd.name,
                            "iteration": done,
                            "train_s": spent + time.perf_counter() - t0,
                            "extent": sd.extent,
                            "adam_step": model.step_n,
                            "seed": seed,
                        },
                    )
        except Diverged as e:
            failed = e

    train_s = spent + time.perf_counter() - t0
    if failed is not None:
        warn(failed, f"hdr-gs {method} {sd.name}")
        yield {
            "kind": "result",
            "method": method,
            "scene": sd.name,
            **diverged_fields(failed),
            **{k: None for k in METRICS},
            "gaussians": model.n,
            "train_s": train_s,
            "iters": cfg.iters,
            "init": sd.init_source,
        }
        return
    if end < cfg.iters:
        return
    ply = {}
    if ckpt is not None:  # the trained Gaussians for 3DGS viewers, at the middle training exposure
        tmid = sorted(cfg.train_exposures)[len(cfg.train_exposures) // 2]
        ply = {"ply": str(export_ply(model, ckpt.with_suffix(".ply"), float(tmid)))}
    yield {
        "kind": "result",
        **evaluate(model, sd, cfg),
        "method": method,
        "scene": sd.name,
        "gaussians": model.n,
        "train_s": train_s,
        "iters": cfg.iters,
        "init": sd.init_source,
        **ply,
        **diverged_fields(None),
    }
