"""Training and evaluation of fixed vs stochastic modality pairing, with SAM / label smoothing / SWA.

Source: Lee & Yoon, "Understanding Multimodal Learning: A Loss Landscape Smoothness Perspective"
(ICML 2026; official code johnjaejunlee95/multimodal-flatness-perspective, ``main.py --shuffling``);
docs/modality-pairing.md. Arms (one ``result`` per (pairing, reg, fusion, modality)):
  unimodal    one modality's encoder + Linear (reg ``none``; or the first reg asked for)
  fixed       the data set's own pairs (SML)
  stochastic  :class:`~icml26.methods.multimodal.pairing.StochasticPairing` on the train split (DML)
  reg: none | sam (Foret et al. 2021, rho; davda54/sam's two-step update) | ls (label smoothing,
  ``torch.nn.functional.cross_entropy(label_smoothing=...)``, as the official ``--label_smoothing``) |
  swa (Izmailov et al. 2018: torch.optim.swa_utils.AveragedModel over the epochs from
  ``swa_start_ratio``; no BatchNorm to update).
Protocol (official): SGD (momentum, weight decay; here Adam by default, as the official Kinetics-Sounds
setting, to converge in few CPU epochs), StepLR x0.1, 90/10 train/val split of the train
set, test accuracy at the best-validation epoch (SWA: the averaged model), over ``seeds`` seeds.
RECON: encoder sizes, epochs and learning rate scaled to a CPU (docs/modality-pairing.md); the
corrupted / missing / PGD / shift evaluations' magnitudes are in standardised input units (each
modality scaled by its train mean and std).
"""

from __future__ import annotations

import copy
import math
import time
from pathlib import Path
from typing import Iterator

import numpy as np
import torch
import torch.nn.functional as F

from icml26.core import diverge
from icml26.core.data.multimodal import AVDigitsSpec, check_source, load_multimodal
from icml26.core.errors import InputError
from icml26.core.output import previous_results
from icml26.core.progress import progress
from icml26.core.verdict import seed_interval, verdict
from icml26.methods.multimodal import flatness as fl
from icml26.methods.multimodal.config import FUSIONS, PAIRINGS, REGS, Config  # noqa: F401  (re-exported)
from icml26.methods.multimodal.flatness import accuracy, landscape_2d, plot_landscapes
from icml26.methods.multimodal.models import Fusion, Unimodal, trainable
from icml26.methods.multimodal.pairing import StochasticPairing


def _spec(cfg: Config):
    return AVDigitsSpec(
        seed=cfg.av_seed,
        train_size=cfg.av_train_size,
        test_size=cfg.av_test_size,
        clips_per_class=cfg.av_clips_per_class,
    )


def validate(cfg: Config) -> None:
    """Checks that need no training (InputError): the data source, the modality names, sizes."""
    check_source(cfg.data)
    if cfg.data == "av-digits":
        _spec(cfg)  # raises InputError on bad av_* settings
        bad = [m for m in cfg.modalities + cfg.resample if m not in ("image", "audio", "text")]
        if bad:
            raise InputError(f"modality {bad[0]!r}: av-digits has image, audio, text")
    mods = cfg.modalities or (("image", "audio") if cfg.data == "av-digits" else ())
    if mods and len(mods) < 2 and any(p != "unimodal" for p in cfg.pairing):
        raise InputError("modalities: fixed / stochastic pairing needs at least 2 modalities")
    for m in cfg.resample:
        if mods and m not in mods:
            raise InputError(f"resample: {m!r} is not one of the modalities {', '.join(mods)}")


def load(cfg: Config, progress=None):
    """The data set (MultimodalSet) with the configured modalities; InputError on a bad folder."""
    mods = cfg.modalities or (("image", "audio") if cfg.data == "av-digits" else None)
    ms = load_multimodal(cfg.data, mods, spec=_spec(cfg) if cfg.data == "av-digits" else None, progress=progress)
    for m in cfg.resample:
        if m not in ms.modalities:
            raise InputError(f"resample: {m!r} is not one of the modalities {', '.join(ms.modalities)}")
    if len(ms.modalities) < 2 and any(p != "unimodal" for p in cfg.pairing):
        raise InputError("fixed / stochastic pairing needs at least 2 modalities")
    return ms


