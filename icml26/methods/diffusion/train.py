"""``icml26 icr train``: train a small diffusers ``UNet2DModel`` (EDM preconditioning and loss) on a
data-limited subset and log the ICR as a training-time monitor beside a memorization measure of
generated samples (paper Sec. 4.2, Fig. 5/6; docs/icr.md, protocol B).

Per training size N (``train_sizes``; 0 = the whole training split):
  1. the first N images of a seeded permutation of the training split, no augmentation;
  2. AdamW steps on the EDM loss (P_mean -1.2, P_std 1.2, sigma_data 0.5), EMA of the weights;
     each step's batch and noise come from a generator seeded by (seed, N, step) (exact --resume);
  3. every ``monitor_every`` steps, with the EMA weights: the ICR at sigma* = ``monitor_sigma``
     on the training images; memorization of EDM Heun samples (nearest-neighbour ratio < 1/3 in
     pixel space, RECON for the paper's SSCD criterion); a Frechet distance of the samples in a
     small CNN's features (not Inception FID); a safetensors checkpoint;
  4. the ``result``: ``icr_min_step`` (minimum of the smoothed ICR curve),
     ``memorization_onset_step`` (first step over ``memorization_threshold``) and their difference.
The EMA U-Net is saved as ``size-<N>/unet/`` (diffusers folder) for ``icml26 icr analyze --model``.

Under ``torchrun --nproc_per_node W`` (gloo; ``icml26.core.dist``) every rank draws the same global
batch and trains on its ``batch_size / W`` rows, DDP averages the gradients, and rank 0 alone runs
the monitor, the feature network and the checkpoints. Full protocol: docs/icr.md, "Specification"."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import torch

from icml26.core import diverge
from icml26.core.data.images import load_images, require_images
from icml26.core.dist import setup, world_size
from icml26.core.errors import InputError
from icml26.core.progress import progress
from icml26.core.seed import seed_everything
from icml26.methods.diffusion import estimator as E
from icml26.methods.diffusion import features as F
from icml26.methods.diffusion import unet as U
from icml26.methods.diffusion.config import TrainConfig  # noqa: F401  (re-exported)
from icml26.methods.diffusion.unet import Schedule
from icml26.methods.lfm import ckpt
from icml26.methods.lfm.metrics import frechet_distance
from icml26.methods.lfm.nets import FeatureNet

NN_RATIO = 1.0 / 3.0


def check_monitor_sigma(sigma: float) -> None:
    Schedule("edm").check_level(sigma)


# ----------------------------------------------------------------------------- measures
def smoothed(values: list[float], window: int) -> list[float]:
    """Centred moving average; the window shrinks at the ends (window 1 = the values)."""
    h = (window - 1) // 2
    v = np.asarray(values, dtype=np.float64)
    return [float(v[max(0, i - h) : i + h + 1 + (window - 1) % 2].mean()) for i in range(len(v))]


def icr_min_step(steps: list[int], icrs: list[float], window: int) -> int | None:
    """The step of the minimum of the smoothed ICR curve (first one on ties); None for an empty curve."""
    ok = [(s, v) for s, v in zip(steps, icrs) if v is not None and math.isfinite(v)]
    if not ok:
        return None
    sm = smoothed([v for _, v in ok], window)
    return ok[int(np.argmin(sm))][0]


def onset_step(steps: list[int], fractions: list[float | None], threshold: float) -> int | None:
    """First step whose memorization fraction exceeds ``threshold``; None if none does."""
    for s, f in zip(steps, fractions):
        if f is not None and f > threshold:
            return s
    return None


def memorization(samples, train) -> tuple[float, np.ndarray]:
    """(fraction memorized, ratio per sample) of samples (M, ...) against training images (N, ...), N >= 2:
    a sample is memorized when its nearest training image is 3x closer than the second nearest (L2)."""
    a = samples.flatten(1).double()
    b = train.flatten(1).double()
    if b.shape[0] < 2:
        raise ValueError("memorization needs at least 2 training images")
    d2 = []
    for s in range(0, a.shape[0], 256):
        d = torch.cdist(a[s : s + 256], b)  # (m, N)
        d2.append(d.topk(2, dim=1, largest=False).values)
    d2 = torch.cat(d2)  # (M, 2)
    ratio = (d2[:, 0] / d2[:, 1].clamp_min(1e-12)).numpy()
    return float((ratio < NN_RATIO).mean()), ratio


# ----------------------------------------------------------------------------- data and checks
@dataclass
class TrainInputs:
    x_all: object  # uint8 (N, C, H, W) training split
    y_all: object
    x_test: object  # uint8 test split (quality reference), or None
    y_test: object
    name: str
    channels: int


def validate(cfg: TrainConfig, out: str | None, resume: bool) -> TrainInputs:
    """Every check before the config record (data, sizes, layer, resume checkpoints). InputError."""
    require_images(cfg.data)
    check_monitor_sigma(cfg.monitor_sigma)
    if cfg.batch_size % world_size():
        raise InputError(
            f"batch_size {cfg.batch_size} does not split over {world_size()} torchrun processes; "
            f"use a multiple of {world_size()} (--set batch_size=...)"
        )
    tr = load_images(cfg.data, "train")
    too_big = [n for n in cfg.train_sizes if n > len(tr)]
    if too_big:
        raise InputError(f"train_sizes {too_big} exceed the {len(tr)} training images of {cfg.data!r}")
    if any(0 < n < 2 for n in cfg.train_sizes):
        raise InputError("train_sizes must be >= 2 (the memorization measure needs two training images)")
    F.resolve_layer(
        U.build_unet(cfg.preset, image_size=cfg.image_size, in_channels=tr.images.shape[1]), cfg.feature_layer
    )
    te = None
    if cfg.quality and tr.labels is not None:
        try:
            te = load_images(cfg.data, "test")
        except InputError:
            te = None
    if resume and out is not None:
        for n in cfg.train_sizes:
            f = Path(out) / f"size-{n or len(tr)}" / "checkpoint.safetensors"
            if f.is_file():
                _, meta = ckpt.header(f, "checkpoint", "delete it to start that size over")
                want = _ckpt_meta(cfg, n or len(tr))
                for k, v in want.items():
                    if meta.get(k) != v:
                        raise InputError(
                            f"--resume: checkpoint {f} has {k} = {meta.get(k)!r}, these settings give {v!r}; "
                            f"resume with the same settings or delete {str(out)!r} to start over"
                        )
    return TrainInputs(
        tr.images,
        tr.labels,
        te.images if te is not None else None,
        te.labels if te is not None else None,
        tr.name,
        int(tr.images.shape[1]),
    )


def _ckpt_meta(cfg: TrainConfig, n: int) -> dict:
    return {
        "kind": "icr-unet",
        "train_size": n,
        "preset": cfg.preset,
        "image_size": cfg.image_size,
        "batch_size": cfg.batch_size,
        "lr": cfg.lr,
        "ema_decay": cfg.ema_decay,
        "data": str(cfg.data),
    }


def _gen(seed: int, n: int, step: int, code: int):
    return torch.Generator().manual_seed((seed * 1_000_003 + n * 10_007 + step * 7919 + code * 104_729) % (2**63 - 1))


# ----------------------------------------------------------------------------- quality network
def _feature_net(cfg: TrainConfig, inp: TrainInputs, x_all, *, seed: int, out: Path | None):
    """A classifier trained here (cached as out/features.safetensors) and the reference test features."""
    if not cfg.quality or inp.y_all is None or inp.x_test is None:
        return None, None
    net = FeatureNet(inp.channels, int(inp.y_all.max()) + 1, cfg.image_size)
    path = out / "features.safetensors" if out is not None else None
    if path is not None and path.is_file():
        t, _ = ckpt.load(path, "feature network")
        net.load_state_dict(ckpt.sub(t, "model"))
    else:
        torch.manual_seed(seed + 11)
        opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
        y = torch.from_numpy(inp.y_all)
        for step in range(cfg.feature_steps):
            g = _gen(seed, 0, step, 5)
            i = torch.randint(len(x_all), (64,), generator=g)
            loss = torch.nn.functional.cross_entropy(net((x_all[i] + 1) / 2), y[i])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        if path is not None:
            ckpt.save(
                path, ckpt.prefixed(net.state_dict(), "model"), {"kind": "icr-features", "steps": cfg.feature_steps}
            )
    net.eval()
    xt = F.prepare_images(inp.x_test[:2000], cfg.image_size, inp.channels)
    with torch.no_grad():
        ref = net.features((xt + 1) / 2).double().numpy()
        acc = float((net((xt + 1) / 2).argmax(1).numpy() == inp.y_test[:2000]).mean())
    return (net, acc), ref


# ----------------------------------------------------------------------------- one training size
def _train_size(
    cfg: TrainConfig,
    inp: TrainInputs,
    n_req: int,
    *,
    seed: int,
    out: Path | None,
    previous: list[dict],
    x_full,
    quality,
    dist,
) -> Iterator[dict]:
    n_all = len(x_full)
    n = n_req or n_all
    perm = np.random.default_rng(seed).permutation(n_all)[:n]
    x = x_full[torch.from_numpy(np.sort(perm))]  # (n, C, H, W) in [-1, 1]
    sdir = out / f"size-{n}" if out is not None else None
    path = sdir / "checkpoint.safetensors" if sdir is not None else None

    # 1. model, optimizer, EMA; resume from the checkpoint of this size
    torch.manual_seed(seed)
    net = U.build_unet(cfg.preset, image_size=cfg.image_size, in_channels=inp.channels)
    ema = U.build_unet(cfg.preset, image_size=cfg.image_size, in_channels=inp.channels)
    ema.load_state_dict(net.state_dict())
    ema.eval()
    opt = torch.optim.AdamW(net.parameters(), lr=cfg.lr)
    start, elapsed0 = 0, 0.0
    if path is not None and path.is_file():  # every rank loads the same checkpoint
        t, m = ckpt.load(path)
        net.load_state_dict(ckpt.sub(t, "model"))
        ema.load_state_dict(ckpt.sub(t, "ema"))
        ckpt.optim_from_flat(opt, t, m["param_groups"])
        start, elapsed0 = int(m["step"]), float(m.get("seconds", 0.0))
    hist = [r for r in previous if r.get("kind") == "step" and r.get("train_size") == n and r["step"] <= start]
    yield from hist  # replayed monitor points (records already in records.jsonl)
    steps_seen = [r["step"] for r in hist]
    icrs = [r["icr"] for r in hist]
    mems = [r["memorization_fraction"] for r in hist]
    n_params = sum(p.numel() for p in net.parameters())
    xm = x[: cfg.monitor_images]
    noise = torch.randn(
        (cfg.memorization_samples, inp.channels, cfg.image_size, cfg.image_size), generator=_gen(seed, n, 0, 3)
    )
    aug = {"shift_px": cfg.shift_px, "hflip": cfg.hflip, "jitter": cfg.jitter}
    sched = U.Schedule("edm", cfg.sigma_data)
    t_train = t_monitor = t_icr = t_sample = 0.0
    n_train_steps = n_monitors = 0
    window: list[float] = []
    t0 = time.perf_counter()
    net.train()
    model = dist.wrap(net)  # DDP under torchrun: the gradients are averaged over the ranks' slices
    diverged = None
    with progress(cfg.steps - start, f"icr train size {n} (steps)") as bar:
        try:
            for step in range(start, cfg.steps):
                # 2. one EDM training step
                ts = time.perf_counter()
                g = _gen(seed, n, step, 1)
                i = torch.randint(n, (cfg.batch_size,), generator=g)
                z = torch.randn(cfg.batch_size, generator=g)
                eps = torch.randn((cfg.batch_size, *x.shape[1:]), generator=g)
                if dist.world > 1:
                    i, z, eps = dist.shard(i, z, eps)
                loss = U.edm_loss(model, x[i], z, eps, p_mean=cfg.p_mean, p_std=cfg.p_std, sigma_data=cfg.sigma_data)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                d = min(cfg.ema_decay, (1.0 + step) / (10.0 + step))
                with torch.no_grad():
                    for pe, pn in zip(ema.parameters(), net.parameters()):
                        pe.mul_(d).add_(pn.detach(), alpha=1.0 - d)
                window.append(float(loss.detach()))
                diverge.check(step + 1, loss=window[-1])  # a non-finite loss stops this size (Diverged)
                bar.advance(1, size=n, loss=window[-1])
                t_train += time.perf_counter() - ts
                n_train_steps += 1
                if (step + 1) % cfg.monitor_every and step + 1 != cfg.steps:
                    continue
                mean_loss = dist.mean(float(np.mean(window)))
                window = []
                if not dist.main:  # rank 0 monitors and checkpoints; the others wait for it
                    dist.barrier()
                    continue
                # 3a. ICR monitor on the training images
                tm = time.perf_counter()
                h = F.view_features(
                    ema,
                    xm,
                    sched,
                    cfg.monitor_sigma,
                    views=cfg.monitor_views,
                    layer=cfg.feature_layer,
                    seed=seed + 7,
                    **aug,
                )
                r = E.icr(h, shrinkage_rel=cfg.shrinkage_rel)
                t_icr += time.perf_counter() - tm
                # 3b. memorization of generated samples
                tsm = time.perf_counter()
                samples = U.edm_sample(ema, noise, steps=cfg.sampler_steps, sigma_data=cfg.sigma_data)
                t_sample += time.perf_counter() - tsm
                frac, ratio = memorization(samples, x)
                # 3c. sample quality
                fd = None
                if quality[0] is not None:
                    with torch.no_grad():
                        fg = quality[0][0].features((samples + 1) / 2).double().numpy()
                    fd = frechet_distance(quality[1], fg)
                rec = {
                    "kind": "step",
                    "train_size": n,
                    "step": step + 1,
                    "loss": mean_loss,
                    "icr": r.icr,
                    "memorization_fraction": frac,
                    "nn_ratio_median": float(np.median(ratio)),
                    "frechet_distance": fd,
                    "shrinkage": r.shrinkage,
                    "trace_sigma_s": r.trace_sigma_s,
                    "trace_sigma_xi": r.trace_sigma_xi,
                    "seconds": elapsed0 + time.perf_counter() - t0,
                }
                t_monitor += time.perf_counter() - tm
                n_monitors += 1
                steps_seen.append(step + 1)
                icrs.append(r.icr)
                mems.append(frac)
                # 3d. checkpoint (then the record: a resumed run recomputes nothing it has printed)
                if path is not None:
                    flat, groups = ckpt.optim_to_flat(opt)
                    ckpt.save(
                        path,
                        {**ckpt.prefixed(net.state_dict(), "model"), **ckpt.prefixed(ema.state_dict(), "ema"), **flat},
                        {
                            **_ckpt_meta(cfg, n),
                            "step": step + 1,
                            "seconds": rec["seconds"],
                            "param_groups": groups,
                            "seed": seed,
                        },
                    )
                dist.barrier()
                yield rec
        except diverge.Diverged as exc:
            diverged = exc
    if diverged is not None:
        if dist.main:
            diverge.warn(diverged, f"icr train size {n}")
            yield {"kind": "result", "train_size": n, "steps": cfg.steps, **diverge.diverged_fields(diverged)}
        return
    # 4. result for this size
    if not dist.main:
        return
    s_min = icr_min_step(steps_seen, icrs, cfg.smoothing_window)
    s_on = onset_step(steps_seen, mems, cfg.memorization_threshold)
    unet_dir = None
    if sdir is not None:
        unet_dir = U.save_unet(
            ema,
            sdir / "unet",
            {
                "schedule": "edm",
                "sigma_data": cfg.sigma_data,
                "data": str(cfg.data),
                "train_size": n,
                "step": cfg.steps,
                "image_size": cfg.image_size,
            },
        )
    icr_at = dict(zip(steps_seen, icrs))
    yield {
        "kind": "result",
        "train_size": n,
        "icr_min_step": s_min,
        "icr_min": icr_at.get(s_min) if s_min else None,
        "memorization_onset_step": s_on,
        "onset_minus_icr_min_steps": (s_on - s_min) if (s_on is not None and s_min is not None) else None,
        "icr_min_before_onset": (s_min < s_on) if (s_on is not None and s_min is not None) else None,
        "final_memorization_fraction": mems[-1] if mems else None,
        "final_icr": icrs[-1] if icrs else None,
        "steps": cfg.steps,
        "parameters": int(n_params),
        "monitor_images": int(len(xm)),
        "train_step_seconds": t_train / n_train_steps if n_train_steps else None,
        "icr_eval_seconds": t_icr / n_monitors if n_monitors else None,
        "sample_seconds": t_sample / n_monitors if n_monitors else None,
        "unet_dir": str(unet_dir) if unet_dir else None,
        "diverged": False,
    }


def run(
    cfg: TrainConfig,
    *,
    inputs: TrainInputs,
    seed: int = 0,
    out: str | Path | None = None,
    previous: list[dict] | None = None,
) -> Iterator[dict]:
    """Yield ``step`` records (monitor points), one ``result`` per training size, then the ``summary``.

    previous: the records of an interrupted run (``resume_records``): finished sizes are replayed,
    an unfinished size continues from its checkpoint."""
    dist = setup()
    seed_everything(seed)
    previous = previous or []
    outp = Path(out) if out is not None else None
    x_full = F.prepare_images(inputs.x_all, cfg.image_size, inputs.channels)  # (N, C, S, S) in [-1, 1]
    done = {r["train_size"]: r for r in previous if r.get("kind") == "result"}
    qnet, ref = _feature_net(cfg, inputs, x_full, seed=seed, out=outp) if dist.main else (None, None)
    if qnet is not None:
        yield {
            "kind": "feature_network",
            "test_accuracy": qnet[1],
            "note": "Frechet distance in a CNN classifier trained here (not Inception)",
        }
    results = []
    for n_req in cfg.train_sizes:
        n = n_req or len(x_full)
        if n in done:
            yield from (r for r in previous if r.get("kind") == "step" and r.get("train_size") == n)
            yield done[n]
            results.append(done[n])
            continue
        for rec in _train_size(
            cfg, inputs, n_req, seed=seed, out=outp, previous=previous, x_full=x_full, quality=(qnet, ref), dist=dist
        ):
            if rec["kind"] == "result":
                results.append(rec)
            yield rec
    small = [r for r in results if r["train_size"] < len(x_full) and not r.get("diverged")]
    before = [r["icr_min_before_onset"] for r in small]
    yield {
        "kind": "summary",
        "sizes": [r["train_size"] for r in results],
        "icr_min_steps": [r.get("icr_min_step") for r in results],
        "memorization_onset_steps": [r.get("memorization_onset_step") for r in results],
        "diverged": [r["train_size"] for r in results if r.get("diverged")],
        "claim_icr_min_before_onset": (
            all(b is True for b in before) if before and all(b is not None for b in before) else None
        ),
        "memorization_threshold": cfg.memorization_threshold,
        "nn_ratio_threshold": NN_RATIO,
        "torch_threads": torch.get_num_threads(),
        "processes": dist.world,
    }
