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
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import torch
from torch import Tensor, nn

from icml26.core.errors import InputError
from icml26.methods.lfm import ckpt
from icml26.methods.lfm.nets import PRESETS, VAE, DiT, DiTArch, FeatureNet, count_params
from icml26.methods.lfm.reduce import SCORERS

STAGES = ("vae", "fm", "all")
T_EPS = 1e-4


@dataclass(frozen=True)
class Config:
    dataset: str = "fashion-mnist"  # fashion-mnist | mnist | .npz | image folder (stage vae/all)
    stage: str = "all"  # vae | fm | all
    vae: str = ""  # stage fm: run dir of a vae stage
    train_size: int = 0  # 0 = whole train split; else a seeded random subset
    # autoencoder and feature network
    latent_channels: int = 4
    vae_width: int = 16
    vae_steps: int = 1500
    vae_lr: float = 2e-3
    kl_weight: float = 0.1
    feature_steps: int = 600
    feature_lr: float = 1e-3
    vae_batch_size: int = 64
    # flow model
    model: str = "large"  # small | medium | large | xl (presets of nets.PRESETS)
    width: int = 0  # >0 overrides the preset
    depth: int = 0
    heads: int = 0
    conditional: bool = True
    label_dropout: float = 0.1
    steps: int = 2000
    batch_size: int = 64
    lr: float = 1e-3
    weight_decay: float = 0.0
    ema_decay: float = 0.999
    t_max: float = 1.0  # train on t ~ U(1e-4, t_max); < 1 for a coarse model
    seam_checkpoint: str = ""  # fine model checkpoint for the seam loss (coarse training)
    seam_weight: float = 0.1
    seam_steps: int = 60  # solver steps per unit time for the seam inversion
    # data reduction
    keep_ratio: float = 1.0
    scorer: str = "random"  # random | kcenter | balanced-cluster | cluster-proportional | loss | grad
    num_clusters: int = 24
    score_inverse: bool = False  # loss/grad: keep the lowest scores; cluster: keep the furthest
    score_checkpoint: str = ""  # loss/grad: FM checkpoint that scores (else a proxy is trained)
    score_steps: int = 300  # proxy scoring model's training steps (full data)
    score_model: str = "small"
    # bookkeeping
    log_every: int = 50
    checkpoint_every: int = 500

    def __post_init__(self):
        if self.stage not in STAGES:
            raise ValueError(f"stage must be one of {', '.join(STAGES)}, got {self.stage!r}")
        if self.scorer not in SCORERS:
            raise ValueError(f"scorer must be one of {', '.join(SCORERS)}, got {self.scorer!r}")
        for name in ("model", "score_model"):
            if getattr(self, name) not in PRESETS:
                raise ValueError(f"{name} must be one of {', '.join(PRESETS)}, got {getattr(self, name)!r}")
        if not 0.0 < self.keep_ratio <= 1.0:
            raise ValueError(f"keep_ratio must be in (0, 1], got {self.keep_ratio}")
        if not T_EPS < self.t_max <= 1.0:
            raise ValueError(f"t_max must be in (1e-4, 1], got {self.t_max}")
        if not 0.0 <= self.label_dropout < 1.0:
            raise ValueError(f"label_dropout must be in [0, 1), got {self.label_dropout}")
        if not 0.0 <= self.ema_decay < 1.0:
            raise ValueError(f"ema_decay must be in [0, 1), got {self.ema_decay}")
        for name in ("steps", "vae_steps", "feature_steps", "score_steps"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        for name in (
            "batch_size",
            "vae_batch_size",
            "log_every",
            "checkpoint_every",
            "latent_channels",
            "vae_width",
            "num_clusters",
            "seam_steps",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.train_size < 0:
            raise ValueError(f"train_size must be >= 0, got {self.train_size}")
        if self.lr <= 0 or self.vae_lr <= 0 or self.feature_lr <= 0:
            raise ValueError("learning rates must be > 0")


# ----------------------------------------------------------------------------- distributed
from icml26.core.dist import Dist  # noqa: E402  (re-exported: tests and callers import it from here)
from icml26.core.dist import setup as dist_setup  # noqa: E402


def step_generator(seed: int, stage: str, step: int) -> torch.Generator:
    """The generator of one training step: a function of (seed, stage, step) only."""
    code = {"vae": 1, "features": 2, "fm": 3, "proxy": 4}[stage]
    return torch.Generator().manual_seed((seed * 1_000_003 + code * 10_000_019 + step * 7919) % (2**63 - 1))


# ----------------------------------------------------------------------------- generic loop
def fit(
    *,
    stage: str,
    model: nn.Module,
    loss_fn: Callable[[nn.Module, dict], Tensor],
    batch_fn: Callable[[int], dict],
    steps: int,
    lr: float,
    weight_decay: float = 0.0,
    ema_decay: float | None,
    ckpt_path: Path | None,
    resume: bool,
    log_every: int,
    checkpoint_every: int,
    dist: Dist,
    meta: dict,
    extra: dict[str, Tensor] | None = None,
    bar=None,
) -> Iterator[dict]:
    """Train ``model`` for ``steps`` AdamW steps; yield ``step`` records; checkpoint to ``ckpt_path``.

    batch_fn(step) -> global batch (dict of tensors with batch dim first, or None values);
    each rank uses rows [rank*B/W, (rank+1)*B/W). loss_fn(net, local_batch) -> scalar mean loss."""
    net = model
    if dist.world > 1:
        from torch.nn.parallel import DistributedDataParallel as DDP

        net = DDP(model)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    ema = {k: v.detach().clone() for k, v in model.state_dict().items()} if ema_decay is not None else None
    start, elapsed0 = 0, 0.0
    if resume and ckpt_path is not None and ckpt_path.is_file():
        tensors, m = ckpt.load(ckpt_path)
        if m.get("stage") != stage:
            raise InputError(f"--resume: {ckpt_path} is a {m.get('stage')!r} checkpoint, expected {stage!r}")
        model.load_state_dict(ckpt.sub(tensors, "model"))
        if ema is not None:
            ema = ckpt.sub(tensors, "ema") or ema
        ckpt.optim_from_flat(opt, tensors, m["param_groups"])
        start, elapsed0 = int(m["step"]), float(m.get("seconds", 0.0))

    def save(step: int, seconds: float) -> None:
        if ckpt_path is None or not dist.main:
            return
        flat, groups = ckpt.optim_to_flat(opt)
        tensors = {**ckpt.prefixed(model.state_dict(), "model"), **flat, **(extra or {})}
        if ema is not None:
            tensors.update(ckpt.prefixed(ema, "ema"))
        ckpt.save(
            ckpt_path,
            tensors,
            {**meta, "stage": stage, "step": step, "steps": steps, "seconds": seconds, "param_groups": groups},
        )

    t0 = time.perf_counter()
    window: list[float] = []
    model.train()
    for step in range(start, steps):
        batch = batch_fn(step)
        B = next(v.shape[0] for v in batch.values() if v is not None)
        if B % dist.world:
            raise InputError(f"batch size {B} is not divisible by the {dist.world} processes")
        lo, hi = dist.rank * B // dist.world, (dist.rank + 1) * B // dist.world
        local = {k: (v[lo:hi] if v is not None and v.dim() > 0 and v.shape[0] == B else v) for k, v in batch.items()}
        loss = loss_fn(net, local)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if ema is not None:
            d = min(ema_decay, (1.0 + step) / (10.0 + step))  # warm-up so short runs still average
            with torch.no_grad():
                for k, v in model.state_dict().items():
                    if v.dtype.is_floating_point:
                        ema[k].mul_(d).add_(v.detach(), alpha=1.0 - d)
                    else:
                        ema[k].copy_(v)
        window.append(float(loss.detach()))
        if bar is not None:
            bar.advance()
        last = step + 1 == steps
        if (step + 1) % log_every == 0 or last:
            lv = dist.mean(sum(window) / len(window))
            window = []
            yield {
                "kind": "step",
                "stage": stage,
                "step": step + 1,
                "loss": lv,
                "seconds": elapsed0 + time.perf_counter() - t0,
            }
        if (step + 1) % checkpoint_every == 0 or last:
            save(step + 1, elapsed0 + time.perf_counter() - t0)
            dist.barrier()
    if start >= steps and ckpt_path is not None and not ckpt_path.is_file():
        save(steps, elapsed0)
    if ema is not None:
        model.load_state_dict(ema)
    model.eval()


# ----------------------------------------------------------------------------- stage vae
def _vae_stage(cfg: Config, *, seed: int, out: Path, resume: bool, dist: Dist, device: str) -> Iterator[dict]:
    from icml26.core.data.images import load_images
    from icml26.core.progress import progress

    ds = load_images(cfg.dataset, "train")
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
    }

    # 1. VAE
    torch.manual_seed(seed)
    vae = VAE(C, cfg.latent_channels, cfg.vae_width)
    zshape = (cfg.latent_channels, H // 4, W // 4)

    def vae_batch(step):
        g = step_generator(seed, "vae", step)
        i = torch.randint(N, (cfg.vae_batch_size,), generator=g)
        return {"x": x[i], "noise": torch.randn((cfg.vae_batch_size, *zshape), generator=g)}

    meta = {
        "kind": "lfm-vae",
        "dataset": ds.name,
        "dataset_arg": str(cfg.dataset),
        "in_channels": C,
        "image_size": H,
        "latent_channels": cfg.latent_channels,
        "width": cfg.vae_width,
        "seed": seed,
    }
    with progress(cfg.vae_steps, "vae") as bar:
        yield from fit(
            stage="vae",
            model=vae,
            loss_fn=lambda m, b: m(b["x"], b["noise"], cfg.kl_weight),
            batch_fn=vae_batch,
            steps=cfg.vae_steps,
            lr=cfg.vae_lr,
            ema_decay=None,
            ckpt_path=out / "vae.safetensors",
            resume=resume,
            log_every=cfg.log_every,
            checkpoint_every=cfg.checkpoint_every,
            dist=dist,
            meta=meta,
            bar=bar,
        )

    # 2. feature network (needs labels; else the VAE encoder serves as feature map)
    feat = None
    if y is not None:
        torch.manual_seed(seed + 1)
        feat = FeatureNet(C, ds.num_classes, H)

        def feat_batch(step):
            g = step_generator(seed, "features", step)
            i = torch.randint(N, (cfg.vae_batch_size,), generator=g)
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
        with progress(cfg.feature_steps, "feature network") as bar:
            yield from fit(
                stage="features",
                model=feat,
                loss_fn=_ce_loss,
                batch_fn=feat_batch,
                steps=cfg.feature_steps,
                lr=cfg.feature_lr,
                ema_decay=None,
                ckpt_path=out / "features.safetensors",
                resume=resume,
                log_every=cfg.log_every,
                checkpoint_every=cfg.checkpoint_every,
                dist=dist,
                meta=fmeta,
                bar=bar,
            )
        test = load_images(cfg.dataset, "test")
        acc = classifier_accuracy(
            feat, torch.from_numpy(test.images).float().div_(255.0), torch.from_numpy(test.labels)
        )
        yield {"kind": "feature_network", "test_accuracy": acc, "parameters": count_params(feat)}

    # 3. latents: scaled posterior means (scale = 1 / std, as the SD VAE's 0.18215)
    vae.eval()
    with torch.no_grad():
        mu = torch.cat([vae.encode(x[s : s + 512])[0] for s in range(0, N, 512)])
        rec = torch.cat([vae.decode(mu[s : s + 512]) for s in range(0, N, 512)])
    scale = float(1.0 / mu.std())
    rec_mse = float((rec - x).pow(2).mean())
    if dist.main:
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
                "dataset_arg": str(cfg.dataset),
                "latent_scale": scale,
                "num_classes": ds.num_classes if y is not None else 0,
                "latent_shape": list(zshape),
                "image_shape": [C, H, W],
            },
        )
        t, m = ckpt.load(out / "vae.safetensors")
        ckpt.save(out / "vae.safetensors", t, {**m, "latent_scale": scale, "reconstruction_mse": rec_mse})
    dist.barrier()
    yield {
        "kind": "vae",
        "parameters": count_params(vae),
        "latent_shape": list(zshape),
        "latent_scale": scale,
        "reconstruction_mse": rec_mse,
        "checkpoint": str(out / "vae.safetensors"),
    }


