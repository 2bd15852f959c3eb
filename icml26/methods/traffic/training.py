"""Training pieces of the traffic harness: the inputs container, windows and tensors, model
construction, road pre-training, lane training and the fitted forecaster (MiniTraffic, its
ablations and the learned baselines). ``harness`` re-exports every name."""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass

import numpy as np
import torch

from icml26.core import diverge
from icml26.core.progress import progress
from icml26.core.seed import seed_everything
from icml26.methods.traffic import baselines as B
from icml26.methods.traffic import data as D
from icml26.methods.traffic.config import (  # noqa: F401  (re-exported: H.Config, H.MODELS)
    DETERMINISTIC,
    MINI,
    MODELS,
    PRETRAINED_VARIANTS,
    Config,
)
from icml26.methods.traffic.minitraffic import MiniTraffic, cluster_graph, fda


@dataclass
class Inputs:
    """The lane series, the road series for pre-training (or None) and the splits."""

    lanes: object  # SensorSeries
    roads: object | None
    split: object  # data.Split of the lane series
    road_rows: tuple[int, int]
    dataset: str
    groups: list | None = None
    fractions: tuple[float, ...] = ()  # the lane fractions that fit at least one window
    models: tuple[str, ...] = ()  # the models that can run (pre-trained variants need road data)
    skipped: list = dataclasses.field(default_factory=list)  # ``skipped`` records (what, why)
    road_source: str = ""


def _windows(series, rows, cfg: Config):
    starts = D.window_starts(series.segments(), rows, cfg.input_steps + cfg.max_horizon)
    x, y = D.make_windows(series.values, starts, cfg.input_steps, cfg.max_horizon)
    tod, dow = D.time_features(series.timestamps, starts, cfg.input_steps, series.step_s)
    return {"x": x, "y": y, "tod": tod, "dow": dow, "starts": starts}


def slots_per_day(series) -> int:
    return max(1, int(round(86400 / series.step_s)))


# ----------------------------------------------------------------------------- training


def _tensors(w, scaler, device, null: float | None = None):
    """(x, y, tod, dow) tensors, scaled; with a null value also the mask of the targets that are
    not null (a fifth tensor), for the masked training loss."""
    out = (
        torch.as_tensor(scaler.transform(w["x"]), dtype=torch.float32, device=device),
        torch.as_tensor(scaler.transform(w["y"]), dtype=torch.float32, device=device),
        torch.as_tensor(w["tod"], device=device),
        torch.as_tensor(w["dow"], device=device),
    )
    if null is None:
        return out

    return (*out, torch.as_tensor(D.valid_mask(w["y"], null), device=device))


def _l1(pred, y, mask):
    """Mean absolute error, over the targets that are not null when a mask is given."""
    if mask is None:
        return (pred - y).abs().mean()
    m = mask.to(pred.dtype)
    return ((pred - y).abs() * m).sum() / m.sum().clamp_min(1.0)


def predict(model, x, tod, dow, batch: int = 256):
    """Forecasts of a torch model in eval mode, no gradients: (W, H, N) tensor (scaled)."""
    model.eval()
    out = []
    with torch.no_grad():
        for i in range(0, x.shape[0], batch):
            out.append(model(x[i : i + batch], tod[i : i + batch], dow[i : i + batch]))
    return torch.cat(out)