# ----------------------------------------------------------------------------- data plumbing
class Split:
    """Standardised tensors of one split: xs {modality: (N, ...)} float32, y (N,) int64."""

    def __init__(self, xs: dict, y):
        self.xs = xs
        self.y = torch.as_tensor(y, dtype=torch.int64)

    def __len__(self):
        return int(self.y.shape[0])

    def subset(self, idx):
        idx = torch.as_tensor(np.asarray(idx), dtype=torch.int64)
        return Split({k: v[idx] for k, v in self.xs.items()}, self.y[idx])

    def batches(self, batch_size: int = 256, replace: dict | None = None):
        """A callable yielding ({modality: x}, y) batches in order (``replace``: modality -> tensor)."""
        xs = {**self.xs, **(replace or {})}

        def gen():
            for i in range(0, len(self), batch_size):
                yield {k: v[i : i + batch_size] for k, v in xs.items()}, self.y[i : i + batch_size]

        return gen


def _prepare(ms, cfg: Config, seed: int):
    """Standardise each modality with train statistics; split train into train / val (seeded, stratified)."""
    rng = np.random.default_rng([seed, 7])
    y = ms.y_train
    n_avail = len(y)
    keep = np.arange(n_avail)
    if cfg.train_size and cfg.train_size < n_avail:
        keep = np.sort(rng.permutation(n_avail)[: cfg.train_size])
    val, tr = [], []
    for c in np.unique(y[keep]):
        idx = keep[y[keep] == c]
        idx = idx[rng.permutation(len(idx))]
        k = max(1, int(round(cfg.val_ratio * len(idx)))) if len(idx) > 1 else 0
        val += list(idx[:k])
        tr += list(idx[k:])
    tr, val = np.sort(tr), np.sort(val)
    stats = {m: (float(ms.train[m][tr].mean()), float(ms.train[m][tr].std()) + 1e-6) for m in ms.modalities}

    def z(m, a):
        mu, sd = stats[m]
        return torch.from_numpy(((a - mu) / sd).astype(np.float32))

    train = Split({m: z(m, ms.train[m][tr]) for m in ms.modalities}, y[tr])
    valid = Split({m: z(m, ms.train[m][val]) for m in ms.modalities}, y[val])
    test = Split({m: z(m, ms.test[m]) for m in ms.modalities}, ms.y_test)
    variants = {m: {v: z(m, a) for v, a in d.items()} for m, d in ms.test_variants.items() if m in ms.modalities}
    return train, valid, test, variants


# ----------------------------------------------------------------------------- one training run
def _sam_step(model, params, loss_fn, xs, y, opt, rho):
    """SAM (Foret et al. 2021), as davda54/sam: e = rho g / ||g||, gradient at w + e, step from w."""
    loss = loss_fn(model(xs), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    grads = [p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p) for p in params]
    norm = torch.sqrt(sum((g * g).sum() for g in grads)) + 1e-12
    eps = [rho * g / norm for g in grads]
    with torch.no_grad():
        for p, e in zip(params, eps):
            p.add_(e)
    opt.zero_grad(set_to_none=True)
    loss_fn(model(xs), y).backward()
    with torch.no_grad():
        for p, e in zip(params, eps):
            p.sub_(e)
    opt.step()
    return float(loss.detach())