def _ce_loss(m, b):
    return nn.functional.cross_entropy(m(b["x"]), b["y"])


@torch.no_grad()
def classifier_accuracy(net: FeatureNet, x: Tensor, y: Tensor) -> float:
    net.eval()
    pred = torch.cat([net(x[s : s + 1000]).argmax(1) for s in range(0, len(x), 1000)])
    return float((pred == y).float().mean())


# ----------------------------------------------------------------------------- loading artifacts
def load_vae_dir(vae_dir: str | Path) -> dict:
    """Load a vae-stage run directory: VAE (eval), feature network (or None), latents, metadata."""
    d = Path(vae_dir)
    if not d.is_dir():
        raise InputError(f"--vae {str(vae_dir)!r} is not a directory (expected a `train-lfm --stage vae` run)")
    vt, vm = ckpt.load(d / "vae.safetensors", "VAE checkpoint")
    if vm.get("kind") != "lfm-vae":
        raise InputError(f"{d / 'vae.safetensors'} is not a train-lfm VAE checkpoint")
    vae = VAE(vm["in_channels"], vm["latent_channels"], vm["width"])
    vae.load_state_dict(ckpt.sub(vt, "model"))
    vae.eval()
    lt, lm = ckpt.load(d / "latents.safetensors", "latent cache")
    feat, fm = None, None
    if (d / "features.safetensors").is_file():
        ft, fm = ckpt.load(d / "features.safetensors", "feature network")
        feat = FeatureNet(fm["in_channels"], fm["num_classes"], fm["image_size"], fm["feature_dim"])
        feat.load_state_dict(ckpt.sub(ft, "model"))
        feat.eval()
    return {
        "dir": d.resolve(),
        "vae": vae,
        "vae_meta": vm,
        "features": feat,
        "features_meta": fm,
        "latents": lt["latents"],
        "labels": lt.get("labels"),
        "indices": lt["indices"],
        "latents_meta": lm,
    }


