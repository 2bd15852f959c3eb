"""``icml26 traffic``: MiniTraffic and the forecasting baselines on one set of splits.

Protocol (shared/methods/minitraffic.md; see ``icml26.methods.traffic.data`` for the splits and
the gap rule): road-level pre-training on the days before fine-tuning, fine-tuning on the last
``lane_fraction`` of the fine-tuning days, early stopping on the validation days, test on the
test days. Metrics in real units (vehicles per 15 minutes on the built-in data) at each
horizon, from one model per (model, lane_fraction, seed) that forecasts every step up to the
largest horizon. Deterministic baselines (ha, persistence, ridge) run once.

One ``result`` per (model, horizon, lane_fraction): kind, model, pretrained, horizon_steps,
lane_fraction, mae, rmse, mape (means over seeds), params, train_s, infer_ms_per_batch, seeds,
mae_ci (95% Student-t over seeds), and pretrain_s, dataset, n_test_windows; last a summary.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from icml26.core.errors import InputError

MODELS = (
    "minitraffic",
    "minitraffic-nopretrain",
    "minitraffic-noaug",
    "minitraffic-nocluster",
    "ha",
    "persistence",
    "ridge",
    "dlinear",
    "patchtst",
    "stid",
    "graph",
)
DETERMINISTIC = ("ha", "persistence", "ridge")
MINI = ("minitraffic", "minitraffic-nopretrain", "minitraffic-noaug", "minitraffic-nocluster")
PRETRAINED_VARIANTS = ("minitraffic", "minitraffic-noaug", "minitraffic-nocluster")


@dataclass(frozen=True)
class Config:
    data: str | None = None  # lane-level series (.csv / .h5 / .npz / .parquet); None = built-in traffic-anomaly lanes
    road_data: str | None = (
        None  # road-level series for pre-training; None = built-in pseudo-roads (or none with --data)
    )
    models: tuple[str, ...] = MODELS
    horizons: tuple[int, ...] = (1, 4, 8)  # steps ahead (15 min each on the built-in data)
    lane_fractions: tuple[float, ...] = (0.05, 0.1, 0.2)  # fraction of the fine-tuning days' lane data used
    seeds: int = 3  # seeds of the trained models (deterministic ones run once)
    input_steps: int = 16  # window length fed to every model
    pretrain_days: int = 14
    finetune_days: int = 5
    val_days: int = 2
    test_days: int = 5  # 0 = every day after validation
    n_roads: int = 6  # built-in data: pseudo-roads from correlation clustering of the detectors
    pseudo_lanes: int = 4  # FDA copies per road in pre-training (D)
    fda_sigma: float = 0.1  # amplitude noise, in units of max A
    fda_lambda: float = 0.2  # bound |dA| <= lambda max A, in (0, 1)
    fda_tau: float = 0.05  # dominant bins: A^2 > tau max A^2
    fda_phase_sigma: float = 0.1  # phase noise, radians
    mask_ratio: float = 0.4
    temperature: float = 0.5  # InfoNCE
    d_model: int = 32
    n_layers: int = 2
    n_heads: int = 4
    d_ff: int = 64
    patch_len: int = 4  # the official code: 3 with stride 1 (equal MAE here at half the tokens, docs/traffic.md)
    patch_stride: int = 2
    graph_k: int = 4  # neighbours per entity
    cluster_size: int = 8  # entities per k-means cluster (about)
    graph_warmup_epochs: int = 2  # epochs before the graph is built (when training from scratch)
    pretrain_epochs: int = 10
    pretrain_batch_size: int = 64  # road windows per pre-training step
    pretrain_stride: int = 2  # every k-th road window start is used (neighbouring windows overlap)
    epochs: int = 60  # most epochs of lane training (early stopping on validation MAE)
    patience: int = 8
    ft_full_epochs: int = 0  # after head-only fine-tuning, epochs of the whole model at lr / 10
    lr: float = 1e-3
    weight_decay: float = 1e-4
    batch_size: int = 32  # windows per step (every sensor of a window together)
    ridge_alpha: float = 1.0
    mape_min: float = 5.0  # MAPE only where the truth exceeds this (real units)
    infer_batch: int = 64  # windows per batch for infer_ms_per_batch
    npz_feature: int = 0  # .npz (T, N, F): 0 flow, 1 occupancy, 2 speed (PeMSD4/8)
    npz_start: str = "2018-01-01"  # .npz without timestamps: first step (PeMSD8: 2016-07-01)
    npz_step_s: float = 300.0

    def __post_init__(self):
        bad = [m for m in self.models if m not in MODELS]
        if bad or not self.models:
            raise ValueError(f"models: {bad[0] if bad else '(empty)'!r} is not one of {', '.join(MODELS)}")
        if len(set(self.models)) != len(self.models):
            object.__setattr__(self, "models", tuple(dict.fromkeys(self.models)))
        if not self.horizons or any(h < 1 for h in self.horizons):
            raise ValueError(f"horizons must be positive step counts, got {list(self.horizons)}")
        if not self.lane_fractions or any(not 0 < f <= 1 for f in self.lane_fractions):
            raise ValueError(f"lane_fractions must be in (0, 1], got {list(self.lane_fractions)}")
        for k in (
            "seeds",
            "input_steps",
            "finetune_days",
            "val_days",
            "pseudo_lanes",
            "d_model",
            "n_layers",
            "n_heads",
            "d_ff",
            "patch_len",
            "patch_stride",
            "graph_k",
            "cluster_size",
            "epochs",
            "patience",
            "batch_size",
            "infer_batch",
            "n_roads",
            "pretrain_batch_size",
            "pretrain_stride",
        ):
            if getattr(self, k) < 1:
                raise ValueError(f"{k} must be >= 1, got {getattr(self, k)}")
        for k in ("pretrain_days", "test_days", "graph_warmup_epochs", "pretrain_epochs", "ft_full_epochs"):
            if getattr(self, k) < 0:
                raise ValueError(f"{k} must be >= 0, got {getattr(self, k)}")
        if self.patch_len > self.input_steps:
            raise ValueError(f"patch_len {self.patch_len} exceeds input_steps {self.input_steps}")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model {self.d_model} is not divisible by n_heads {self.n_heads}")
        if not 0 < self.fda_lambda < 1:
            raise ValueError(f"fda_lambda must be in (0, 1), got {self.fda_lambda}")
        if not 0 <= self.fda_tau <= 1:
            raise ValueError(f"fda_tau must be in [0, 1], got {self.fda_tau}")
        if not 0 <= self.mask_ratio < 1:
            raise ValueError(f"mask_ratio must be in [0, 1), got {self.mask_ratio}")
        for k in ("fda_sigma", "fda_phase_sigma", "ridge_alpha", "weight_decay", "mape_min"):
            if getattr(self, k) < 0:
                raise ValueError(f"{k} must be >= 0, got {getattr(self, k)}")
        if self.lr <= 0 or self.temperature <= 0:
            raise ValueError("lr and temperature must be > 0")

    @property
    def max_horizon(self) -> int:
        return max(self.horizons)


# ----------------------------------------------------------------------------- inputs


@dataclass
class Inputs:
    """The lane series, the road series for pre-training (or None) and the splits."""

    lanes: object  # SensorSeries
    roads: object | None
    split: object  # data.Split of the lane series
    road_rows: tuple[int, int]
    dataset: str
    groups: list | None = None


def load_inputs(cfg: Config) -> Inputs:
    """Read and check the data (InputError on a bad file or a series too short for the split)."""
    from icml26.core.data import traffic as td
    from icml26.methods.traffic import data as D

    kw = {"feature": cfg.npz_feature, "start": cfg.npz_start, "step_s": cfg.npz_step_s}
    if cfg.data is None:
        if cfg.road_data is not None:
            raise InputError("--road-data needs --data (the built-in data makes its own road series)")
        lanes = td.lane_counts()
        dataset = "traffic-anomaly (22 lanes, 15 min)"
    else:
        lanes = td.read_series(cfg.data, **kw)
        dataset = Path(cfg.data).name
    split = D.day_split(lanes.timestamps, cfg.pretrain_days, cfg.finetune_days, cfg.val_days, cfg.test_days)
    need = cfg.input_steps + cfg.max_horizon
    segs = lanes.segments()
    for name in ("val", "test"):
        if len(D.window_starts(segs, getattr(split, name), need)) == 0:
            raise InputError(
                f"the {name} days hold no gap-free stretch of {need} steps (input_steps {cfg.input_steps} + horizon {cfg.max_horizon})"
            )
    for f in cfg.lane_fractions:
        rows = D.fraction_rows(split.finetune, f)
        if len(D.window_starts(segs, rows, need)) == 0:
            raise InputError(
                f"lane_fraction {f} keeps {rows[1] - rows[0]} steps of the fine-tuning days, "
                f"fewer than one window of {need} steps (input_steps {cfg.input_steps} + horizon {cfg.max_horizon}); raise it"
            )
    roads, road_rows, groups = None, (0, 0), None
    if cfg.data is None:
        if cfg.pretrain_days:
            lo, hi = split.pretrain
            labels = td.group_by_correlation(lanes.values[lo:hi], min(cfg.n_roads, lanes.shape[1]))
            groups = [f"road_{g}" for g in labels]
            lanes.groups = groups
            roads = td.road_series(lanes, labels)
            road_rows = split.pretrain
    elif cfg.road_data is not None:
        roads = td.read_series(cfg.road_data, **kw)
        if abs(roads.step_s - lanes.step_s) > 1e-6:
            raise InputError(
                f"--road-data steps every {roads.step_s:g} s but --data every {lanes.step_s:g} s; resample one of them"
            )
        first_ft = lanes.timestamps[split.finetune[0]]
        hi = int(np.searchsorted(roads.timestamps, first_ft, "left"))
        road_rows = (0, hi)
    if roads is not None and len(D.window_starts(roads.segments(), road_rows, need)) == 0:
        raise InputError(
            f"the road data before the fine-tuning days ({lanes.timestamps[split.finetune[0]]}) hold no "
            f"gap-free stretch of {need} steps for pre-training"
        )
    return Inputs(lanes, roads, split, road_rows, dataset, groups)


def _windows(series, rows, cfg: Config):
    from icml26.methods.traffic import data as D

    starts = D.window_starts(series.segments(), rows, cfg.input_steps + cfg.max_horizon)
    x, y = D.make_windows(series.values, starts, cfg.input_steps, cfg.max_horizon)
    tod, dow = D.time_features(series.timestamps, starts, cfg.input_steps, series.step_s)
    return {"x": x, "y": y, "tod": tod, "dow": dow, "starts": starts}


def slots_per_day(series) -> int:
    return max(1, int(round(86400 / series.step_s)))


# ----------------------------------------------------------------------------- training


def _tensors(w, scaler, device):
    import torch

    return (
        torch.as_tensor(scaler.transform(w["x"]), dtype=torch.float32, device=device),
        torch.as_tensor(scaler.transform(w["y"]), dtype=torch.float32, device=device),
        torch.as_tensor(w["tod"], device=device),
        torch.as_tensor(w["dow"], device=device),
    )


def predict(model, x, tod, dow, batch: int = 256):
    """Forecasts of a torch model in eval mode, no gradients: (W, H, N) tensor (scaled)."""
    import torch

    model.eval()
    out = []
    with torch.no_grad():
        for i in range(0, x.shape[0], batch):
            out.append(model(x[i : i + batch], tod[i : i + batch], dow[i : i + batch]))
    return torch.cat(out)


def fit(model, params, train, val, cfg: Config, *, gen, epochs: int, lr: float, on_epoch=None) -> dict:
    """Adam on the L1 loss (scaled values) with early stopping on validation MAE; keeps the best
    weights. train / val: (x, y, tod, dow) tensors. on_epoch(epoch) runs before each epoch."""
    import torch

    opt = torch.optim.AdamW(params, lr=lr, weight_decay=cfg.weight_decay)
    x, y, tod, dow = train
    best, best_state, bad, done = math.inf, None, 0, 0
    for ep in range(epochs):
        if on_epoch is not None:
            on_epoch(ep)
        model.train()
        perm = torch.randperm(x.shape[0], generator=gen).to(x.device)
        for i in range(0, x.shape[0], cfg.batch_size):
            b = perm[i : i + cfg.batch_size]
            loss = (model(x[b], tod[b], dow[b]) - y[b]).abs().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        done = ep + 1
        v = float((predict(model, *val[:1], *val[2:]) - val[1]).abs().mean())
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
    from icml26.methods.traffic import baselines as B
    from icml26.methods.traffic.minitraffic import MiniTraffic

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
    import torch

    from icml26.methods.traffic.minitraffic import cluster_graph

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
    import torch

    from icml26.core.seed import seed_everything
    from icml26.methods.traffic import data as D
    from icml26.methods.traffic.minitraffic import fda

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
            opt.zero_grad()
            loss.backward()
            opt.step()
            tot += [float(fc.detach()), float(rec.detach()), float(nce.detach())]
            nb += 1
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
    import torch

    from icml26.core.seed import seed_everything
    from icml26.methods.traffic import baselines as B
    from icml26.methods.traffic import data as D

    lanes = inp.lanes
    rows = D.fraction_rows(inp.split.finetune, fraction)
    tr = _windows(lanes, rows, cfg)
    va = _windows(lanes, inp.split.val, cfg)
    scaler = D.Scaler.fit(lanes.values[rows[0] : rows[1]])
    slots = slots_per_day(lanes)
    t0 = time.perf_counter()
    info = {"train_windows": int(tr["x"].shape[0])}
    if name in DETERMINISTIC:
        if name == "persistence":
            m = B.Persistence()
        elif name == "ha":
            m = B.HistoricalAverage(slots).fit(scaler.transform(tr["y"]), tr["tod"])
        else:
            m = B.RidgeLags(cfg.ridge_alpha).fit(scaler.transform(tr["x"]), scaler.transform(tr["y"]))
        info.update(train_s=time.perf_counter() - t0, params=m.params)
        return Fitted(name, m, scaler, cfg.max_horizon), info

    seed_everything(seed)
    gen = torch.Generator().manual_seed(seed)
    model = make_model(name, cfg, lanes.shape[1], slots).to(device)
    train = _tensors(tr, scaler, device)
    val = _tensors(va, scaler, device)
    if name in MINI and pretrained is not None:
        model.load_state_dict(pretrained, strict=False)  # the adjacency is not a saved buffer
        if model.use_graph:
            _graph_from(model, train[0], cfg, seed)  # lanes placed by the pre-trained encoder, once
        for p in model.backbone_parameters():
            p.requires_grad_(False)
        info.update(fit(model, model.head_parameters(), train, val, cfg, gen=gen, epochs=cfg.epochs, lr=cfg.lr))
        if cfg.ft_full_epochs:
            for p in model.backbone_parameters():
                p.requires_grad_(True)
            info.update(
                fit(
                    model, list(model.parameters()), train, val, cfg, gen=gen, epochs=cfg.ft_full_epochs, lr=cfg.lr / 10
                )
            )
    elif name in MINI and model.use_graph:

        def on_epoch(ep):
            if ep == cfg.graph_warmup_epochs:
                _graph_from(model, train[0], cfg, seed)

        info.update(
            fit(
                model,
                list(model.parameters()),
                train,
                val,
                cfg,
                gen=gen,
                epochs=max(cfg.epochs, cfg.graph_warmup_epochs + 1),
                lr=cfg.lr,
                on_epoch=on_epoch,
            )
        )
    else:
        info.update(fit(model, list(model.parameters()), train, val, cfg, gen=gen, epochs=cfg.epochs, lr=cfg.lr))
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
        import torch

        xt = torch.as_tensor(self.scaler.transform(x), dtype=torch.float32, device=self.device)
        out = predict(
            self.model, xt, torch.as_tensor(tod, device=self.device), torch.as_tensor(dow, device=self.device)
        )
        return self.scaler.inverse(out.cpu().numpy().astype(np.float64))


def evaluate(predictor, test: dict, cfg: Config) -> dict:
    """Real-unit metrics per horizon: {h: {mae, rmse, mape}} and the inference time."""
    from icml26.methods.traffic import data as D

    pred = predictor(test["x"], test["tod"], test["dow"])  # (W, H, N)
    out = {h: D.metrics(pred[:, h - 1], test["y"][:, h - 1], cfg.mape_min) for h in cfg.horizons}
    b = min(cfg.infer_batch, test["x"].shape[0])
    xs, ts, ds = test["x"][:b], test["tod"][:b], test["dow"][:b]
    predictor(xs, ts, ds)  # warm-up
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        predictor(xs, ts, ds)
        times.append((time.perf_counter() - t0) * 1e3)
    return {"by_h": out, "infer_ms_per_batch": float(np.median(times))}


def pretrained_flag(name: str, inp: Inputs) -> bool:
    return name in PRETRAINED_VARIANTS and inp.roads is not None


def plan(cfg: Config) -> list[tuple[str, int]]:
    """(model, number of seeds) in the order they run."""
    return [(m, 1 if m in DETERMINISTIC else cfg.seeds) for m in cfg.models]


def result_records(
    name: str,
    cfg: Config,
    inp: Inputs,
    fraction: float,
    runs: list[dict],
    pre_s: list[float],
    n_test: int,
    pretrained: bool,
) -> Iterator[dict]:
    from icml26.methods.traffic import data as D

    for h in cfg.horizons:
        maes = [r["by_h"][h]["mae"] for r in runs]
        mapes = [r["by_h"][h]["mape"] for r in runs if r["by_h"][h]["mape"] is not None]
        yield {
            "kind": "result",
            "model": name,
            "pretrained": pretrained,
            "horizon_steps": h,
            "lane_fraction": fraction,
            "mae": float(np.mean(maes)),
            "rmse": float(np.mean([r["by_h"][h]["rmse"] for r in runs])),
            "mape": float(np.mean(mapes)) if mapes else None,
            "params": runs[0]["params"],
            "train_s": float(np.mean([r["train_s"] for r in runs])),
            "infer_ms_per_batch": float(np.mean([r["infer_ms_per_batch"] for r in runs])),
            "seeds": len(runs),
            "mae_ci": D.mean_ci(maes),
            "pretrain_s": float(np.mean(pre_s)) if pre_s else None,
            "dataset": inp.dataset,
            "n_test_windows": n_test,
        }


def run(
    cfg: Config, *, seed: int = 0, device: str = "cpu", inputs: Inputs | None = None, only: set | None = None
) -> Iterator[dict]:
    """Pre-train, fine-tune and test every selected model; yields ``result`` records and a summary.

    only: optional set of (model, lane_fraction) pairs to run (the benchmark runs in parts)."""
    inp = inputs or load_inputs(cfg)
    test = _windows(inp.lanes, inp.split.test, cfg)
    n_test = int(test["x"].shape[0])
    pre_cache: dict = {}
    results = []
    seeds_of = dict(plan(cfg))
    for fraction in cfg.lane_fractions:
        for name in cfg.models:
            if only is not None and (name, fraction) not in only:
                continue
            runs, pre_s = [], []
            for k in range(seeds_of[name]):
                s = seed + k
                state = None
                if pretrained_flag(name, inp):
                    if (name, s) not in pre_cache:
                        pre_cache[(name, s)] = pretrain(name, cfg, inp.roads, inp.road_rows, seed=s, device=device)
                    state, pinfo = pre_cache[(name, s)]
                    pre_s.append(pinfo["pretrain_s"])
                predictor, info = train_lane_model(name, cfg, inp, fraction, seed=s, device=device, pretrained=state)
                ev = evaluate(predictor, test, cfg)
                runs.append({**info, **ev})
            for rec in result_records(name, cfg, inp, fraction, runs, pre_s, n_test, pretrained_flag(name, inp)):
                results.append(rec)
                yield rec
    yield summary(results, inp)


def summary(results: list[dict], inp: Inputs) -> dict:
    best = {}
    for r in results:
        key = (r["horizon_steps"], r["lane_fraction"])
        if key not in best or r["mae"] < best[key]["mae"]:
            best[key] = r
    return {
        "kind": "summary",
        "dataset": inp.dataset,
        "n_lanes": inp.lanes.shape[1],
        "n_roads": inp.roads.shape[1] if inp.roads is not None else 0,
        "road_pretraining": inp.roads is not None,
        "days": len(inp.split.days),
        "n_results": len(results),
        "best_by_setting": {f"h{h}@{f:g}": r["model"] for (h, f), r in sorted(best.items())},
    }
