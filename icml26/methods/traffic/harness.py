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

import sys
import time
from pathlib import Path
from typing import Iterator

import numpy as np

from icml26.core import diverge
from icml26.core.data import sensor_series as td
from icml26.core.errors import InputError
from icml26.core.verdict import verdict
from icml26.methods.traffic import data as D
from icml26.methods.traffic.config import (  # noqa: F401  (re-exported: H.Config, H.MODELS)
    DETERMINISTIC,
    MINI,
    MODELS,
    PRETRAINED_VARIANTS,
    Config,
)

# ----------------------------------------------------------------------------- inputs
from icml26.methods.traffic.training import (  # noqa: F401  (re-exported: the harness's public names)
    Fitted,
    Inputs,
    _graph_from,
    _l1,
    _tensors,
    _windows,
    fit,
    make_model,
    n_params,
    predict,
    pretrain,
    slots_per_day,
    train_lane_model,
)


def load_inputs(cfg: Config) -> Inputs:
    """Read and check the data (InputError on a bad file or a series too short for the split)."""
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


def evaluate(predictor, test: dict, cfg: Config) -> dict:
    """Real-unit metrics per horizon: {h: {mae, rmse, mape}} and the inference time."""
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