def arch_for(cfg: Config, preset: str, latent_shape, num_classes: int) -> DiTArch:
    p = dict(PRESETS[preset])
    if preset == cfg.model:
        for k in ("width", "depth", "heads"):
            if getattr(cfg, k) > 0:
                p[k] = getattr(cfg, k)
    C, h, _ = latent_shape
    return DiTArch(in_channels=C, input_size=h, num_classes=num_classes, **p)


def load_flow(path: str | Path, *, ema: bool = True) -> tuple[DiT, dict]:
    """An FM checkpoint -> (DiT with EMA weights, eval mode; metadata)."""
    t, m = ckpt.load(path, "flow checkpoint")
    if m.get("kind") != "lfm-flow":
        raise InputError(f"{path}: not a train-lfm flow checkpoint (kind {m.get('kind')!r})")
    net = DiT(DiTArch(**m["arch"]))
    sd = ckpt.sub(t, "ema") if ema and any(k.startswith("ema.") for k in t) else ckpt.sub(t, "model")
    net.load_state_dict(sd)
    net.eval()
    return net, m


def model_velocity(net: DiT, y: Tensor | None, cfg_scale: float = 1.0):
    """v(x, t) for the ODE; classifier-free guidance when cfg_scale != 1 and the model is conditional."""
    if y is None or net.arch.num_classes == 0:
        return lambda x, t: net(x, t, None)
    if cfg_scale == 1.0:
        return lambda x, t: net(x, t, y)
    null = torch.full_like(y, net.arch.num_classes)

    def v(x, t):
        c = net(x, t, y)
        u = net(x, t, null)
        return u + cfg_scale * (c - u)

    return v