def train_one(
    cfg: Config,
    train: Split,
    valid: Split,
    *,
    pairing: str,
    reg: str,
    fusion: str,
    modality: str,
    num_classes: int,
    seed: int,
    on_epoch=None,
):
    """Train one arm; returns (model for evaluation, history list of (epoch, train_loss, val_accuracy), wall_s).

    pairing ``stochastic`` loads each training batch through StochasticPairing (fresh pairs each epoch)."""
    torch.manual_seed(seed)
    shapes = {m: tuple(v.shape[1:]) for m, v in train.xs.items()}
    if pairing == "unimodal":
        model = Unimodal(modality, shapes[modality], num_classes, cfg.embed_dim, cfg.width)
    else:
        model = Fusion(shapes, num_classes, fusion, cfg.embed_dim, cfg.width)
    params = trainable(model)
    if cfg.optimizer == "sgd":
        opt = torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
    else:
        opt = torch.optim.Adam(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    step_at = max(1, int(round(cfg.lr_step_ratio * cfg.epochs)))
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=step_at, gamma=0.1)
    ls = cfg.label_smoothing if reg == "ls" else 0.0

    def loss_fn(logits, y):
        return F.cross_entropy(logits, y, label_smoothing=ls)

    ds = StochasticPairing(
        train.xs,
        train.y.numpy(),
        resample=cfg.resample or None,
        p=cfg.resample_p,
        allow_self=cfg.allow_self,
        enabled=pairing == "stochastic",
        seed=seed,
    )
    swa = torch.optim.swa_utils.AveragedModel(model) if reg == "swa" else None
    swa_from = min(cfg.epochs - 1, int(math.floor(cfg.swa_start_ratio * cfg.epochs)))
    gen = np.random.default_rng([seed, 11])
    best, best_state, history = -1.0, None, []
    t0 = time.perf_counter()
    step = 0
    for epoch in range(cfg.epochs):
        model.train()
        ds.set_epoch(epoch)
        order = gen.permutation(len(train))
        tot, n = 0.0, 0
        for i in range(0, len(order), cfg.batch_size):
            b = ds.batch(order[i : i + cfg.batch_size])
            y = torch.as_tensor(b.pop("label"))
            xs = b
            if reg == "sam":
                loss = _sam_step(model, params, loss_fn, xs, y, opt, cfg.sam_rho)
            else:
                loss_t = loss_fn(model(xs), y)
                opt.zero_grad(set_to_none=True)
                loss_t.backward()
                opt.step()
                loss = float(loss_t.detach())
            diverge.check(step, train_loss=loss)  # a non-finite loss stops this run (Diverged)
            step += 1
            tot += loss * int(y.shape[0])
            n += int(y.shape[0])
        sched.step()
        if swa is not None and epoch >= swa_from:
            swa.update_parameters(model)
        evaluated = swa.module if (swa is not None and epoch >= swa_from) else model
        va = accuracy(evaluated, valid.batches())
        history.append((epoch, tot / max(n, 1), va))
        if on_epoch is not None:
            on_epoch(epoch, tot / max(n, 1), va)
        if swa is None and va > best:
            best, best_state = va, copy.deepcopy(model.state_dict())
    wall = time.perf_counter() - t0
    if swa is not None:
        final = copy.deepcopy(swa.module)
    else:
        model.load_state_dict(best_state)
        final = model
    final.eval()
    return final, history, wall


def evaluate(cfg: Config, model, train: Split, test: Split, variants: dict, *, seed: int, modality: str) -> dict:
    """Accuracy, robustness and flatness metrics of one trained model (flat dict of the record fields)."""
    used = model.modalities
    out: dict = {"test_accuracy": fl.accuracy(model, test.batches())}
    g = torch.Generator().manual_seed(seed + 99)
    rob = (
        test
        if not cfg.robust_samples or cfg.robust_samples >= len(test)
        else test.subset(np.sort(np.random.default_rng([seed, 5]).permutation(len(test))[: cfg.robust_samples]))
    )
    for m in test.xs:
        if m not in used:
            out[f"corrupted_accuracy_{m}"] = out[f"missing_accuracy_{m}"] = out[f"pgd_accuracy_{m}"] = None
            continue
        x = test.xs[m]
        out[f"corrupted_accuracy_{m}"] = fl.accuracy(
            model, test.batches(replace={m: x + cfg.corrupt_std * torch.randn(x.shape, generator=g)})
        )
        out[f"missing_accuracy_{m}"] = fl.accuracy(model, test.batches(replace={m: torch.zeros_like(x)}))
        out[f"pgd_accuracy_{m}"] = fl.pgd_accuracy(
            model, rob.batches(), m, eps=cfg.pgd_eps, steps=cfg.pgd_steps, seed=seed
        )
        for v, xv in variants.get(m, {}).items():
            out[f"{v}_accuracy_{m}"] = fl.accuracy(model, test.batches(replace={m: xv}))
    if cfg.hessian_samples:
        hs = (
            train
            if cfg.hessian_samples >= len(train)
            else train.subset(np.sort(np.random.default_rng([seed, 3]).permutation(len(train))[: cfg.hessian_samples]))
        )
        out["hessian_top_eig"] = fl.hessian_top_eig(model, hs.batches(256), iters=cfg.hessian_iters, seed=seed)
        out["hessian_trace"] = fl.hutchinson_trace(model, hs.batches(256), samples=cfg.hutchinson_samples, seed=seed)
    else:
        out["hessian_top_eig"] = out["hessian_trace"] = None
    out["weight_noise_loss_gap"] = fl.weight_noise_gap(
        model, rob.batches(), sigma=cfg.noise_std, draws=cfg.noise_draws, seed=seed
    )
    out["loss_curve"] = fl.random_direction_curve(
        model, rob.batches(), cfg.loss_curve_radii, directions=cfg.loss_curve_directions, seed=seed
    )
    return out


