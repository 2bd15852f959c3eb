"""``icml26 hdr-gs``: Expo-GS (Song et al., ICML 2026, PMLR 306; no arXiv id, no official code)
and an HDR-GS-style baseline (Cai et al., NeurIPS 2024) on multi-exposure multi-view images.

Methods (``Config.methods``): ``expo-gs`` (stage 1 irradiance field: HDR-GS log-radiance
Gaussians + the global tone mapper; stage 2 geometry: the Expo-SDF pseudo-SDF supervised by
rendered depth weighted by exposure reliability, plus the disk loss; stage 3 joint training with
SDF-guided density control, GSDF Eqs. 13-14), ``hdr-gs`` (the same rasterizer and tone mapper,
3DGS density control, no Expo-SDF), ``expo-gs-norel`` (reliability E = 1, the paper's "vanilla
SDF") and ``expo-gs-nosdfdc`` (3DGS density control in stage 3).

The pieces: config.py (settings), data.py (scene folders, initial points), gaussians.py (state,
checkpoints, .ply export), render.py, density.py, train.py, evaluate.py; this module runs every
method on every scene (``run``). What is RECON (stage lengths for a CPU budget, loss weights,
thresholds, the pixel-footprint pruning band) and why: docs/hdr-gs.md.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Iterator

import numpy as np
import torch

from icml26.core.output import previous_results
from icml26.methods.splatting.config import METHODS, Config, config_from_dict  # noqa: F401
from icml26.methods.splatting.config import cfg_json as _cfg_json  # noqa: F401
from icml26.methods.splatting.data import SceneData, init_points, load_scene, open_scene, scene_folders  # noqa: F401
from icml26.methods.splatting.density import (  # noqa: F401
    centre_footprint,
    centre_sdf,
    centre_sdf_grad_norm,
    density_control,
    prune_band,
)
from icml26.methods.splatting.evaluate import LPIPS_NOTE, evaluate, floaters  # noqa: F401
from icml26.methods.splatting.gaussians import Model, load_ckpt, save_ckpt  # noqa: F401
from icml26.methods.splatting.render import render, render_views  # noqa: F401
from icml26.methods.splatting.scenes import make_scene
from icml26.methods.splatting.train import init_model, train_one  # noqa: F401


def prepare_scenes(cfg: Config, data: str | Path | None, out: str | Path | None, seed: int) -> list[Path]:
    """The scene folders to train on: under ``data``, or rendered with POV-Ray into
    ``out/scenes`` (a temporary folder without ``out``)."""
    if data is not None:
        return scene_folders(data)

    base = Path(out) / "scenes" if out is not None else Path(tempfile.mkdtemp(prefix="icml26-hdrgs-"))
    folders = []
    for k in range(cfg.scenes):
        d = base / f"scene{seed + k:03d}"
        if not (d / "cameras.json").is_file():
            make_scene(d, seed + k, views=cfg.views, size=cfg.size)
        folders.append(d)
    return folders


def run(
    cfg: Config,
    *,
    seed: int = 0,
    data: str | Path | None = None,
    out: str | Path | None = None,
    resume: bool = False,
    previous: list[dict] | None = None,
    folders: list[Path] | None = None,
) -> Iterator[dict]:
    """Train every method on every scene; yield step records, one result per (method, scene),
    then a summary (per-method means over scenes)."""
    torch.set_num_threads(max(1, torch.get_num_threads()))
    folders = folders if folders is not None else prepare_scenes(cfg, data, out, seed)
    done = previous_results(previous, "method", "scene")
    results = []
    for f in folders:
        sd = load_scene(f, cfg)
        for method in cfg.methods:
            key = (method, sd.name)
            if key in done:
                for r in previous or ():
                    if r.get("kind") == "step" and r.get("method") == method and r.get("scene") == sd.name:
                        yield r
                results.append(done[key])
                yield done[key]
                continue
            ck = Path(out) / "ckpt" / f"{sd.name}-{method}.safetensors" if out is not None else None
            # --resume: the step records the interrupted run wrote for this pair are kept (replayed
            # in their order); training continues from the checkpoint and skips their iterations
            yield from (
                r
                for r in previous or ()
                if r.get("kind") == "step" and r.get("method") == method and r.get("scene") == sd.name
            )
            for r in train_one(sd, cfg, method, seed=seed, ckpt=ck, resume=resume):
                if r["kind"] == "result":
                    if ck is not None:
                        r["ckpt"] = str(ck)
                    results.append(r)
                elif (
                    previous
                    and r["kind"] == "step"
                    and any(
                        p.get("kind") == "step"
                        and p.get("method") == method
                        and p.get("scene") == sd.name
                        and p.get("iteration") == r["iteration"]
                        for p in previous
                    )
                ):
                    continue
                yield r
    means = {}
    for m in cfg.methods:
        rs = [r for r in results if r["method"] == m and not r.get("diverged")]  # diverged runs are no result
        if rs:
            means[m] = {
                k: float(np.mean([r[k] for r in rs if r.get(k) is not None]))
                for k in (
                    "psnr_ldr_oe",
                    "psnr_ldr_ne",
                    "psnr_hdr",
                    "psnr_hdr_predmax",
                    "ssim_ldr_oe",
                    "ssim_hdr",
                    "gaussians",
                    "floaters",
                )
                if any(r.get(k) is not None for r in rs)
            }
    yield {
        "kind": "summary",
        "methods": list(cfg.methods),
        "scenes": [Path(f).name for f in folders],
        "iters": cfg.iters,
        "mean": means,
        "lpips": LPIPS_NOTE,
        "supervision": "LDR only"
        if cfg.hdr_weight == 0
        else f"LDR + {cfg.hdr_weight} x mu-law HDR (HDR-GS synthetic mode)",
    }