# ----------------------------------------------------------------------------- stage fm
def _proxy_scorer(
    cfg: Config, arts: dict, *, seed: int, dist: Dist, num_classes: int, score_net: DiT | None = None
) -> DiT:
    """A scoring model: the given FM checkpoint (``score_net``: already loaded by validate()),
    else a small model trained on all data."""
    if cfg.score_checkpoint:
        return score_net if score_net is not None else load_flow(cfg.score_checkpoint)[0]
    lat, lab = arts["latents"], arts["labels"] if num_classes else None
    torch.manual_seed(seed + 7)
    net = DiT(arch_for(cfg, cfg.score_model, lat.shape[1:], num_classes))
    batch_fn = _fm_batch_fn(cfg, lat, lab, np.arange(len(lat)), seed=seed, stage="proxy", num_classes=num_classes)
    for _ in fit(
        stage="proxy",
        model=net,
        loss_fn=_fm_loss(cfg, None),
        batch_fn=batch_fn,
        steps=cfg.score_steps,
        lr=cfg.lr,
        ema_decay=cfg.ema_decay,
        ckpt_path=None,
        resume=False,
        log_every=10**9,
        checkpoint_every=10**9,
        dist=dist,
        meta={},
    ):
        pass
    return net


_SCORE_CACHE: dict = {}


