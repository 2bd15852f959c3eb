"""MiniTraffic against the forecasting baselines on the built-in lane counts (traffic-anomaly,
22 lanes, 15-minute counts): every model at horizons 1/4/8 and lane fractions 5/10/20%, 3 seeds
for the trained models, 1 for ha / persistence / ridge. Resumable and run in parts: every
(model, lane_fraction, seed) unit is saved to ``benchmarks/results/traffic/seed<k>.json`` as it
finishes (pre-trained weights to ``pretrain-<model>-seed<k>.safetensors`` beside it), and a rerun
skips what is there; ``--print`` only prints.

    OMP_NUM_THREADS=1 timeout 3600 .venv/bin/python benchmarks/traffic.py --seeds 0      # one part
    OMP_NUM_THREADS=1 timeout 3600 .venv/bin/python benchmarks/traffic.py --seeds 1,2    # another
    .venv/bin/python benchmarks/traffic.py --print
    # two parts of one seed at once: another model order and its own file
    ... benchmarks/traffic.py --seeds 2 --models graph,stid,patchtst --tag b

Targets (issue 19): MiniTraffic with pre-training has a lower MAE than without at every lane
fraction <= 10%; the lowest MAE of all models at horizon 4 with 10% lane data; < 150k parameters.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "benchmarks" / "results" / "traffic"
ORDER = (
    "persistence",
    "ha",
    "ridge",
    "minitraffic",
    "minitraffic-nopretrain",
    "dlinear",
    "patchtst",
    "stid",
    "graph",
    "minitraffic-noaug",
    "minitraffic-nocluster",
)
FRACTIONS = (0.05, 0.1, 0.2)
HORIZONS = (1, 4, 8)


def load_all() -> dict:
    out = {}
    for f in sorted(RESULTS.glob("seed*.json")):
        out.update(json.loads(f.read_text())["units"])
    return out


def save(seed: int, units: dict, meta: dict, tag: str = "") -> None:
    from icml26.core.output import atomic_write_text

    atomic_write_text(RESULTS / f"seed{seed}{tag}.json", json.dumps({"meta": meta, "units": units}, indent=0) + "\n")


def run_seed(seed: int, models, fractions, tag: str = "") -> None:
    import torch
    from safetensors.torch import load_file, save_file

    from icml26.core.output import atomic_path
    from icml26.methods.traffic import harness as H

    torch.set_num_threads(1)
    cfg = H.Config(models=tuple(models), horizons=HORIZONS, lane_fractions=tuple(fractions))
    inp = H.load_inputs(cfg)
    test = H._windows(inp.lanes, inp.split.test, cfg)
    path = RESULTS / f"seed{seed}{tag}.json"
    units = json.loads(path.read_text())["units"] if path.exists() else {}
    done = load_all()  # units another part already saved
    for name in models:
        if name in H.DETERMINISTIC and seed != 0:
            continue
        for f in fractions:
            key = f"{name}|{f:g}|{seed}"
            if key in units or key in done:
                continue
            state, pre_s = None, None
            if H.pretrained_flag(name, inp):
                pf = RESULTS / f"pretrain-{name}-seed{seed}.safetensors"
                if pf.exists():
                    state = load_file(str(pf))
                    pre_s = json.loads((pf.with_suffix(".json")).read_text())["pretrain_s"]
                else:
                    state, info = H.pretrain(name, cfg, inp.roads, inp.road_rows, seed=seed, device="cpu")
                    with atomic_path(pf) as tmp:
                        save_file(state, str(tmp))
                    pf.with_suffix(".json").write_text(json.dumps({**info, "load": os.getloadavg()[0]}))
                    pre_s = info["pretrain_s"]
            fitted, info = H.train_lane_model(name, cfg, inp, f, seed=seed, device="cpu", pretrained=state)
            ev = H.evaluate(fitted, test, cfg)
            units[key] = {
                "model": name,
                "lane_fraction": f,
                "seed": seed,
                "pretrained": state is not None,
                "params": info["params"],
                "train_s": info["train_s"],
                "pretrain_s": pre_s,
                "infer_ms_per_batch": ev["infer_ms_per_batch"],
                "epochs_run": info.get("epochs_run"),
                "by_h": {str(h): v for h, v in ev["by_h"].items()},
                "load": os.getloadavg()[0],
                "n_test_windows": int(test["x"].shape[0]),
            }
            save(seed, units, {"commit": _commit(), "config": "harness.Config defaults, horizons 1/4/8"}, tag)
            print(
                f"[seed {seed}] {key}: MAE h4 {ev['by_h'][4]['mae']:.3f} ({info['train_s']:.0f}s, load "
                f"{os.getloadavg()[0]:.1f})",
                flush=True,
            )


def _commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        return "?"


def table(units: dict) -> dict:
    """(model, fraction, h) -> aggregate over seeds."""
    from icml26.methods.traffic.data import mean_ci

    agg: dict = {}
    for u in units.values():
        agg.setdefault((u["model"], u["lane_fraction"]), []).append(u)
    out = {}
    for (m, f), us in agg.items():
        for h in HORIZONS:
            maes = [u["by_h"][str(h)]["mae"] for u in us]
            out[(m, f, h)] = {
                "mae": float(np.mean(maes)),
                "mae_ci": mean_ci(maes),
                "rmse": float(np.mean([u["by_h"][str(h)]["rmse"] for u in us])),
                "mape": float(np.mean([u["by_h"][str(h)]["mape"] for u in us])),
                "params": us[0]["params"],
                "train_s": float(np.mean([u["train_s"] for u in us])),
                "pretrain_s": us[0]["pretrain_s"],
                "infer_ms": float(np.mean([u["infer_ms_per_batch"] for u in us])),
                "seeds": len(us),
                "pretrained": us[0]["pretrained"],
                "load": float(np.mean([u["load"] for u in us])),
            }
    return out


def report(units: dict) -> None:
    t = table(units)
    if not t:
        print("no results yet")
        return
    models = [m for m in ORDER if any(k[0] == m for k in t)]
    for h in HORIZONS:
        print(
            f"\n### horizon {h} step(s) ({15 * h} min): MAE / RMSE / MAPE% (vehicles per 15 min; MAPE on counts > 5), "
            "mean over seeds [95% CI of MAE]"
        )
        print(
            "| model | pretrained | params | "
            + " | ".join(f"{int(f * 100)}% lanes" for f in FRACTIONS)
            + " | train_s (10%) | infer ms/batch | seeds |"
        )
        print("|---|---|---|" + "---|" * len(FRACTIONS) + "---|---|---|")
        for m in models:
            cells = []
            for f in FRACTIONS:
                r = t.get((m, f, h))
                cells.append(
                    "-"
                    if r is None
                    else f"{r['mae']:.3f} [{r['mae_ci'][0]:.2f}, {r['mae_ci'][1]:.2f}] / {r['rmse']:.2f} / "
                    f"{r['mape']:.1f}"
                )
            r0 = t.get((m, 0.1, h)) or next(v for k, v in t.items() if k[0] == m)
            print(
                f"| {m} | {'yes' if r0['pretrained'] else 'no'} | {r0['params']:,} | "
                + " | ".join(cells)
                + f" | {r0['train_s']:.1f}"
                + (f" (+{r0['pretrain_s']:.0f} pre-training)" if r0["pretrain_s"] else "")
                + f" | {r0['infer_ms']:.2f} | {r0['seeds']} |"
            )
    print("\n### targets")
    for f in (0.05, 0.1):
        for h in HORIZONS:
            a, b = t.get(("minitraffic", f, h)), t.get(("minitraffic-nopretrain", f, h))
            if a and b:
                print(
                    f"- pre-training helps at {int(f * 100)}% lanes, h{h}: {a['mae']:.3f} vs {b['mae']:.3f} without -> "
                    f"{'MET' if a['mae'] < b['mae'] else 'NOT MET'} ({a['seeds']}/{b['seeds']} seeds)"
                )
    row = {m: t[(m, 0.1, 4)] for m in models if (m, 0.1, 4) in t}
    if "minitraffic" in row:
        best = min(row, key=lambda m: row[m]["mae"])
        others = sorted((v["mae"], m) for m, v in row.items() if m != "minitraffic")
        print(
            f"- lowest MAE at h4, 10% lanes: {best} ({row[best]['mae']:.3f}); minitraffic "
            f"{row['minitraffic']['mae']:.3f}, "
            f"best other {others[0][1]} {others[0][0]:.3f} -> {'MET' if best == 'minitraffic' else 'NOT MET'}"
        )
        base = sorted((v["mae"], m) for m, v in row.items() if not m.startswith("minitraffic"))
        if base:
            print(
                f"- against the baselines only (h4, 10% lanes): minitraffic {row['minitraffic']['mae']:.3f}, best "
                f"baseline {base[0][1]} "
                f"{base[0][0]:.3f} ({100 * (1 - row['minitraffic']['mae'] / base[0][0]):.1f}% lower)"
            )
        print(
            f"- parameters: {row['minitraffic']['params']:,} -> "
            f"{'MET' if row['minitraffic']['params'] < 150_000 else 'NOT MET'} (< 150k)"
        )
    loads = [u["load"] for u in units.values()]
    print(
        f"\nload average (1 min) during the runs: {min(loads):.1f}-{max(loads):.1f} on 2 cores (times are wall-clock "
        "under that load)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="0,1,2", help="comma list of seeds this part runs")
    ap.add_argument("--models", default=",".join(ORDER))
    ap.add_argument("--fractions", default=",".join(f"{f:g}" for f in FRACTIONS))
    ap.add_argument("--tag", default="", help="suffix of this part's JSON file (two parts of one seed in parallel)")
    ap.add_argument("--print", dest="print_only", action="store_true", help="only print the saved results")
    a = ap.parse_args()
    RESULTS.mkdir(parents=True, exist_ok=True)
    if not a.print_only:
        t0 = time.time()
        for s in (int(x) for x in a.seeds.split(",")):
            run_seed(s, a.models.split(","), [float(x) for x in a.fractions.split(",")], a.tag)
        print(f"part done in {time.time() - t0:.0f} s")
    report(load_all())


if __name__ == "__main__":
    main()
