"""``icml26 train-lfm``: a small VAE + feature network, then latent flow matching, optionally on a
reduced subset of the data (LFM stability, ICML 2026, arXiv 2605.08398).

Stages (``stage``):
  vae  1. train the VAE on the images; 2. train the feature network (classifier) on the same
       images; 3. cache the scaled posterior means of every training image (latents).
  fm   4. choose the kept subset (``scorer``, ``keep_ratio``), indices saved; 5. train a DiT-style
       velocity network with the FM loss (``flow.fm_loss_per_sample``), EMA weights, AdamW.
       With ``t_max < 1`` the model is trained on t ~ U(1e-4, t_max) only (the paper's light
       coarse model); with ``seam_checkpoint`` (the fine model) the seam loss
       ||v_coarse(x_s, t_max) - v_fine(x_s, t_max)||^2, weight ``seam_weight``, is added, x_s being
       each data latent inverted by the fine model's ODE from t = 1 back to t_max.
  all  vae then fm, in the same run directory.

Determinism: every step draws its batch, times and noise from a generator seeded by
(seed, stage, step), so ``--resume`` continues exactly, and under ``torchrun`` (DDP, gloo) each
rank takes its slice of the same global batch, so N processes compute the same run as one.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Iterator

import numpy as np
import torch

from icml26.core.data.images import load_images, resolve_dataset_arg
from icml26.core.dist import Dist  # noqa: F401  (re-exported)
from icml26.core.dist import setup as dist_setup
from icml26.core.diverge import Diverged, diverged_fields, warn
from icml26.core.errors import InputError
from icml26.methods.lfm import ckpt
from icml26.methods.lfm.artifacts import (  # noqa: F401  (re-exported: callers import them from here)
    _ce_loss,
    arch_for,
    classifier_accuracy,
    load_flow,
    load_vae_dir,
    model_velocity,
)
from icml26.methods.lfm.checks import RUN_CHECKPOINTS, Inputs, validate  # noqa: F401
from icml26.methods.lfm.config import STAGES, T_EPS, Config  # noqa: F401
from icml26.methods.lfm.fm_steps import _fm_batch_fn, _fm_loss, seam_states  # noqa: F401
from icml26.methods.lfm.loop import Trainer, batch_rows, fit, step_generator  # noqa: F401
from icml26.methods.lfm.nets import VAE, DiT, FeatureNet, count_params
from icml26.methods.lfm.subset import image_features, select_subset  # noqa: F401


def _vae_stage(cfg: Config, *, seed: int, out: Path, trainer: Trainer) -> Iterator[dict]:
    size = cfg.image_size or None
    ds = load_images(cfg.dataset, "train", size=size)
    n_all = len(ds)
    if cfg.train_size and cfg.train_size < n_all:
        g = torch.Generator().manual_seed(seed)
        idx = np.sort(torch.randperm(n_all, generator=g)[: cfg.train_size].numpy())
    else:
        idx = np.arange(n_all)
    x = torch.from_numpy(ds.images[idx]).float().div_(255.0)  # (N, C, H, W)
    y = torch.from_numpy(ds.labels[idx]) if ds.labels is not None else None
    N, C, H, W = x.shape
    if H % 4 or W % 4:
        raise InputError(f"images must have sides divisible by 4, got {H}x{W}")
    yield {
        "kind": "data",
        "dataset": ds.name,
        "train_images": int(N),
        "image_shape": [C, H, W],
        "num_classes": ds.num_classes,
        "test_split": ds.split_source,
        "device": str(trainer.device),
    }

    # 1. VAE
    torch.manual_seed(seed)
    vae = VAE(C, cfg.latent_channels, cfg.vae_width)
    zshape = (cfg.latent_channels, H // 4, W // 4)

    def vae_batch(step):
        g, i = batch_rows(seed, "vae", step, N, cfg.vae_batch_size)
        return {"x": x[i], "noise": torch.randn((cfg.vae_batch_size, *zshape), generator=g)}

    meta = {
        "kind": "lfm-vae",
        "dataset": ds.name,
        "dataset_arg": resolve_dataset_arg(cfg.dataset),
        "in_channels": C,
        "image_size": H,
        "latent_channels": cfg.latent_channels,
        "width": cfg.vae_width,
        "seed": seed,
    }
    yield from trainer.fit(
        "vae",
        vae,
        lambda m, b: m(b["x"], b["noise"], cfg.kl_weight),
        vae_batch,
        steps=cfg.vae_steps,
        lr=cfg.vae_lr,
        ckpt_path=out / "vae.safetensors",
        meta=meta,
        desc="vae",
    )
    vae.cpu()

    # 2. feature network (needs labels; else the VAE encoder serves as feature map)
    feat = None
    if y is not None:
        torch.manual_seed(seed + 1)
        feat = FeatureNet(C, ds.num_classes, H)

        def feat_batch(step):
            i = batch_rows(seed, "features", step, N, cfg.vae_batch_size)[1]
            return {"x": x[i], "y": y[i]}

        fmeta = {
            "kind": "lfm-features",
            "dataset": ds.name,
            "in_channels": C,
            "image_size": H,
            "num_classes": ds.num_classes,
            "feature_dim": feat.feature_dim,
            "seed": seed,
        }
        yield from trainer.fit(
            "features",
            feat,
            _ce_loss,
            feat_batch,
            steps=cfg.feature_steps,
            lr=cfg.feature_lr,
            ckpt_path=out / "features.safetensors",
            meta=fmeta,
            desc="feature network",
        )
        feat.cpu()
        test = load_images(cfg.dataset, "test", size=H)
        acc = classifier_accuracy(
            feat, torch.from_numpy(test.images).float().div_(255.0), torch.from_numpy(test.labels)
        )
        yield {
            "kind": "feature_network",
            "test_accuracy": acc,
            "test_images": len(test),
            "test_split": test.split_source,
            "parameters": count_params(feat),
        }

    # 3. latents: scaled posterior means (scale = 1 / std, as the SD VAE's 0.18215)
    vae.eval()
    with torch.no_grad():
        mu = torch.cat([vae.encode(x[s : s + 512])[0] for s in range(0, N, 512)])
        rec = torch.cat([vae.decode(mu[s : s + 512]) for s in range(0, N, 512)])
    scale = float(1.0 / mu.std())
    rec_mse = float((rec - x).pow(2).mean())
    if trainer.dist.main:
        ckpt.save(
            out / "latents.safetensors",
            {
                "latents": mu * scale,
                "indices": torch.from_numpy(idx).long(),
                **({"labels": y} if y is not None else {}),
            },
            {
                "kind": "lfm-latents",
                "dataset": ds.name,
                "dataset_arg": resolve_dataset_arg(cfg.dataset),
                "test_split": ds.split_source,
                "latent_scale": scale,
                "num_classes": ds.num_classes if y is not None else 0,
                "latent_shape": list(zshape),
                "image_shape": [C, H, W],
            },
        )
        t, m = ckpt.load(out / "vae.safetensors")
        ckpt.save(out / "vae.safetensors", t, {**m, "latent_scale": scale, "reconstruction_mse": rec_mse})
    trainer.dist.barrier()
    yield {
        "kind": "vae",
        "parameters": count_params(vae),
        "latent_shape": list(zshape),
        "latent_scale": scale,
        "reconstruction_mse": rec_mse,
        "checkpoint": str(out / "vae.safetensors"),
    }


def _fm_stage(cfg: Config, *, seed: int, out: Path, trainer: Trainer, vae_dir: Path, inputs: Inputs) -> Iterator[dict]:
    arts = inputs.vae if inputs.vae is not None else load_vae_dir(vae_dir)
    lat = arts["latents"]
    lm = arts["latents_meta"]
    num_classes = int(lm["num_classes"]) if cfg.conditional and arts["labels"] is not None else 0
    lab = arts["labels"] if num_classes else None
    ck = out / "checkpoint.safetensors"

    # 4. kept subset: reused from the checkpoint on --resume, so scoring is not redone
    kept = None
    kept_seed = seed
    if trainer.resume and ck.is_file():
        t, cm = ckpt.load(ck)
        if "kept_indices_local" in t:  # the original run's subset, scorer and keep_ratio, as it recorded them
            kept = t["kept_indices_local"].numpy()
            info = {
                "scorer": cm.get("scorer", cfg.scorer),
                "keep_ratio": cm.get("keep_ratio", cfg.keep_ratio),
                "kept": int(len(kept)),
                "of": int(len(lat)),
                "resumed": True,
            }
            if arts["labels"] is not None:
                info["kept_per_class"] = np.bincount(
                    arts["labels"][kept].numpy(), minlength=int(arts["labels"].max()) + 1
                ).tolist()
            kept_seed = cm.get("seed", seed)
    if kept is None:
        kept, info = select_subset(
            cfg,
            arts,
            seed=seed,
            dist=trainer.dist,
            num_classes=num_classes,
            score_net=inputs.score,
            device=trainer.device,
        )
    kept_global = arts["indices"][torch.from_numpy(kept).long()]
    if trainer.dist.main:
        from icml26.core.output import atomic_write_text

        atomic_write_text(
            out / "kept_indices.json",
            json.dumps(
                {
                    "dataset": lm["dataset"],
                    "split": "train",
                    "scorer": info["scorer"],
                    "keep_ratio": info["keep_ratio"],
                    "seed": kept_seed,
                    "indices": kept_global.tolist(),
                }
            ),
        )
    yield {"kind": "reduction", **info, "indices_file": str(out / "kept_indices.json")}

    # 5. flow model
    torch.manual_seed(seed)
    arch = arch_for(cfg, cfg.model, lat.shape[1:], num_classes)
    net = DiT(arch)
    seam = seam_t = None
    t_seam = None
    if cfg.seam_checkpoint:
        if cfg.t_max >= 1.0:
            raise InputError("seam_checkpoint needs t_max < 1 (the switch time of the coarse model)")
        fine = inputs.seam if inputs.seam is not None else load_flow(cfg.seam_checkpoint)[0]
        seam, seam_t = seam_states(fine, lat, lab, cfg.t_max, cfg.seam_steps)
        t_seam = cfg.t_max
    yield {"kind": "model", "model": cfg.model, "parameters": count_params(net), "arch": arch.to_dict()}
    meta = {
        "kind": "lfm-flow",
        "arch": arch.to_dict(),
        "preset": cfg.model,
        "vae_dir": str(arts["dir"]),
        "dataset": lm["dataset"],
        "dataset_arg": lm["dataset_arg"],
        "latent_scale": lm["latent_scale"],
        "keep_ratio": cfg.keep_ratio,
        "scorer": info["scorer"],
        "t_max": cfg.t_max,
        "seam": bool(cfg.seam_checkpoint),
        "seed": seed,
        "parameters": count_params(net),
    }
    batch_fn = _fm_batch_fn(
        cfg, lat, lab, kept, seed=seed, stage="fm", num_classes=num_classes, seam=seam, seam_target=seam_t
    )
    extra = {"kept_indices_local": torch.from_numpy(np.asarray(kept)).long(), "kept_indices": kept_global}
    yield from trainer.fit(
        "fm",
        net,
        _fm_loss(cfg, t_seam),
        batch_fn,
        steps=cfg.steps,
        lr=cfg.lr,
        weight_decay=cfg.weight_decay,
        ema_decay=cfg.ema_decay,
        ckpt_path=ck,
        meta=meta,
        extra=extra,
        desc=f"flow matching ({cfg.model})",
    )


def run(
    cfg: Config,
    *,
    seed: int = 0,
    out: str | Path | None = None,
    resume: bool = False,
    device: str = "cpu",
    inputs: Inputs | None = None,
) -> Iterator[dict]:
    """Yield ``data``/``step``/``vae``/``reduction``/``model`` records, then the summary (with
    ``checkpoint``, ``device`` and the ``diverged`` fields; a diverged run stops there).

    device: where the networks train and their batches go ("cpu", "cuda", "cuda:1", ...).
    inputs: what validate(cfg, out, resume) returned (else it is called here)."""
    from icml26.core.seed import seed_everything

    if inputs is None:
        inputs = validate(cfg, out, resume)
    dist = dist_setup()
    trainer = Trainer(dist, device, resume, cfg.log_every, cfg.checkpoint_every)
    seed_everything(seed)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    summary: dict = {"kind": "summary", "stage": cfg.stage, "device": str(device)}
    last_loss = math.nan
    failure = None
    try:
        if cfg.stage in ("vae", "all"):
            for r in _vae_stage(cfg, seed=seed, out=out, trainer=trainer):
                if r["kind"] == "step":
                    last_loss = r["loss"]
                yield r
            summary["vae_checkpoint"] = str(out / "vae.safetensors")
            summary["checkpoint"] = str(out / "vae.safetensors")
        if cfg.stage in ("fm", "all"):
            vae_dir = Path(cfg.vae) if cfg.stage == "fm" else out
            stage = _fm_stage(cfg, seed=seed, out=out, trainer=trainer, vae_dir=vae_dir, inputs=inputs)
            for r in stage:
                if r["kind"] == "step":
                    last_loss = r["loss"]
                if r["kind"] == "model":
                    summary["parameters"] = r["parameters"]
                if r["kind"] == "reduction":
                    summary["kept"] = r["kept"]
                yield r
            summary["checkpoint"] = str(out / "checkpoint.safetensors")
            summary["vae_dir"] = str(vae_dir.resolve())
    except Diverged as e:
        failure = e
        warn(e, f"train-lfm ({cfg.stage})")
        summary.pop("checkpoint", None)
    summary.update(diverged_fields(failure))
    summary.update({"final_loss": last_loss, "seconds": time.perf_counter() - t0, "processes": dist.world})
    yield summary
