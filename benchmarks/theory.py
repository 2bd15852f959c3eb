"""Benchmark of the two theory commands (jacobian-spectrum, equivariance), in one run on a CPU.

Prints:
  1. measured vs predicted Lyapunov exponents at depths 8-64 (width 256, He init, top 16):
     the masked model (free gates) with its target |measured - predicted| <= 0.02 nats/layer
     for each of the top 16 at depth >= 32, and the real ReLU MLP at init on MNIST digits
     (its own gates) beside it;
  2. the QR method's time against a full SVD of the product (target >= 10x at depth 64,
     width 512, top 16), both float64 on one thread, median of --repeats;
  3. the equivariance table in the paper's layout (task x layer f1/f2 x flip, Tanh and GELU),
     our flip-loss nets on Fashion-MNIST beside the paper's CIFAR-10 numbers, the controls, and
     whether the paper's orderings hold (Tanh below GELU, hflip below vflip).

Resumable: every part is cached in --json (default benchmarks/results/theory.json); a rerun
prints from it and computes only what is missing (--redo PART recomputes one). PNGs go to
--fig-dir (default docs/): theory_exponents.png, theory_equivariance.png.

    OMP_NUM_THREADS=1 timeout 3600 .venv/bin/python benchmarks/theory.py
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402


from _results import load_results as _load  # noqa: E402
from _results import save_results  # noqa: E402


def _save(path: Path, data: dict) -> None:
    save_results(path, data)


from _results import uptime as _uptime  # noqa: E402


# ----------------------------------------------------------------------------- part 1
def part_lyapunov(args) -> dict:
    from icml26.methods.theory import spectrum as sp

    cfg = sp.Config(
        arch="mlp",
        width=256,
        depths=(8, 16, 32, 64),
        init="he",
        top_k=16,
        gates=("free", "fixed"),
        n_samples=args.samples,
        data="mnist",
    )
    t0 = time.time()
    recs = [r for r in sp.run(cfg, seed=0) if r["kind"] == "result"]
    return {"records": recs, "seconds": time.time() - t0, "load": _uptime(), "n_samples": args.samples}


def print_lyapunov(res: dict) -> None:
    print(
        f"\n## 1. Lyapunov exponents, He-init bias-free ReLU MLP, width 256, top 16, {res['n_samples']} draws per row "
        f"({res['seconds']:.0f} s; {res['load']})"
    )
    print(
        "nats per layer; err = max_k |measured - closed form|; the target applies to the masked model (free gates) at "
        "depth >= 32"
    )
    print(
        "| gates | depth | lambda_1 meas / pred | lambda_16 meas / pred | max err (QR) | target <= 0.02 | (1/L) log "
        "s_k: max err vs finite-depth pred | top log-gap log(s1/s2) meas / pred | alignment |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in res["records"]:
        gate = "free (masked model)" if r["gates"] == "free" else "fixed (ReLU net, own gates)"
        tgt = ("met" if r["max_abs_err"] <= 0.02 else "NOT met") if (r["gates"] == "free" and r["depth"] >= 32) else "-"
        print(
            f"| {gate} | {r['depth']} | {r['lyapunov'][0]:+.4f} / {r['lyapunov_pred'][0]:+.4f} | "
            f"{r['lyapunov'][-1]:+.4f} / {r['lyapunov_pred'][-1]:+.4f} "
            f"| {r['max_abs_err']:.4f} | {tgt} | {r['max_abs_err_log_sv']:.4f} | {r['log_gap'][0]:.3f} / "
            f"{r['log_gap_pred'][0]:.3f} | {r['alignment']:.3f} |"
        )


# ----------------------------------------------------------------------------- part 2
def part_speed(args) -> dict:
    from icml26.methods.theory import lyapunov as ly
    from icml26.methods.theory.jacobian import draw_gates

    torch.set_num_threads(1)
    n, L, k = 512, 64, 16
    g = torch.Generator().manual_seed(0)
    fs = [
        draw_gates(n, 0.5, k, "relu", 0.0, g)[:, None]
        * (torch.randn(n, n, generator=g, dtype=torch.float64) * (2.0 / n) ** 0.5)
        for _ in range(L)
    ]

    def svd_full():
        j = fs[0]
        for f in fs[1:]:
            j = f @ j
        return torch.log(torch.linalg.svdvals(j)[:k]) / L

    def qr():
        return ly.lyap_qr(fs, k, gen=torch.Generator().manual_seed(1))

    def refined():
        return ly.top_singular(fs, k, sweeps=2, oversample=16, gen=torch.Generator().manual_seed(1)).log_s / L

    out = {}
    for name, fn in (("svd_full", svd_full), ("qr_benettin", qr), ("top_singular_refined", refined)):
        fn()
        ts = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            val = fn()
            ts.append(time.perf_counter() - t0)
        out[name] = {"median_s": float(np.median(ts)), "all_s": ts, "values": val.tolist()}
    out["load"] = _uptime()
    return out


def print_speed(res: dict) -> None:
    s, q, t = res["svd_full"], res["qr_benettin"], res["top_singular_refined"]
    ratio = s["median_s"] / q["median_s"]
    print(f"\n## 2. Speed, depth 64, width 512, top 16, float64, 1 thread, median of {len(s['all_s'])} ({res['load']})")
    print("| method | seconds | speed-up vs full SVD |")
    print("|---|---|---|")
    print(f"| full product + SVD (svdvals) | {s['median_s']:.3f} | 1.0x |")
    print(
        f"| QR along the product (Benettin, lyap_qr) | {q['median_s']:.3f} | {ratio:.1f}x (target >= 10x: "
        f"{'met' if ratio >= 10 else 'NOT met'}) |"
    )
    print(
        f"| refined top-k (2 sweeps, Rayleigh-Ritz, top_singular) | {t['median_s']:.3f} | "
        f"{s['median_s'] / t['median_s']:.1f}x |"
    )
    d = np.max(np.abs(np.array(t["values"]) - np.array(s["values"])))
    print(f"refined top-16 (1/L) log s_k vs the full SVD's: max difference {d:.2e} nats/layer")


# ----------------------------------------------------------------------------- part 3
EQ_PARTS = [(task, act) for task in ("autoencoder", "classifier") for act in ("tanh", "gelu")]


def part_equivariance(args, task: str, act: str) -> dict:
    from icml26.methods.theory import equivariance as eq

    cfg = eq.Config(
        task=(task,),
        act=(act,),
        group=("hflip", "vflip"),
        models=eq.MODELS,
        seeds=args.eq_seeds,
        data="fashion-mnist",
        widths=(64, 256, 256),
        epochs=args.eq_epochs,
        train_examples=args.eq_examples,
        n_noise=args.eq_noise,
    )
    t0 = time.time()
    recs = [r for r in eq.run(cfg, seed=0) if r["kind"] == "result"]
    return {
        "records": recs,
        "seconds": time.time() - t0,
        "load": _uptime(),
        "setting": {
            "seeds": cfg.seeds,
            "epochs": cfg.epochs,
            "train_examples": cfg.train_examples,
            "n_noise": cfg.n_noise,
            "equiv_weight": cfg.equiv_weight,
            "equiv_on_noise": cfg.equiv_on_noise,
        },
    }


def print_equivariance(parts: dict) -> None:
    from icml26.methods.theory.equivariance import PAPER

    recs = [r for p in parts.values() for r in p["records"]]
    if not recs:
        return
    st = next(iter(parts.values()))["setting"]
    secs = sum(p["seconds"] for p in parts.values())
    print(
        f"\n## 3. Layerwise equivariance (median relative error over {st['n_noise']} noise inputs, mean of "
        f"{st['seeds']} seeds; "
        f"Fashion-MNIST, {st['epochs']} epochs on {st['train_examples']} images; {secs:.0f} s)"
    )
    get = lambda **kw: next((r for r in recs if all(r.get(k) == v for k, v in kw.items())), None)
    print(
        "| task | layer | mirror | Tanh (ours) | Tanh (paper) | GELU (ours) | GELU (paper) | Tanh P-proj. | GELU "
        "P-proj. |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for (task, layer, grp), paper in PAPER.items():
        row = [get(model="equivariant-loss", task=task, layer=layer, group=grp, act=a) for a in ("tanh", "gelu")]
        f = lambda r, k: f"{r[k]:.3f}" if r else "-"
        print(
            f"| {task} | f{layer} | {'horizontal' if grp == 'hflip' else 'vertical (ref)'} | "
            f"{f(row[0], 'rel_equivariance_error')} | {paper['tanh']} "
            f"| {f(row[1], 'rel_equivariance_error')} | {paper['gelu']} | {f(row[0], 'perm_projection_error')} | "
            f"{f(row[1], 'perm_projection_error')} |"
        )
    print("\nEnd-to-end error and controls (hflip, f1 / f2 / f3; e2e = median ||f(gy) - rho f(y)|| / ||f(y)||):")
    print("| task | act | model | f1 | f2 | f3 | end-to-end | test acc / mse |")
    print("|---|---|---|---|---|---|---|---|")
    for task in ("autoencoder", "classifier"):
        for act in ("tanh", "gelu"):
            for model in ("equivariant-loss", "no-flip-loss", "random-init", "tied"):
                rs = [get(model=model, task=task, act=act, group="hflip", layer=l) for l in (1, 2, 3)]
                if not rs[0]:
                    continue
                q = rs[0]["test_accuracy"] if task == "classifier" else rs[0]["test_mse"]
                print(
                    f"| {task} | {act} | {model} | "
                    + " | ".join(f"{r['rel_equivariance_error']:.3g}" for r in rs)
                    + f" | {rs[0]['end_to_end_error']:.3g} | {q:.3f} |"
                )
    print("\nThe paper's orderings on our flip-loss nets:")
    for task in ("autoencoder", "classifier"):
        t, g = (
            get(model="equivariant-loss", task=task, layer=1, group="hflip", act="tanh"),
            get(model="equivariant-loss", task=task, layer=1, group="hflip", act="gelu"),
        )
        if t and g:
            print(
                f"- {task}: Tanh f1 {t['rel_equivariance_error']:.3f} "
                f"{'<' if t['rel_equivariance_error'] < g['rel_equivariance_error'] else '>='} GELU f1 "
                f"{g['rel_equivariance_error']:.3f}"
                f" ({'holds' if t['rel_equivariance_error'] < g['rel_equivariance_error'] else 'does NOT hold'})"
            )
        for act in ("tanh", "gelu"):
            h, v = (
                get(model="equivariant-loss", task=task, layer=1, group="hflip", act=act),
                get(model="equivariant-loss", task=task, layer=1, group="vflip", act=act),
            )
            if h and v:
                ok = h["rel_equivariance_error"] < v["rel_equivariance_error"]
                print(
                    f"- {task} {act}: hflip f1 {h['rel_equivariance_error']:.3f} {'<' if ok else '>='} vflip f1 "
                    f"{v['rel_equivariance_error']:.3f} ({'holds' if ok else 'does NOT hold'})"
                )


def figures(data: dict, fig_dir: Path) -> None:
    from icml26.methods.theory import equivariance as eq
    from icml26.methods.theory import spectrum as sp

    fig_dir.mkdir(parents=True, exist_ok=True)
    if "lyapunov" in data:
        tmp = fig_dir / ".theory_tmp"
        tmp.mkdir(exist_ok=True)
        sp.plot(data["lyapunov"]["records"], tmp)
        os.replace(tmp / "exponents_vs_depth.png", fig_dir / "theory_exponents.png")
        tmp.rmdir()
    recs = [r for k, p in data.items() if k.startswith("eq:") for r in p["records"]]
    if recs:
        tmp = fig_dir / ".theory_tmp"
        tmp.mkdir(exist_ok=True)
        eq.plot([r for r in recs if r["model"] in ("equivariant-loss", "no-flip-loss")], tmp)
        os.replace(tmp / "equivariance_per_layer.png", fig_dir / "theory_equivariance.png")
        tmp.rmdir()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "theory.json"))
    ap.add_argument("--fig-dir", default=str(ROOT / "docs"))
    ap.add_argument("--only", choices=["lyapunov", "speed", "equivariance"], action="append")
    ap.add_argument("--redo", choices=["lyapunov", "speed", "equivariance"], action="append", default=[])
    ap.add_argument("--samples", type=int, default=8, help="draws per row in part 1")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--eq-seeds", type=int, default=2)
    ap.add_argument("--eq-epochs", type=int, default=6)
    ap.add_argument("--eq-examples", type=int, default=10000)
    ap.add_argument("--eq-noise", type=int, default=20000)
    ap.add_argument("--print-only", action="store_true", help="print the cached tables, compute nothing")
    args = ap.parse_args()
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = _load(path)
    parts = args.only or ["lyapunov", "speed", "equivariance"]
    for name in args.redo:
        for k in [k for k in data if k == name or (name == "equivariance" and k.startswith("eq:"))]:
            del data[k]
    if not args.print_only:
        if "speed" in parts and "speed" not in data:
            data["speed"] = part_speed(args)
            _save(path, data)
        if "lyapunov" in parts and "lyapunov" not in data:
            data["lyapunov"] = part_lyapunov(args)
            _save(path, data)
        if "equivariance" in parts:
            for task, act in EQ_PARTS:
                key = f"eq:{task}:{act}"
                if key not in data:
                    data[key] = part_equivariance(args, task, act)
                    _save(path, data)
                    print(f"[{key} done in {data[key]['seconds']:.0f} s]", file=sys.stderr, flush=True)
    if "lyapunov" in data:
        print_lyapunov(data["lyapunov"])
    if "speed" in data:
        print_speed(data["speed"])
    print_equivariance({k: v for k, v in data.items() if k.startswith("eq:")})
    figures(data, Path(args.fig_dir))


if __name__ == "__main__":
    main()