def fit(
    model, params, train, val, cfg: Config, *, gen, epochs: int, lr: float, on_epoch=None, desc: str = "traffic"
) -> dict:
    """Adam on the L1 loss (scaled values) with early stopping on validation MAE; keeps the best
    weights. train / val: (x, y, tod, dow) tensors. on_epoch(epoch) runs before each epoch.
    A non-finite loss or parameter raises core.diverge.Diverged (step: optimizer steps)."""
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=cfg.weight_decay)
    x, y, tod, dow = train[:4]
    mask = train[4] if len(train) > 4 else None
    vmask = val[4] if len(val) > 4 else None
    best, best_state, bad, done, step = math.inf, None, 0, 0, 0
    per_epoch = -(-int(x.shape[0]) // cfg.batch_size)
    with progress(epochs * per_epoch, desc) as bar:
        for ep in range(epochs):
            if on_epoch is not None:
                on_epoch(ep)
            model.train()
            perm = torch.randperm(x.shape[0], generator=gen).to(x.device)
            tot, nb = 0.0, 0
            for i in range(0, x.shape[0], cfg.batch_size):
                b = perm[i : i + cfg.batch_size]
                loss = _l1(model(x[b], tod[b], dow[b]), y[b], None if mask is None else mask[b])
                step += 1
                diverge.check(step, loss=loss.detach())
                opt.zero_grad()
                loss.backward()
                opt.step()
                tot, nb = tot + float(loss.detach()), nb + 1
                bar.advance(1, epoch=ep + 1, loss=tot / nb)
            diverge.check_params(step, model.parameters())
            done = ep + 1
            v = float(_l1(predict(model, val[0], val[2], val[3]), val[1], vmask))
            bar.set(val_mae_scaled=v, best_val=min(best, v))
            if v < best - 1e-6:
                best, bad = v, 0
                best_state = {k: t.detach().clone() for k, t in model.state_dict().items()}
            else:
                bad += 1
                if bad >= cfg.patience:
                    break
    if best_state is not None:
        model.load_state_dict(best_state)
    return {"val_mae_scaled": best, "epochs_run": done}


def make_model(name: str, cfg: Config, n_nodes: int, slots: int):
    L, H = cfg.input_steps, cfg.max_horizon
    if name == "dlinear":
        return B.DLinear(L, H)
    if name == "patchtst":
        return B.PatchTST(L, H, d_model=cfg.d_model, n_heads=cfg.n_heads, d_ff=cfg.d_ff, n_layers=cfg.n_layers)
    if name == "stid":
        return B.STID(L, H, n_nodes, slots)
    if name == "graph":
        return B.GraphWaveNet(L, H, n_nodes)
    if name in MINI:
        return MiniTraffic(
            L,
            H,
            patch_len=cfg.patch_len,
            stride=cfg.patch_stride,
            d_model=cfg.d_model,
            n_layers=cfg.n_layers,
            n_heads=cfg.n_heads,
            d_ff=cfg.d_ff,
            use_graph=name != "minitraffic-nocluster",
        )
    raise ValueError(f"no torch model named {name!r}")


def n_params(model) -> int:
    return int(sum(p.numel() for p in model.parameters()))


def _graph_from(model, x, cfg: Config, seed: int):
    """Build the small graphs once: entity representations averaged over training windows."""
    model.eval()
    with torch.no_grad():
        reps = torch.cat([model.representations(x[i : i + 256]) for i in range(0, x.shape[0], 256)]).mean(0)  # (N, d)
    model.set_graph(
        cluster_graph(reps.cpu().numpy().astype(np.float64), k=cfg.graph_k, cluster_size=cfg.cluster_size, seed=seed)
    )


def pretrain(variant: str, cfg: Config, roads, road_rows, *, seed: int, device: str) -> tuple[dict, dict]:
    """Pre-train a MiniTraffic variant on road-level pseudo-lanes; returns (state_dict, info).

    minitraffic: FDA pseudo-lanes (D = pseudo_lanes copies per road) + InfoNCE + graph;
    minitraffic-noaug: the road series themselves (D = 1, no FDA); minitraffic-nocluster: FDA,
    no InfoNCE and no graph layer."""
    seed_everything(seed)
    gen = torch.Generator().manual_seed(seed)
    t0 = time.perf_counter()
    w = _windows(roads, road_rows, cfg)
    w = {k: v[:: cfg.pretrain_stride] for k, v in w.items()}
    scaler = D.Scaler.fit(roads.values[road_rows[0] : road_rows[1]])
    full = torch.as_tensor(scaler.transform(np.concatenate([w["x"], w["y"]], 1)), dtype=torch.float32)  # (W, L+H, R)
    aug = variant != "minitraffic-noaug"
    contrastive = variant != "minitraffic-nocluster"
    reps_d = cfg.pseudo_lanes if aug else 1
    model = make_model(variant, cfg, full.shape[2] * reps_d, 1).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    L = cfg.input_steps

    def extend(batch):  # (B, L+H, R) -> (B, L+H, R*D): Extension, then FDA per copy
        e = batch.repeat_interleave(reps_d, dim=2)
        if aug:
            e = fda(
                e,
                sigma=cfg.fda_sigma,
                lam=cfg.fda_lambda,
                tau=cfg.fda_tau,
                phase_sigma=cfg.fda_phase_sigma,
                generator=gen,
            )
        return e.to(device)

    losses = {}
    step = 0
    per_epoch = -(-int(full.shape[0]) // cfg.pretrain_batch_size)
    with progress(cfg.pretrain_epochs * per_epoch, f"traffic pretrain {variant} seed {seed}") as bar:
        for ep in range(cfg.pretrain_epochs):
            if contrastive and ep == min(cfg.graph_warmup_epochs, cfg.pretrain_epochs - 1):
                _graph_from(model, extend(full[:512])[:, :L], cfg, seed)
            model.train()
            perm = torch.randperm(full.shape[0], generator=gen)
            tot = np.zeros(3)
            nb = 0
            for i in range(0, full.shape[0], cfg.pretrain_batch_size):
                e = extend(full[perm[i : i + cfg.pretrain_batch_size]])
                fc, rec, nce = model.pretrain_losses(e[:, :L], e[:, L:], cfg.mask_ratio, gen, contrastive)
                loss = fc + rec + nce
                step += 1
                diverge.check(step, pretrain_loss=loss.detach())
                opt.zero_grad()
                loss.backward()
                opt.step()
                tot += [float(fc.detach()), float(rec.detach()), float(nce.detach())]
                nb += 1
                bar.advance(1, epoch=ep + 1, loss=float(tot.sum() / nb))
            diverge.check_params(step, model.parameters())
            losses = dict(zip(("forecast_l1", "recon_mse", "info_nce"), (tot / max(nb, 1)).tolist()))
    state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    return state, {
        "pretrain_s": time.perf_counter() - t0,
        "pretrain_windows": int(full.shape[0]),
        "pseudo_lanes": reps_d,
        "n_entities": int(full.shape[2] * reps_d),
        **losses,
    }


def train_lane_model(
    name: str, cfg: Config, inp: Inputs, fraction: float, *, seed: int, device: str, pretrained: dict | None = None
):
    """Fit one model on the lane-level fine-tuning fraction. Returns (Fitted, info)."""
    lanes = inp.lanes
    rows = D.fraction_rows(inp.split.finetune, fraction)
    tr = _windows(lanes, rows, cfg)
    va = _windows(lanes, inp.split.val, cfg)
    scaler = D.Scaler.fit(lanes.values[rows[0] : rows[1]])
    slots = slots_per_day(lanes)
    t0 = time.perf_counter()
    info = {"train_windows": int(tr["x"].shape[0])}
    if name in DETERMINISTIC:
        # with a null value, the null targets are left out of the fit (as of the trained models' loss)
        mask = None if cfg.null() is None else D.valid_mask(tr["y"], cfg.null())
        if name == "persistence":
            m = B.Persistence()
        elif name == "ha":
            m = B.HistoricalAverage(slots).fit(scaler.transform(tr["y"]), tr["tod"], mask)
        else:
            m = B.RidgeLags(cfg.ridge_alpha).fit(scaler.transform(tr["x"]), scaler.transform(tr["y"]), mask)
        info.update(train_s=time.perf_counter() - t0, params=m.params)
        return Fitted(name, m, scaler, cfg.max_horizon), info

    seed_everything(seed)
    gen = torch.Generator().manual_seed(seed)
    model = make_model(name, cfg, lanes.shape[1], slots).to(device)
    train = _tensors(tr, scaler, device, cfg.null())
    val = _tensors(va, scaler, device, cfg.null())

    def train_(params, epochs: int, lr: float, on_epoch=None) -> None:
        info.update(
            fit(
                model,
                params,
                train,
                val,
                cfg,
                gen=gen,
                desc=f"traffic {name} seed {seed}",
                epochs=epochs,
                lr=lr,
                on_epoch=on_epoch,
            )
        )

    if name in MINI and pretrained is not None:
        model.load_state_dict(pretrained, strict=False)  # the adjacency is not a saved buffer
        if model.use_graph:
            _graph_from(model, train[0], cfg, seed)  # lanes placed by the pre-trained encoder, once
        for p in model.backbone_parameters():
            p.requires_grad_(False)
        train_(model.head_parameters(), cfg.epochs, cfg.lr)
        if cfg.ft_full_epochs:
            for p in model.backbone_parameters():
                p.requires_grad_(True)
            train_(list(model.parameters()), cfg.ft_full_epochs, cfg.lr / 10)
    elif name in MINI and model.use_graph:

        def on_epoch(ep):
            if ep == cfg.graph_warmup_epochs:
                _graph_from(model, train[0], cfg, seed)

        train_(list(model.parameters()), max(cfg.epochs, cfg.graph_warmup_epochs + 1), cfg.lr, on_epoch)
    else:
        train_(list(model.parameters()), cfg.epochs, cfg.lr)
    info.update(train_s=time.perf_counter() - t0, params=n_params(model))
    model.eval()
    return Fitted(name, model, scaler, cfg.max_horizon, device), info


class Fitted:
    """A fitted forecaster: __call__(x (W, L, N) real units, tod (W,), dow (W,)) -> (W, H, N) real
    units. Deterministic in every case (torch models run in eval mode under no_grad; the
    augmentation lives only in the training loops)."""

    def __init__(self, name: str, model, scaler, horizon: int, device: str = "cpu"):
        self.name, self.model, self.scaler, self.horizon, self.device = name, model, scaler, horizon, device

    def __call__(self, x, tod, dow):
        if self.name in DETERMINISTIC:
            return self.scaler.inverse(self.model.predict(self.scaler.transform(x), tod, self.horizon))

        xt = torch.as_tensor(self.scaler.transform(x), dtype=torch.float32, device=self.device)
        out = predict(
            self.model, xt, torch.as_tensor(tod, device=self.device), torch.as_tensor(dow, device=self.device)
        )
        return self.scaler.inverse(out.cpu().numpy().astype(np.float64))