def _arms(cfg: Config, modalities) -> list[tuple[str, str, str, str]]:
    arms = []
    if "unimodal" in cfg.pairing:
        r = "none" if "none" in cfg.reg else cfg.reg[0]
        arms += [("unimodal", r, "none", m) for m in modalities]
    for p in ("fixed", "stochastic"):
        if p in cfg.pairing:
            arms += [(p, r, f, "all") for f in cfg.fusion for r in cfg.reg]
    return arms


def _ci(values) -> list[float] | None:
    """95% Student-t interval of the mean over seeds; None with one seed (never zero width)."""
    return seed_interval([x for x in values if x is not None])


def run(cfg: Config, *, seed: int = 0, out=None, previous=None, data=None) -> Iterator[dict]:
    """Yield ``step`` records (per arm, seed, epoch) and one ``result`` per (pairing, reg, fusion, modality),
    then the summary. ``data``: the loaded MultimodalSet (default ``load(cfg)``); ``previous``: the records
    of an interrupted run (--resume): its finished arms are replayed (their steps, then their result)."""
    ms = data if data is not None else load(cfg)
    seeds = [seed + i for i in range(cfg.seeds)]
    prev = previous_results(previous, "pairing", "reg", "fusion", "modality")
    prev_steps: dict = {}
    for r in previous or ():
        if r.get("kind") == "step":
            prev_steps.setdefault((r.get("pairing"), r.get("reg"), r.get("fusion"), r.get("modality")), []).append(r)
    landscapes = []
    results = []
    arms = _arms(cfg, ms.modalities)
    with progress(len(arms) * len(seeds) * cfg.epochs, "modality-pairing epochs") as bar:
        for arm in arms:
            rec = yield from _run_arm(cfg, arm, ms, seeds, prev, prev_steps, out, landscapes, bar)
            results.append(rec)
    if landscapes and out is not None:
        plot_landscapes(landscapes, Path(out) / "loss_landscape.png")
    yield summary(results, ms)


