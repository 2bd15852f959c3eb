"""Files of the ``icml26 traffic`` stages: ``pretrain`` -> ``finetune`` -> ``eval``.

Each file is a safetensors file with the run's settings in its metadata (key ``icml26.traffic``,
JSON): ``pretrain-<model>-seed<k>.safetensors`` (a pre-trained MiniTraffic variant) and
``<model>-f<lane_fraction>-seed<k>.safetensors`` (a fitted forecaster: torch weights, the
graph adjacency, the scaler; or the HA table / ridge weights). Nothing is unpickled.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Iterator

import numpy as np
import torch

from icml26.core.data import sensor_series as td
from icml26.core.errors import InputError
from icml26.core.output import atomic_path, atomic_write_text
from icml26.core.recipe import build_config, config_dict
from icml26.core.safetensors_file import read
from icml26.methods.traffic import baselines as B
from icml26.methods.traffic import data as D
from icml26.methods.traffic import harness as H
from icml26.methods.traffic.data import Scaler

META_KEY = "icml26.traffic"
FIX = "give a folder written by `icml26 traffic pretrain` / `icml26 traffic finetune`"


def _save(path: Path, tensors: dict, meta: dict) -> Path:
    from safetensors.torch import save_file

    with atomic_path(path) as tmp:
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(tmp), metadata={META_KEY: json.dumps(meta)})
    return path


def _load(path: Path) -> tuple[dict, dict]:
    tensors, meta = read(path, fix=FIX)
    if META_KEY not in meta:
        raise InputError(f"{str(path)!r} is not an icml26 traffic file (no {META_KEY} metadata): {FIX}")
    return tensors, json.loads(meta[META_KEY])


def _config_meta(cfg: H.Config) -> dict:
    return config_dict(cfg)


def config_from(meta: dict) -> H.Config:
    return build_config(H.Config, meta["config"], source="checkpoint config")


def frac_tag(f: float) -> str:
    return f"{f:g}"


def check_pretrain(cfg: H.Config, inp: H.Inputs) -> list[str]:
    """The variants to pre-train; InputError without road data or without a variant."""
    if inp.roads is None:
        raise InputError(
            "pretrain needs road-level data: give --road-data (or no --data for the built-in pseudo-roads)"
        )
    variants = [m for m in cfg.models if m in H.PRETRAINED_VARIANTS]
    if not variants:
        raise InputError(f"pretrain: select at least one of {', '.join(H.PRETRAINED_VARIANTS)} with --model")
    return variants


def pretrain_files(cfg: H.Config, inp: H.Inputs, out: str | Path, *, seed: int, device: str) -> Iterator[dict]:
    """Pre-train every selected MiniTraffic variant that uses road data, for each seed."""
    variants = check_pretrain(cfg, inp)
    out = Path(out)
    for v in variants:
        for k in range(cfg.seeds):
            state, info = H.pretrain(v, cfg, inp.roads, inp.road_rows, seed=seed + k, device=device)
            p = _save(
                out / f"pretrain-{v}-seed{seed + k}.safetensors",
                state,
                {"stage": "pretrain", "model": v, "seed": seed + k, "config": _config_meta(cfg), **info},
            )
            yield {
                "kind": "result",
                "stage": "pretrain",
                "model": v,
                "seed": seed + k,
                "path": str(p),
                "params": sum(int(t.numel()) for t in state.values()),
                **info,
            }


def _fitted_tensors(fitted: H.Fitted) -> dict:
    if fitted.name == "ha":
        return {"table": torch.as_tensor(fitted.model.table)}
    if fitted.name == "ridge":
        return {"w": torch.as_tensor(fitted.model.w)}
    if fitted.name == "persistence":
        return {"none": torch.zeros(1)}
    t = {f"model.{k}": v.detach().cpu() for k, v in fitted.model.state_dict().items()}
    adj = getattr(fitted.model, "adj", None)
    if adj is not None and adj.numel():
        t["adj"] = adj.cpu().to(torch.uint8)
    return t


def pretrained_states(cfg: H.Config, checkpoint: str | None, seed: int) -> dict:
    """{(model, seed): state_dict} of the pre-trained files the fine-tuning needs (InputError
    naming a missing one); {} without a checkpoint folder."""
    if checkpoint is None:
        return {}
    if not Path(checkpoint).is_dir():
        raise InputError(f"--checkpoint {checkpoint!r} is not a folder: {FIX}")
    states = {}
    for name, n_seeds in H.plan(cfg):
        if name not in H.PRETRAINED_VARIANTS:
            continue
        for k in range(n_seeds):
            f = Path(checkpoint) / f"pretrain-{name}-seed{seed + k}.safetensors"
            if not f.is_file():
                raise InputError(
                    f"--checkpoint {checkpoint!r} has no {f.name}: run `icml26 traffic pretrain --model {name}` "
                    "with the same --seed/--seeds"
                )
            states[(name, seed + k)] = _load(f)[0]
    return states


def finetune_files(
    cfg: H.Config, inp: H.Inputs, out: str | Path, *, states: dict, seed: int, device: str
) -> Iterator[dict]:
    """Fit every selected model on each lane fraction (MiniTraffic variants start from the
    pre-trained ``states`` when given, else from scratch) and save it."""
    out = Path(out)
    yield from inp.skipped
    for fraction in inp.fractions:
        for name, n_seeds in H.plan(cfg):
            if name not in inp.models:
                continue
            for k in range(n_seeds):
                s = seed + k
                state = states.get((name, s))
                fitted, info = H.train_lane_model(name, cfg, inp, fraction, seed=s, device=device, pretrained=state)
                meta = {
                    "stage": "finetune",
                    "model": name,
                    "seed": s,
                    "lane_fraction": fraction,
                    "pretrained": state is not None,
                    "scaler": [fitted.scaler.mean, fitted.scaler.std],
                    "n_nodes": inp.lanes.shape[1],
                    "slots": H.slots_per_day(inp.lanes),
                    "sensors": inp.lanes.sensors,
                    "config": _config_meta(cfg),
                    "train_s": info["train_s"],
                    "params": info["params"],
                }
                p = _save(out / f"{name}-f{frac_tag(fraction)}-seed{s}.safetensors", _fitted_tensors(fitted), meta)
                yield {
                    "kind": "result",
                    "stage": "finetune",
                    "model": name,
                    "seed": s,
                    "lane_fraction": fraction,
                    "pretrained": state is not None,
                    "path": str(p),
                    "params": info["params"],
                    "train_s": info["train_s"],
                    "epochs_run": info.get("epochs_run"),
                }


def load_fitted(path: Path, device: str = "cpu") -> tuple[H.Fitted, dict]:

    tensors, meta = _load(path)
    cfg = config_from(meta)
    name = meta["model"]
    scaler = Scaler(*meta["scaler"])
    if name == "ha":
        m = B.HistoricalAverage(meta["slots"])
        m.table = tensors["table"].numpy().astype(np.float64)
    elif name == "ridge":
        m = B.RidgeLags(cfg.ridge_alpha)
        m.w = tensors["w"].numpy().astype(np.float64)
    elif name == "persistence":
        m = B.Persistence()
    else:
        m = H.make_model(name, cfg, meta["n_nodes"], meta["slots"])
        try:
            m.load_state_dict({k[6:]: v for k, v in tensors.items() if k.startswith("model.")}, strict=False)
        except RuntimeError as e:
            raise InputError(f"{str(path)!r}: weights do not fit the model ({str(e).splitlines()[0][:100]})") from None
        if "adj" in tensors:
            m.set_graph(tensors["adj"].bool().numpy())
        m.to(device).eval()
    return H.Fitted(name, m, scaler, cfg.max_horizon, device), meta


def eval_plan(checkpoint: str | Path, *, data: str | None, horizons: tuple[int, ...] | None):
    """Read and check a ``finetune`` folder and the evaluation data: (cfg, inputs, groups)."""
    d = Path(checkpoint)
    files = sorted(p for p in d.glob("*-f*-seed*.safetensors")) if d.is_dir() else []
    if not files:
        raise InputError(
            f"--checkpoint {str(checkpoint)!r} holds no fitted model files (*-f<fraction>-seed<k>.safetensors): {FIX}"
        )
    groups: dict = {}
    for p in files:
        _, meta = _load(p)
        groups.setdefault((meta["model"], meta["lane_fraction"]), []).append(p)
    cfg0 = config_from(_load(files[0])[1])
    over = {"data": data} if data is not None else {}
    if horizons:
        bad = [h for h in horizons if h > cfg0.max_horizon]
        if bad:
            raise InputError(f"--horizon {bad[0]} exceeds the fitted models' horizon {cfg0.max_horizon}")
        over["horizons"] = tuple(horizons)
    cfg = dataclasses.replace(cfg0, **over)
    inp = H.load_inputs(dataclasses.replace(cfg, road_data=None) if data is not None else cfg)
    for (name, fraction), paths in groups.items():
        for p in paths:
            meta = _load(p)[1]
            if meta["sensors"] != inp.lanes.sensors:
                raise InputError(
                    f"{p.name} was fitted on other sensors than the evaluation data ({len(meta['sensors'])} vs "
                    f"{inp.lanes.shape[1]})"
                )
    return cfg, inp, groups


def eval_files(cfg: H.Config, inp: H.Inputs, groups: dict, *, device: str) -> Iterator[dict]:
    """Test every fitted file of a ``finetune`` folder on the test days: one result per (model,
    horizon, lane_fraction) over the seeds found, as ``traffic run`` writes them."""
    test = H._windows(inp.lanes, inp.split.test, cfg)
    results = []
    for (name, fraction), paths in groups.items():
        runs = []
        for p in paths:
            fitted, meta = load_fitted(p, device)
            ev = H.evaluate(fitted, test, cfg)
            runs.append({"params": meta["params"], "train_s": meta["train_s"], **ev})
        for rec in H.result_records(
            name, cfg, inp, fraction, runs, [], int(test["x"].shape[0]), bool(meta["pretrained"])
        ):
            results.append(rec)
            yield rec
    yield H.summary(results, inp)


def prepare_dataset(counts: str | None, cfg: H.Config):
    """Read and group the built-in (or a user's long) counts: (lanes, roads, split); InputError on bad input."""
    if cfg.pretrain_days == 0:
        raise InputError(
            "prepare: pretrain_days must be >= 1 (the grouping of detectors into roads is fitted on those days)"
        )
    lanes = td.lane_counts(counts)
    split = D.day_split(lanes.timestamps, cfg.pretrain_days, cfg.finetune_days, cfg.val_days, cfg.test_days)
    lo, hi = split.pretrain
    labels = td.group_by_correlation(lanes.values[lo:hi], min(cfg.n_roads, lanes.shape[1]))
    lanes.groups = [f"road_{g}" for g in labels]
    return lanes, td.road_series(lanes, labels), split


def prepare_files(prepared, out: str | Path, *, counts: str | None, cfg: H.Config) -> Iterator[dict]:
    """Write the built-in lane/road datasets: lanes.csv (vehicles per 15 minutes per detector),
    roads.csv (each pseudo-road = mean of its detectors), sensors.csv (detector -> road, the
    grouping: average-linkage clustering of 1 - correlation over the pre-training days) and
    dataset.json (units, split days, grouping rule)."""
    lanes, roads, split = prepared
    out = Path(out)
    files = []
    import pandas as pd

    def wide(s):
        df = pd.DataFrame(s.values, columns=s.sensors)
        df.insert(0, "timestamp", pd.to_datetime(s.timestamps).strftime("%Y-%m-%d %H:%M:%S"))
        return df.to_csv(index=False, float_format="%.4g")

    files.append(atomic_write_text(out / "lanes.csv", wide(lanes)))
    files.append(atomic_write_text(out / "roads.csv", wide(roads)))
    files.append(
        atomic_write_text(
            out / "sensors.csv",
            lanes.sensor_table().rename(columns={"group": "road"}).to_csv(index=False, float_format="%.4g"),
        )
    )
    info = {
        "source": "PyPI traffic-anomaly sample_counts" if counts is None else str(counts),
        "unit": "vehicles / 15 min",
        "lanes": lanes.shape[1],
        "roads": roads.shape[1],
        "steps": lanes.shape[0],
        "days": list(split.days),
        "grouping": f"average-linkage clustering of 1 - Pearson correlation over the first {cfg.pretrain_days} "
        f"days into {roads.shape[1]} roads; road = mean of its lanes",
        "split_days": {
            "pretrain": cfg.pretrain_days,
            "finetune": cfg.finetune_days,
            "val": cfg.val_days,
            "test": cfg.test_days,
        },
        "gap_rule": "a window never spans a change of the 15-minute step or a missing value",
    }
    files.append(atomic_write_text(out / "dataset.json", json.dumps(info, indent=1) + "\n"))
    for p in files:
        yield {"kind": "result", "file": p.name, "path": str(p), "size_bytes": p.stat().st_size}
    yield {
        "kind": "summary",
        "out": str(out),
        "lanes": lanes.shape[1],
        "roads": roads.shape[1],
        "steps": lanes.shape[0],
        "road_of_lane": dict(zip(lanes.sensors, lanes.groups)),
    }