def select_subset(
    cfg: Config, arts: dict, *, seed: int, dist: Dist, num_classes: int, score_net: DiT | None = None
) -> tuple[np.ndarray, dict]:
    """Step 4: indices (into the cached latents) of the kept training samples, and a summary.
    score_net: score_checkpoint's model when validate() has loaded it."""
    from icml26.methods.lfm import reduce

    n = len(arts["latents"])
    info: dict = {"scorer": cfg.scorer, "keep_ratio": cfg.keep_ratio}
    t0 = time.perf_counter()
    if cfg.keep_ratio >= 1.0:
        kept = np.arange(n)
        info["scorer"] = "none"
    elif cfg.scorer == "random":
        kept = reduce.select_random(n, cfg.keep_ratio, seed)
    elif cfg.scorer in ("kcenter", "balanced-cluster", "cluster-proportional"):
        feats = image_features(arts, arts["latents"])
        info["feature_space"] = "feature network (trained here)" if arts["features"] is not None else "VAE encoder mean"
        if cfg.scorer == "kcenter":
            kept = reduce.kcenter_greedy(feats, cfg.keep_ratio, seed)
        else:
            kept = reduce.select_cluster(
                feats,
                cfg.keep_ratio,
                seed,
                num_clusters=cfg.num_clusters,
                balanced=cfg.scorer == "balanced-cluster",
                largest=cfg.score_inverse,
            )
    else:
        key = None
        if cfg.score_checkpoint:  # same scoring model + data -> same scores: reuse within a process
            st = Path(cfg.score_checkpoint).stat()
            key = (str(Path(cfg.score_checkpoint).resolve()), st.st_mtime_ns, str(arts["dir"]), cfg.scorer, num_classes)
        raw = _SCORE_CACHE.get(key) if key else None
        if raw is None:
            net = _proxy_scorer(cfg, arts, seed=seed, dist=dist, num_classes=num_classes, score_net=score_net)
            lab = arts["labels"] if num_classes else None
            raw = reduce.fm_raw_scores(net, arts["latents"], lab, kind=cfg.scorer)
            if key:
                _SCORE_CACHE[key] = raw
        scores = reduce.ema_normalised_scores(raw)
        kept = reduce.select_by_score(scores, cfg.keep_ratio, largest=not cfg.score_inverse)
        info["scoring_model"] = cfg.score_checkpoint or f"{cfg.score_model} proxy, {cfg.score_steps} steps"
    info["kept"] = int(len(kept))
    info["of"] = int(n)
    info["seconds"] = time.perf_counter() - t0
    if arts["labels"] is not None:
        info["kept_per_class"] = np.bincount(
            arts["labels"][kept].numpy(), minlength=int(arts["labels"].max()) + 1
        ).tolist()
    return kept, info


@torch.no_grad()
def image_features(arts: dict, latents: Tensor) -> Tensor:
    """Embeddings (N, D) of the training images behind the cached latents: the feature network's
    penultimate layer on the original images (re-read from the data set), else the latents."""
    from icml26.core.data.images import load_images

    lm = arts["latents_meta"]
    ds = load_images(lm["dataset_arg"], "train")
    x = torch.from_numpy(ds.images[arts["indices"].numpy()]).float().div_(255.0)
    if arts["features"] is not None:
        return torch.cat([arts["features"].features(x[s : s + 1000]) for s in range(0, len(x), 1000)])
    return latents.flatten(1)


def _fm_batch_fn(
    cfg: Config,
    lat: Tensor,
    lab: Tensor | None,
    kept: np.ndarray,
    *,
    seed: int,
    stage: str,
    num_classes: int,
    seam: Tensor | None = None,
    seam_target: Tensor | None = None,
):
    kept_t = torch.from_numpy(np.asarray(kept)).long()
    B = cfg.batch_size
    t_max = cfg.t_max if stage == "fm" else 1.0

    def batch(step):
        g = step_generator(seed, stage, step)
        j = kept_t[torch.randint(len(kept_t), (B,), generator=g)]
        t = T_EPS + (t_max - T_EPS) * torch.rand(B, generator=g) if t_max < 1.0 else torch.rand(B, generator=g)
        x0 = torch.randn((B, *lat.shape[1:]), generator=g)
        out = {"x1": lat[j], "t": t, "x0": x0, "y": None}
        if num_classes and lab is not None:
            y = lab[j].clone()
            drop = torch.rand(B, generator=g) < cfg.label_dropout
            y[drop] = num_classes  # null class: unconditional branch for guidance
            out["y"] = y
        if seam is not None:
            out["xs"], out["vs"] = seam[j], seam_target[j]
        return out

    return batch


def _fm_loss(cfg: Config, t_seam: float | None):
    from icml26.methods.lfm.flow import fm_loss_per_sample

    def loss(net, b):
        l = fm_loss_per_sample(net, b["x1"], b["t"], b["x0"], b["y"]).mean()
        if t_seam is not None and "xs" in b:
            ts = torch.full((b["xs"].shape[0],), t_seam)
            l = l + cfg.seam_weight * (net(b["xs"], ts, b["y"]) - b["vs"]).pow(2).flatten(1).mean(1).mean()
        return l

    return loss