def _run_arm(cfg: Config, arm, ms, seeds, prev, prev_steps, out, landscapes, bar):
    """One arm over the seeds: yields its step records and its result (returned too). A seed whose
    training diverges stops the arm: its result says so (``diverged``) and carries no figures."""
    pairing, reg, fusion, modality = arm
    if arm in prev:
        yield from prev_steps.get(arm, [])
        bar.advance(len(seeds) * cfg.epochs)
        yield prev[arm]
        return prev[arm]
    per_seed, walls = [], []
    for s in seeds:
        train, valid, test, variants = _prepare(ms, cfg, s)
        steps = []

        def on_epoch(e, l, v):
            steps.append((e, l, v))
            bar.advance(1, arm=f"{pairing}/{reg}/{fusion}", seed=s, loss=l, val_acc=v)

        try:
            model, hist, wall = train_one(
                cfg,
                train,
                valid,
                pairing=pairing,
                reg=reg,
                fusion=fusion,
                modality=modality,
                num_classes=ms.num_classes,
                seed=s,
                on_epoch=on_epoch,
            )
        except diverge.Diverged as exc:
            diverge.warn(exc, f"modality-pairing {pairing}/{reg}/{fusion}/{modality} seed {s}")
            rec = {"kind": "result", "pairing": pairing, "reg": reg, "fusion": fusion, "modality": modality}
            rec.update({"test_accuracy": None, "test_accuracy_ci": None, "seeds": seeds, "diverged_seed": s})
            rec.update(diverge.diverged_fields(exc))
            yield rec
            return rec
        for e, l, v in steps:
            yield {
                "kind": "step",
                "pairing": pairing,
                "reg": reg,
                "fusion": fusion,
                "modality": modality,
                "seed": s,
                "epoch": e,
                "train_loss": l,
                "val_accuracy": v,
            }
        metrics = evaluate(cfg, model, train, test, variants, seed=s, modality=modality)
        metrics["val_accuracy"] = max(h[2] for h in hist)
        per_seed.append(metrics)
        walls.append(wall)
        if cfg.landscape_points and s == seeds[0] and out is not None:
            sub = train.subset(np.arange(min(len(train), 512)))
            c, z = landscape_2d(model, sub.batches(256), points=cfg.landscape_points, span=cfg.landscape_span, seed=s)
            landscapes.append((f"{pairing} {reg} {fusion if pairing != 'unimodal' else modality}", c, z))
    rec = {"kind": "result", "pairing": pairing, "reg": reg, "fusion": fusion, "modality": modality}
    keys = [k for k in per_seed[0] if k != "loss_curve"]
    for k in keys:
        vals = [m.get(k) for m in per_seed]
        rec[k] = float(np.mean(vals)) if all(v is not None for v in vals) else None
        if k in ("test_accuracy", "hessian_top_eig"):
            rec[f"{k}_ci"] = _ci(vals)
            rec[f"{k}_seeds"] = vals
    rec["loss_curve_radii"] = list(cfg.loss_curve_radii)
    rec["loss_curve"] = [float(x) for x in np.mean([m["loss_curve"] for m in per_seed], axis=0)]
    rec["train_wall_s"] = float(np.mean(walls))
    rec["seeds"] = seeds
    rec.update(diverge.diverged_fields(None))
    yield rec
    return rec


def summary(results: list[dict], ms) -> dict:
    """The summary record: best multimodal arm, best unimodal accuracy, and the stochastic - fixed gaps."""
    s: dict = {"kind": "summary", "data": ms.name, "modalities": list(ms.modalities), "results": len(results)}
    uni = [r for r in results if r["pairing"] == "unimodal"]
    multi = [r for r in results if r["pairing"] != "unimodal"]
    if uni:
        s["best_unimodal_accuracy"] = max(
            (r["test_accuracy"] for r in uni if r.get("test_accuracy") is not None), default=None
        )
    if multi:
        rows = [dict(r, arm=f"{r['pairing']}/{r['reg']}/{r['fusion']}") for r in multi]
        # best_arm only when its seed interval separates it; null with one seed or a tie
        s.update(verdict(rows, "test_accuracy", "arm", lower=False, ci_key="test_accuracy_ci", metric="arm"))
        scored = [r for r in rows if r.get("test_accuracy") is not None and not r.get("diverged")]
        s["best_test_accuracy"] = max((r["test_accuracy"] for r in scored), default=None)
    s["diverged"] = [
        f"{r['pairing']}/{r['reg']}/{r['fusion']}/{r['modality']}" for r in results if r.get("diverged") is True
    ]
    by = {(r["pairing"], r["reg"], r["fusion"]): r for r in multi}
    gaps = [
        by[("stochastic", r, f)]["test_accuracy"] - by[("fixed", r, f)]["test_accuracy"]
        for (p, r, f) in by
        if p == "fixed"
        and ("stochastic", r, f) in by
        and by[("stochastic", r, f)]["test_accuracy"] is not None
        and by[(p, r, f)]["test_accuracy"] is not None
    ]
    if gaps:
        s["stochastic_minus_fixed_accuracy"] = float(np.mean(gaps))
    return s
