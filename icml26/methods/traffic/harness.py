"""``icml26 traffic``: MiniTraffic and the forecasting baselines on one set of splits.

Protocol (docs/traffic.md; see ``icml26.methods.traffic.data`` for the splits and
the gap rule): road-level pre-training on the days before fine-tuning, fine-tuning on the last
``lane_fraction`` of the fine-tuning days, early stopping on the validation days, test on the
test days. Metrics in real units (vehicles per 15 minutes on the built-in data) at each
horizon, from one model per (model, lane_fraction, seed) that forecasts every step up to the
largest horizon. Deterministic baselines (ha, persistence, ridge) run once.

One ``result`` per (model, horizon, lane_fraction): kind, model, pretrained, horizon_steps,
lane_fraction, mae, rmse, mape (means over seeds), params, train_s, infer_ms_per_batch, seeds,
mae_ci (95%: Student-t over seeds for trained models, null with one seed; a moving-block bootstrap
over the test windows for the deterministic ones), mae_ci_method, diverged, and pretrain_s, dataset,
n_test_windows; last a summary. A seed whose training goes non-finite (core/diverge) makes its
setting's records ``diverged: true`` with null metrics, left out of the verdict.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from icml26.core.errors import InputError

from icml26.methods.traffic.config import (  # noqa: F401  (re-exported: H.Config, H.MODELS)
    DETERMINISTIC,
    MINI,
    MODELS,
    PRETRAINED_VARIANTS,
    Config,
)

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
    fractions: tuple[float, ...] = ()  # the lane fractions that fit at least one window
    models: tuple[str, ...] = ()  # the models that can run (pre-trained variants need road data)
    skipped: list = dataclasses.field(default_factory=list)  # ``skipped`` records (what, why)
    road_source: str = ""


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
                f"the {name} days hold no gap-free stretch of {need} steps "
                f"(input_steps {cfg.input_steps} + output_steps {cfg.output_steps})"
            )
    skipped, fractions = [], []
    for f in cfg.lane_fractions:
        rows = D.fraction_rows(split.finetune, f)
        if len(D.window_starts(segs, rows, need)) == 0:
            why = (
                f"lane_fraction {f:g} keeps {rows[1] - rows[0]} steps of the fine-tuning days, no gap-free stretch "
                f"of one window ({need} steps: input_steps {cfg.input_steps} + output_steps {cfg.output_steps})"
            )
            skipped.append({"kind": "skipped", "lane_fraction": f, "reason": why})
        else:
            fractions.append(f)
    if not fractions:
        raise InputError(skipped[-1]["reason"] + "; raise --lane-fraction or finetune_days")
    roads, road_rows, groups, road_source = None, (0, 0), None, "none"
    if cfg.road_data is not None:
        roads = td.read_series(cfg.road_data, **kw)
        if abs(roads.step_s - lanes.step_s) > 1e-6:
            raise InputError(
                f"--road-data steps every {roads.step_s:g} s but --data every {lanes.step_s:g} s; resample one of them"
            )
        first_ft = lanes.timestamps[split.finetune[0]]
        hi = int(np.searchsorted(roads.timestamps, first_ft, "left"))
        road_rows, road_source = (0, hi), f"--road-data {Path(cfg.road_data).name}, rows before the fine-tuning days"
    elif cfg.pretrain_days:
        # pseudo-roads from the lanes themselves, over the pre-training days only (built-in data and --data alike)
        lo, hi = split.pretrain
        labels = td.group_by_correlation(lanes.values[lo:hi], min(cfg.n_roads, lanes.shape[1]))
        groups = [f"road_{g}" for g in labels]
        lanes.groups = groups
        roads = td.road_series(lanes, labels)
        road_rows = split.pretrain
        road_source = (
            f"pseudo-roads: {roads.shape[1]} correlation groups of the lanes over the "
            f"{cfg.pretrain_days} pre-training days"
        )
    if roads is not None and len(D.window_starts(roads.segments(), road_rows, need)) == 0:
        raise InputError(
            f"the road data before the fine-tuning days ({lanes.timestamps[split.finetune[0]]}) hold no "
            f"gap-free stretch of {need} steps for pre-training"
        )
    models = tuple(cfg.models)
    if roads is None:
        for m in cfg.models:
            if m in PRETRAINED_VARIANTS:
                skipped.append(
                    {
                        "kind": "skipped",
                        "model": m,
                        "reason": f"{m} pre-trains on road data: give --road-data or pretrain_days >= 1 "
                        "(pseudo-roads from the lanes); minitraffic-nopretrain is the model without it",
                    }
                )
        models = tuple(m for m in cfg.models if m not in PRETRAINED_VARIANTS)
        if not models:
            raise InputError(skipped[-1]["reason"])
    for rec in skipped:
        print(f"warning: skipped: {rec['reason']}", file=sys.stderr)
    return Inputs(lanes, roads, split, road_rows, dataset, groups, tuple(fractions), models, skipped, road_source)


def _windows(series, rows, cfg: Config):
    from icml26.methods.traffic import data as D

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
    import torch

    out = (
        torch.as_tensor(scaler.transform(w["x"]), dtype=torch.float32, device=device),
        torch.as_tensor(scaler.transform(w["y"]), dtype=torch.float32, device=device),
        torch.as_tensor(w["tod"], device=device),
        torch.as_tensor(w["dow"], device=device),
    )
    if null is None:
        return out
    from icml26.methods.traffic import data as D

    return (*out, torch.as_tensor(D.valid_mask(w["y"], null), device=device))


def _l1(pred, y, mask):
    """Mean absolute error, over the targets that are not null when a mask is given."""
    if mask is None:
        return (pred - y).abs().mean()
    m = mask.to(pred.dtype)
    return ((pred - y).abs() * m).sum() / m.sum().clamp_min(1.0)


def predict(model, x, tod, dow, batch: int = 256):
    """Forecasts of a torch model in eval mode, no gradients: (W, H, N) tensor (scaled)."""
    import torch

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
    import torch

    from icml26.core import diverge
    from icml26.core.progress import progress

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

    from icml26.core import diverge
    from icml26.core.progress import progress

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
    if name in MINI and pretrained is not None:
        model.load_state_dict(pretrained, strict=False)  # the adjacency is not a saved buffer
        if model.use_graph:
            _graph_from(model, train[0], cfg, seed)  # lanes placed by the pre-trained encoder, once
        for p in model.backbone_parameters():
            p.requires_grad_(False)
        info.update(
            fit(
                model,
                model.head_parameters(),
                train,
                val,
                cfg,
                gen=gen,
                desc=f"traffic {name} seed {seed}",
                epochs=cfg.epochs,
                lr=cfg.lr,
            )
        )
        if cfg.ft_full_epochs:
            for p in model.backbone_parameters():
                p.requires_grad_(True)
            info.update(
                fit(
                    model,
                    list(model.parameters()),
                    train,
                    val,
                    cfg,
                    gen=gen,
                    desc=f"traffic {name} seed {seed}",
                    epochs=cfg.ft_full_epochs,
                    lr=cfg.lr / 10,
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
                desc=f"traffic {name} seed {seed}",
                epochs=max(cfg.epochs, cfg.graph_warmup_epochs + 1),
                lr=cfg.lr,
                on_epoch=on_epoch,
            )
        )
    else:
        info.update(
            fit(
                model,
                list(model.parameters()),
                train,
                val,
                cfg,
                gen=gen,
                desc=f"traffic {name} seed {seed}",
                epochs=cfg.epochs,
                lr=cfg.lr,
            )
        )
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
    out = {
        h: {
            **D.metrics(pred[:, h - 1], test["y"][:, h - 1], cfg.mape_floor(), null_value=cfg.null()),
            "window_errors": D.window_errors(pred[:, h - 1], test["y"][:, h - 1], cfg.null()),
        }
        for h in cfg.horizons
    }
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

    from icml26.core import diverge

    bad = next((r["diverged"] for r in runs if r.get("diverged") is not None), None)
    if bad is not None:  # a seed diverged: the setting is not a result (left out of the verdict)
        for h in cfg.horizons:
            yield {
                "kind": "result",
                "model": name,
                "pretrained": pretrained,
                "horizon_steps": h,
                "lane_fraction": fraction,
                **{k: None for k in ("mae", "rmse", "mape", "mae_ci", "mae_ci_method")},
                "seeds": len(runs),
                **diverge.diverged_fields(bad),
                "dataset": inp.dataset,
                "n_test_windows": n_test,
            }
        return
    for h in cfg.horizons:
        maes = [r["by_h"][h]["mae"] for r in runs]
        mapes = [r["by_h"][h]["mape"] for r in runs if r["by_h"][h]["mape"] is not None]
        if name in DETERMINISTIC:  # one fit: the interval of its score over the test windows
            ci = D.block_bootstrap_mae_ci(*runs[0]["by_h"][h]["window_errors"], block=slots_per_day(inp.lanes))
            how = "block bootstrap over test windows (1-day blocks)" if ci is not None else None
        else:  # trained models: Student-t over seeds, null with one seed
            ci = D.mean_ci(maes)
            how = "student-t over seeds" if ci is not None else None
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
            "mae_ci": ci,  # 95%: over seeds (trained), over test windows (deterministic); else null
            "mae_ci_method": how,
            "diverged": False,
            "null_value": cfg.null(),
            "pretrain_s": float(np.mean(pre_s)) if pre_s else None,
            "dataset": inp.dataset,
            "n_test_windows": n_test,
        }


def run(
    cfg: Config, *, seed: int = 0, device: str = "cpu", inputs: Inputs | None = None, only: set | None = None
) -> Iterator[dict]:
    """Pre-train, fine-tune and test every selected model; yields ``result`` records and a summary.

    only: optional set of (model, lane_fraction) pairs to run (the benchmark runs in parts)."""
    from icml26.core import diverge

    inp = inputs or load_inputs(cfg)
    test = _windows(inp.lanes, inp.split.test, cfg)
    n_test = int(test["x"].shape[0])
    pre_cache: dict = {}
    results = []
    seeds_of = dict(plan(cfg))
    yield from inp.skipped
    for fraction in inp.fractions:
        for name in inp.models:
            if only is not None and (name, fraction) not in only:
                continue
            runs, pre_s = [], []
            for k in range(seeds_of[name]):
                s = seed + k
                state = None
                try:
                    if pretrained_flag(name, inp):
                        if (name, s) not in pre_cache:
                            pre_cache[(name, s)] = pretrain(name, cfg, inp.roads, inp.road_rows, seed=s, device=device)
                        state, pinfo = pre_cache[(name, s)]
                        pre_s.append(pinfo["pretrain_s"])
                    predictor, info = train_lane_model(
                        name, cfg, inp, fraction, seed=s, device=device, pretrained=state
                    )
                except diverge.Diverged as e:
                    diverge.warn(e, f"traffic {name} seed {s} lane_fraction {fraction:g}")
                    runs.append({"diverged": e})
                    break
                ev = evaluate(predictor, test, cfg)
                runs.append({**info, **ev})
            for rec in result_records(name, cfg, inp, fraction, runs, pre_s, n_test, pretrained_flag(name, inp)):
                results.append(rec)
                yield rec
    yield summary(results, inp)


def _days(inp: Inputs, rows: tuple[int, int]) -> int:
    lo, hi = rows
    return int(len(np.unique(inp.lanes.timestamps[lo:hi].astype("datetime64[D]")))) if hi > lo else 0


def summary(results: list[dict], inp: Inputs) -> dict:
    from icml26.core.verdict import verdict

    by: dict = {}
    for r in results:
        by.setdefault((r["horizon_steps"], r["lane_fraction"]), []).append(r)
    return {
        "kind": "summary",
        "dataset": inp.dataset,
        "n_lanes": inp.lanes.shape[1],
        "n_roads": inp.roads.shape[1] if inp.roads is not None else 0,
        "road_pretraining": inp.roads is not None,
        "road_source": inp.road_source,
        "split_days": {k: _days(inp, getattr(inp.split, k)) for k in ("pretrain", "finetune", "val", "test")},
        "skipped": [r["reason"] for r in inp.skipped],
        "days": len(inp.split.days),
        "n_results": len(results),
        # per setting: the lowest MAE named only when its interval separates it (core/verdict.py)
        "verdict_by_setting": {
            f"h{h}@{f:g}": verdict(rs, "mae", "model", ci_key="mae_ci") for (h, f), rs in sorted(by.items())
        },
    }