@torch.no_grad()
def seam_states(
    fine: DiT, lat: Tensor, lab: Tensor | None, t_split: float, steps_per_unit: int
) -> tuple[Tensor, Tensor]:
    """Invert data latents with the fine model's ODE from t = 1 back to t_split (Euler,
    round((1 - t_split) * steps_per_unit) steps); return (x_seam, v_fine(x_seam, t_split))."""
    from icml26.methods.lfm.flow import euler

    n_steps = max(1, round((1.0 - t_split) * steps_per_unit))
    xs, vs = [], []
    for s in range(0, len(lat), 512):
        x1 = lat[s : s + 512]
        y = None if lab is None else lab[s : s + 512]
        v = model_velocity(fine, y)
        x, _ = euler(v, x1, n_steps, 1.0, t_split)
        xs.append(x)
        vs.append(v(x, torch.full((x.shape[0],), t_split)))
    return torch.cat(xs), torch.cat(vs)


def _fm_stage(
    cfg: Config, *, seed: int, out: Path, resume: bool, dist: Dist, vae_dir: Path, inputs: Inputs
) -> Iterator[dict]:
    from icml26.core.progress import progress

    arts = inputs.vae if inputs.vae is not None else load_vae_dir(vae_dir)
    lat = arts["latents"]
    lm = arts["latents_meta"]
    num_classes = int(lm["num_classes"]) if cfg.conditional and arts["labels"] is not None else 0
    lab = arts["labels"] if num_classes else None
    ck = out / "checkpoint.safetensors"

    # 4. kept subset: reused from the checkpoint on --resume, so scoring is not redone
    kept = None
    kept_seed = seed
    if resume and ck.is_file():
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
        kept, info = select_subset(cfg, arts, seed=seed, dist=dist, num_classes=num_classes, score_net=inputs.score)
    kept_global = arts["indices"][torch.from_numpy(kept).long()]
    if dist.main:
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
    with progress(cfg.steps, f"flow matching ({cfg.model})") as bar:
        yield from fit(
            stage="fm",
            model=net,
            loss_fn=_fm_loss(cfg, t_seam),
            batch_fn=batch_fn,
            steps=cfg.steps,
            lr=cfg.lr,
            weight_decay=cfg.weight_decay,
            ema_decay=cfg.ema_decay,
            ckpt_path=ck,
            resume=resume,
            log_every=cfg.log_every,
            checkpoint_every=cfg.checkpoint_every,
            dist=dist,
            meta=meta,
            extra=extra,
            bar=bar,
        )


RUN_CHECKPOINTS = ("vae.safetensors", "features.safetensors", "checkpoint.safetensors")


@dataclass
class Inputs:
    """What validate() loaded to check it, handed on to run() so nothing is read twice:
    --vae's run directory (load_vae_dir, for --stage fm) and the seam / score flow models."""

    vae: dict | None = None
    seam: DiT | None = None
    score: DiT | None = None


def validate(cfg: Config, out: str | Path | None, resume: bool) -> Inputs:
    """Every input file a run will read, checked before it writes anything (InputError, exit 2):
    --vae's run directory, seam_checkpoint / score_checkpoint (whole flow checkpoints, whose
    latent shape must be this run's), on --resume the run's own checkpoints in ``out``
    (structure, stage, and tensor names/shapes against the networks these settings build),
    then the data set (a built-in not installed: MissingDataError naming the install command).
    Returns what it loaded (pass it to run())."""
    if out is None:
        raise InputError("train-lfm needs --out DIR (checkpoints and the latent cache are written there)")
    if cfg.stage == "fm" and not cfg.vae:
        raise InputError("--stage fm needs --vae DIR (the run directory of `train-lfm --stage vae`)")
    inputs = Inputs()
    latent_shape: list | None = None  # (C, h, w) of this run's latents, where known before training
    if cfg.stage == "fm":
        inputs.vae = load_vae_dir(cfg.vae)
        latent_shape = list(inputs.vae["latents_meta"]["latent_shape"])
    if cfg.seam_checkpoint and not cfg.t_max < 1.0:
        raise InputError("seam_checkpoint needs t_max < 1 (the switch time of the coarse model)")
    for p, what in ((cfg.seam_checkpoint, "seam"), (cfg.score_checkpoint, "score")):
        if p:
            ckpt.existing_file(p, f"{what}_checkpoint")
            net = load_flow(p)[0]
            _check_latent_shape(net, p, what, cfg, latent_shape)
            setattr(inputs, what, net)
    if resume:
        _check_resume(cfg, Path(out), latent_shape, inputs)
    if cfg.stage != "fm":  # a built-in data set not installed / a missing path: before the config record
        from icml26.core.data.images import require_images

        require_images(cfg.dataset)
    return inputs


def _check_latent_shape(net: DiT, path: str, what: str, cfg: Config, latent_shape: list | None) -> None:
    """A seam / score flow model must work on this run's latents (same channels and size)."""
    a = net.arch
    theirs = [a.in_channels, a.input_size, a.input_size]
    if latent_shape is not None:
        if theirs != list(latent_shape):
            raise InputError(
                f"{what}_checkpoint {path!r} works on latents of shape {theirs}, but this run's latents "
                f"(--vae {cfg.vae}) are {list(latent_shape)}; use a flow checkpoint trained on the same VAE"
            )
    elif a.in_channels != cfg.latent_channels:
        raise InputError(
            f"{what}_checkpoint {path!r} works on latents of shape {theirs}, but this run's VAE makes "
            f"{cfg.latent_channels}-channel latents (latent_channels={cfg.latent_channels}); use a flow checkpoint "
            "trained on the same VAE"
        )


_RESUME_FIX = "resume with the run's settings or start a new --out"
# DiTArch field -> the setting that decides it
_ARCH_SETTINGS = {
    "width": "model/width",
    "depth": "model/depth",
    "heads": "model/heads",
    "in_channels": "latent_channels (the VAE)",
    "input_size": "dataset (image size)",
    "num_classes": "conditional / dataset classes",
    "patch_size": "patch_size",
    "mlp_ratio": "mlp_ratio",
}


def _shape_diff(shapes: dict[str, list[int]], module: nn.Module, prefix: str = "model") -> str | None:
    """The first tensor of ``module`` whose name or shape differs from the checkpoint's ``prefix.*``."""
    want = {f"{prefix}.{k}": list(v.shape) for k, v in module.state_dict().items()}
    have = {k: v for k, v in shapes.items() if k.startswith(prefix + ".")}
    for k, v in want.items():
        if k not in have:
            return f"{k} missing from the checkpoint"
        if have[k] != v:
            return f"{k} has shape {have[k]} in the checkpoint, {v} with these settings"
    for k in have:
        if k not in want:
            return f"the checkpoint's {k} is not in the model these settings build"
    return None


def _expect_stage(f: Path, m: dict, stage: str, kind: str) -> None:
    if m.get("stage") != stage or m.get("kind") != kind:
        raise InputError(
            f"--resume: {f} is a {m.get('stage')!r} checkpoint ({m.get('kind')}), expected the run's {stage!r} "
            f"checkpoint ({kind}); remove it to train that stage again, or choose another --out"
        )


def _check_resume(cfg: Config, out: Path, latent_shape: list | None, inputs: Inputs) -> None:
    """--resume: the checkpoints in ``out`` that this stage reads must be files of that stage whose
    tensors (names and shapes) fit the networks these settings build. InputError otherwise."""
    fix = "--resume reads it; remove it to train that stage again, or choose another --out"
    heads = {}
    for name in RUN_CHECKPOINTS:
        f = out / name
        if f.exists() and not f.is_file():
            raise InputError(
                f"--resume: {f} is a directory, not the run's checkpoint file; remove it, or choose another --out"
            )
        if f.is_file():
            heads[name] = ckpt.header(f, "checkpoint", fix)
    if cfg.stage in ("vae", "all"):
        if "vae.safetensors" in heads:
            f = out / "vae.safetensors"
            shapes, m = heads["vae.safetensors"]
            _expect_stage(f, m, "vae", "lfm-vae")
            diff = _shape_diff(shapes, VAE(int(m.get("in_channels", 1)), cfg.latent_channels, cfg.vae_width))
            if diff:
                raise InputError(
                    f"--resume: checkpoint {f} was trained with a different VAE (latent_channels {m.get('latent_channels')}, "
                    f"vae_width {m.get('width')}; these settings build latent_channels {cfg.latent_channels}, vae_width "
                    f"{cfg.vae_width}: {diff}); {_RESUME_FIX}"
                )
        if "features.safetensors" in heads:
            _expect_stage(out / "features.safetensors", heads["features.safetensors"][1], "features", "lfm-features")
    if cfg.stage not in ("fm", "all") or "checkpoint.safetensors" not in heads:
        return
    f = out / "checkpoint.safetensors"
    shapes, m = heads["checkpoint.safetensors"]
    _expect_stage(f, m, "fm", "lfm-flow")
    have = dict(m.get("arch") or {})
    if cfg.stage == "fm":
        lm, labels = inputs.vae["latents_meta"], inputs.vae["labels"]
        num_classes = int(lm["num_classes"]) if cfg.conditional and labels is not None else 0
    elif (out / "latents.safetensors").is_file():  # stage all: the run's own latent cache
        lm = ckpt.header(out / "latents.safetensors", "latent cache", fix)[1]
        latent_shape = list(
            lm.get("latent_shape") or [cfg.latent_channels, have.get("input_size", 7), have.get("input_size", 7)]
        )
        num_classes = int(lm.get("num_classes", 0)) if cfg.conditional else 0
    else:
        s = int(have.get("input_size", 7))
        latent_shape = [cfg.latent_channels, s, s]
        num_classes = int(have.get("num_classes", 0)) if cfg.conditional else 0
    want = arch_for(cfg, cfg.model, latent_shape, num_classes)
    try:
        net = DiT(want)
    except ValueError as e:
        raise InputError(f"model settings: {e}") from None
    fields = [k for k, v in want.to_dict().items() if have.get(k) != v]
    diff = _shape_diff(shapes, net) or (
        _shape_diff(shapes, net, "ema") if any(k.startswith("ema.") for k in shapes) else None
    )
    if fields or diff:
        theirs = ", ".join(f"{k} {have.get(k)}" for k in fields)
        mine = ", ".join(f"{k} {getattr(want, k)}" for k in fields)
        which = ", ".join(dict.fromkeys(_ARCH_SETTINGS.get(k, k) for k in fields))
        detail = (
            f"DiT {theirs} (preset {m.get('preset')}); these settings (model={cfg.model}) build {mine}; differing: {which}"
            if fields
            else f"DiT preset {m.get('preset')}"
        )
        raise InputError(
            f"--resume: checkpoint {f} was trained with a different model ({detail}"
            f"{'; ' + diff if diff else ''}); {_RESUME_FIX}"
        )
    ratio, scorer = m.get("keep_ratio"), m.get("scorer")
    if ratio is not None and float(ratio) != cfg.keep_ratio:
        raise InputError(
            f"--resume: checkpoint {f} was trained on keep_ratio {ratio} (scorer {scorer}), these settings give "
            f"keep_ratio {cfg.keep_ratio}; {_RESUME_FIX}"
        )
    if ratio is not None and float(ratio) < 1.0 and scorer not in (None, cfg.scorer):
        raise InputError(
            f"--resume: checkpoint {f} kept its subset with scorer {scorer}, these settings give scorer {cfg.scorer}; "
            f"{_RESUME_FIX}"
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
    """Yield ``data``/``step``/``vae``/``reduction``/``model`` records, then the summary (with ``checkpoint``).

    inputs: what validate(cfg, out, resume) returned (else it is called here)."""
    from icml26.core.seed import seed_everything

    if inputs is None:
        inputs = validate(cfg, out, resume)
    dist = dist_setup()
    seed_everything(seed)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    summary: dict = {"kind": "summary", "stage": cfg.stage}
    last_loss = math.nan
    if cfg.stage in ("vae", "all"):
        for r in _vae_stage(cfg, seed=seed, out=out, resume=resume, dist=dist, device=device):
            if r["kind"] == "step":
                last_loss = r["loss"]
            yield r
        summary["vae_checkpoint"] = str(out / "vae.safetensors")
        summary["checkpoint"] = str(out / "vae.safetensors")
    if cfg.stage in ("fm", "all"):
        vae_dir = Path(cfg.vae) if cfg.stage == "fm" else out
        for r in _fm_stage(cfg, seed=seed, out=out, resume=resume, dist=dist, vae_dir=vae_dir, inputs=inputs):
            if r["kind"] == "step":
                last_loss = r["loss"]
            if r["kind"] == "model":
                summary["parameters"] = r["parameters"]
            if r["kind"] == "reduction":
                summary["kept"] = r["kept"]
            yield r
        summary["checkpoint"] = str(out / "checkpoint.safetensors")
        summary["vae_dir"] = str(vae_dir)
    summary.update({"final_loss": last_loss, "seconds": time.perf_counter() - t0, "processes": dist.world})
    yield summary
