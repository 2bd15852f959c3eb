"""Benchmark of ``icml26 icr`` on this CPU: the paper's two claims (arXiv 2606.09718) on Fashion-MNIST.

Parts (each resumable; results cached in --json, default benchmarks/results/icr.json; run folders
under --runs, default runs/icr-bench/; a rerun prints from the cache and computes what is missing):
  cost        one training step (batch 32) vs one ICR evaluation (512 images x 4 views and
              1024 x 2, features + ICR) vs one memorization check (64 Heun samples, 12 steps); CPU seconds (process_time), tiny preset, 16x16;
  small-<N>   ``icml26 icr train --train-size N`` with the monitor (--resume on rerun), N in --sizes;
  full        ``icml26 icr train --train-size 0`` (all 60k images), a short run (--full-steps);
  sweep       ``icml26 icr analyze`` on the full-data model: ICR and probe accuracy on the paper's sigma grid;
  figures     the PNGs of the run folders, copied to --fig-dir (default docs/).
Targets (the paper's claims, reported as shown / refuted / not measured):
  A. ICR's minimum and the probe accuracy's peak at an intermediate noise level, within one grid step;
  B. at every small training size ICR's minimum (smoothed, train.icr_min_step) comes before the
     memorization onset (memorization_fraction > 0.05); with the full data ICR keeps falling as the
     Frechet distance falls.

    OMP_NUM_THREADS=1 nice -n 5 timeout 3000 .venv/bin/python benchmarks/icr.py --part small-32 --json benchmarks/results/icr_small32.json
    .venv/bin/python benchmarks/icr.py --print-only
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


from _results import load_results as _load  # noqa: E402
from _results import save_results  # noqa: E402


def _save(path: Path, data: dict) -> None:
    save_results(path, data)


from _results import uptime as _uptime  # noqa: E402


def _rel(path) -> str:
    """``path`` relative to the checkout when inside it (the saved results hold no machine paths)."""
    p = Path(path)
    try:
        return str(p.resolve().relative_to(ROOT))
    except ValueError:
        return str(p)


def _records(run_dir: Path) -> list[dict]:
    f = run_dir / "records.jsonl"
    recs = [json.loads(x) for x in f.read_text().splitlines() if x.strip()] if f.is_file() else []
    for r in recs:
        if "unet_dir" in r:
            r["unet_dir"] = _rel(r["unet_dir"])
    return recs


def _finished(run_dir: Path) -> bool:
    r = _records(run_dir)
    return bool(r) and r[-1].get("kind") == "summary"


def _icml26(args: list[str]) -> None:
    cmd = [str(ROOT / ".venv" / "bin" / "icml26"), *args]
    print("$ " + " ".join(cmd), file=sys.stderr, flush=True)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


# ----------------------------------------------------------------------------- cost
def part_cost(args) -> dict:
    import numpy as np
    import torch

    from icml26.core.data.images import load_images
    from icml26.methods.diffusion import estimator as E
    from icml26.methods.diffusion import features as F
    from icml26.methods.diffusion import unet as U

    torch.manual_seed(0)
    x = F.prepare_images(load_images("fashion-mnist", "train").images[:1024], 16, 1)
    net = U.build_unet("tiny", image_size=16)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    ts = []
    for k in range(12):
        t0 = time.process_time()  # CPU seconds of this process: robust to the other jobs on the machine
        loss = U.edm_loss(net, x[:32], torch.randn(32), torch.randn(32, 1, 16, 16))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if k >= 2:
            ts.append(time.process_time() - t0)
    sched = U.Schedule("edm")
    out = {"train_step_s": float(np.median(ts)), "parameters": sum(p.numel() for p in net.parameters()), "batch": 32,
           "threads": torch.get_num_threads(), "load": _uptime()}
    for n, v in ((512, 4), (1024, 2)):
        t0 = time.process_time()
        h = F.view_features(net, x[:n], sched, 0.29, views=v, layer="mid_block", seed=0)
        t1 = time.process_time()
        E.icr(h)
        t2 = time.process_time()
        out[f"icr_{n}x{v}_features_s"] = t1 - t0
        out[f"icr_{n}x{v}_estimator_s"] = t2 - t1
    t0 = time.process_time()
    U.edm_sample(net.eval(), torch.randn(64, 1, 16, 16), steps=12)
    out["sample_64_s"] = time.process_time() - t0
    return out


def print_cost(c: dict) -> None:
    print(f"\n## Cost (tiny U-Net, {c['parameters']} parameters, 16x16, {c['threads']} thread; CPU seconds of the process; {c['load']})")
    print("| what | CPU seconds | x one training step |")
    print("|---|---|---|")
    st = c["train_step_s"]
    print(f"| one training step (batch {c['batch']}, forward + backward + AdamW) | {st:.3f} | 1.0 |")
    for k in ("512x4", "1024x2"):
        f, e = c[f"icr_{k}_features_s"], c[f"icr_{k}_estimator_s"]
        print(f"| one ICR evaluation, {k.replace('x', ' images x ')} views: features | {f:.3f} | {f / st:.1f} |")
        print(f"| one ICR evaluation, {k.replace('x', ' images x ')} views: estimator (Cholesky) | {e:.4f} | {e / st:.3f} |")
    print(f"| memorization check: 64 samples, Heun 12 steps (23 evaluations) | {c['sample_64_s']:.3f} | {c['sample_64_s'] / st:.1f} |")


# ----------------------------------------------------------------------------- training runs
def part_train(args, size: int, steps: int, monitor_every: int, run_dir: Path) -> dict:
    if not _finished(run_dir) and not args.collect:
        resume = ["--resume"] if (run_dir / "records.jsonl").is_file() else []
        _icml26(["icr", "train", "--data", args.data, "--train-size", str(size), "--steps", str(steps),
                 "--set", f"monitor_every={monitor_every}", "--set", f"memorization_samples={args.samples}", "--set", f"sampler_steps={args.sampler_steps}",
                 "-q", "--out", str(run_dir), *resume])
    recs = _records(run_dir)
    return {"records": [r for r in recs if r.get("kind") in ("step", "result", "summary", "feature_network")],
            "load": _uptime(), "run_dir": _rel(run_dir)}


def part_sweep(args, run_dir: Path, model_dir: Path) -> dict:
    if not _finished(run_dir) and not args.collect:
        if run_dir.exists():
            shutil.rmtree(run_dir)
        _icml26(["icr", "analyze", "--model", str(model_dir), "--data", args.data, "--set", f"icr_images={args.sweep_images}",
                 "-q", "--out", str(run_dir)])
    return {"records": _records(run_dir), "load": _uptime(), "run_dir": _rel(run_dir)}


def _verdict(ok: bool | None) -> str:
    return "not measured" if ok is None else ("shown" if ok else "refuted")


def print_sweep(s: dict) -> None:
    rows = [r for r in s["records"] if r.get("kind") == "result"]
    if not rows:
        print("\n## A. Noise sweep: not run yet")
        return
    summ = s["records"][-1]
    if summ.get("kind") != "summary":  # unfinished: the same rule on the levels done so far
        from icml26.methods.diffusion.analyze import grid_argext

        i, j = grid_argext([r["icr"] for r in rows], False), grid_argext([r["probe_accuracy"] for r in rows], True)
        n = len(rows)
        summ = {"icr_min_level": rows[i]["noise_level"], "icr_min": rows[i]["icr"], "probe_peak_level": rows[j]["noise_level"],
                "probe_peak_accuracy": rows[j]["probe_accuracy"], "grid_steps_apart": abs(i - j),
                "icr_min_intermediate": f"{0 < i < n - 1} (partial: {n} levels)", "probe_peak_intermediate": 0 < j < n - 1,
                "claim_window": None}
    print(f"\n## A. Noise sweep on the full-data model ({rows[0]['n_images']} training images x {rows[0]['views']} views, "
          f"{rows[0]['feature_layer']}, d = {rows[0]['feature_dim']}; probe: logistic regression on those images, "
          f"accuracy on 1000 test images; {s['load']})")
    print("| sigma | alpha_bar | ICR | probe accuracy | Tr Sigma_s | Tr Sigma_xi | tau |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['noise_level']:g} | {r['alpha_bar']:.3f} | {r['icr']:.4f} | {r['probe_accuracy']:.3f} | {r['trace_sigma_s']:.4g} "
              f"| {r['trace_sigma_xi']:.4g} | {r['shrinkage']:.2e} |")
    ok = summ.get("claim_window")
    print(f"ICR minimum at sigma = {summ['icr_min_level']} (ICR {summ['icr_min']:.4f}); probe peak at sigma = {summ['probe_peak_level']} "
          f"(accuracy {summ['probe_peak_accuracy']:.3f}); {summ['grid_steps_apart']} grid step(s) apart; intermediate: ICR "
          f"{summ['icr_min_intermediate']}, probe {summ['probe_peak_intermediate']}")
    print(f"Target A (minimum and peak at an intermediate level, within one grid step): {_verdict(ok)}")


def print_train(parts: dict) -> None:
    print("\n## B. Monitored training (tiny U-Net, 16x16, batch 32; ICR at sigma* = 0.29 on the training images; "
          "memorized = NN-distance ratio < 1/3, the stand-in for SSCD > 0.6; onset = first fraction > 0.05)")
    print("| training images | steps | ICR min step (smoothed, window 3) | ICR min | onset step | onset - ICR min | final memorized | final ICR | ICR min before onset |")
    print("|---|---|---|---|---|---|---|---|---|")
    verdicts = []
    for name, p in parts.items():
        res = [r for r in p["records"] if r.get("kind") == "result"]
        partial = ""
        if not res:  # an unfinished run: the same rules on the monitor points so far
            from icml26.methods.diffusion import train as T

            st = [r for r in p["records"] if r.get("kind") == "step"]
            if not st:
                print(f"| {name} | (not started) | | | | | | | |")
                continue
            s_, i_, m_ = [r["step"] for r in st], [r["icr"] for r in st], [r["memorization_fraction"] for r in st]
            smin, on = T.icr_min_step(s_, i_, 3), T.onset_step(s_, m_, 0.05)
            res = [{"train_size": st[0]["train_size"], "steps": s_[-1], "icr_min_step": smin, "icr_min": dict(zip(s_, i_))[smin],
                    "memorization_onset_step": on, "onset_minus_icr_min_steps": (on - smin) if on is not None else None,
                    "final_memorization_fraction": m_[-1], "final_icr": i_[-1],
                    "icr_min_before_onset": (smin < on) if on is not None else None}]
            partial = " (partial)"
        r = res[0]
        small = name.startswith("small")
        if small:
            verdicts.append(r["icr_min_before_onset"])
        f = lambda v, fmt="{}": "-" if v is None else fmt.format(v)  # noqa: E731
        print(f"| {r['train_size']} | {r['steps']}{partial} | {f(r['icr_min_step'])} | {f(r['icr_min'], '{:.4f}')} | {f(r['memorization_onset_step'])} "
              f"| {f(r['onset_minus_icr_min_steps'])} | {f(r['final_memorization_fraction'], '{:.3f}')} | {f(r['final_icr'], '{:.4f}')} "
              f"| {_verdict(r['icr_min_before_onset']) if small else '-'} |")
    for name, p in parts.items():
        st = [r for r in p["records"] if r.get("kind") == "step"]
        if st:
            print(f"\n{name} monitor points (step: ICR / memorized / FD):  " + ";  ".join(
                f"{r['step']}: {r['icr']:.3f} / {r['memorization_fraction']:.2f} / {r['frechet_distance']:.1f}" if r.get("frechet_distance") is not None
                else f"{r['step']}: {r['icr']:.3f} / {r['memorization_fraction']:.2f}" for r in st))
    ok = None if not verdicts or any(v is None for v in verdicts) else all(verdicts)
    print(f"\nTarget B (ICR minimum before memorization onset at every small size): {_verdict(ok)}"
          + ("" if ok is not None else " (a size without onset within its steps, or not run)"))
    full = parts.get("full")
    if full:
        st = [r for r in full["records"] if r.get("kind") == "step"]
        if len(st) >= 2:
            import numpy as np

            icr = np.array([r["icr"] for r in st])
            fd = np.array([r["frechet_distance"] if r.get("frechet_distance") is not None else np.nan for r in st])
            falls = bool(icr[-1] < icr[0])
            rho = float(np.corrcoef(icr, fd)[0, 1]) if np.isfinite(fd).all() else float("nan")
            print(f"Full data: ICR {icr[0]:.4f} -> {icr[-1]:.4f} over {st[-1]['step']} steps, FD {fd[0]:.1f} -> {fd[-1]:.1f}; "
                  f"Pearson(ICR, FD) = {rho:.2f}; ICR keeps falling as FD improves: {_verdict(falls and rho > 0)}")


def part_figures(args, runs: dict[str, Path]) -> dict:
    from icml26.methods.diffusion import report as R

    fig = Path(args.fig_dir)
    fig.mkdir(parents=True, exist_ok=True)
    out = {}
    if _finished(runs["sweep"]):
        out["sweep"] = str(shutil.copy(next(R.run(runs["sweep"]))["plot"], fig / "icr_sweep.png"))
    train_recs = []
    for k in [k for k in runs if k.startswith("small") or k == "full"]:
        train_recs += [r for r in _records(runs[k]) if r.get("kind") in ("step", "result")]
    if train_recs:
        files = R.plot_training(train_recs, fig / "icr_training.png", fig / "icr_quality.png")
        out["training"] = [str(f) for f in files]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", action="append", help="cost | small-<N> | full | sweep | figures (repeatable; default: all)")
    ap.add_argument("--print-only", action="store_true")
    ap.add_argument("--redo", action="append", default=[])
    ap.add_argument("--collect", action="store_true", help="read the run folders as they are (unfinished runs are printed as partial); run nothing")
    ap.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "icr.json"))
    ap.add_argument("--runs", default=str(ROOT / "runs" / "icr-bench"))
    ap.add_argument("--fig-dir", default=str(ROOT / "docs"))
    ap.add_argument("--data", default="fashion-mnist")
    ap.add_argument("--sizes", default="32,64")
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--monitor-every", type=int, default=100)
    ap.add_argument("--samples", type=int, default=64)
    ap.add_argument("--sampler-steps", type=int, default=12)
    ap.add_argument("--full-steps", type=int, default=600)
    ap.add_argument("--sweep-images", type=int, default=512)
    args = ap.parse_args()
    jpath = Path(args.json)
    res = _load(jpath)
    runs_root = Path(args.runs)
    sizes = [int(s) for s in args.sizes.split(",")]
    runs = {f"small-{n}": runs_root / f"small-{n}" for n in sizes}
    runs["full"] = runs_root / "full"
    runs["sweep"] = runs_root / "sweep"
    parts = args.part or ["cost", *[f"small-{n}" for n in sizes], "full", "sweep", "figures"]
    if not args.print_only:
        for p in parts:
            if p in res and p not in args.redo and p != "figures" and not (args.collect and p != "cost"):
                continue
            t0 = time.time()
            if p == "cost":
                res[p] = part_cost(args)
            elif p.startswith("small-"):
                res[p] = part_train(args, int(p.split("-")[1]), args.steps, args.monitor_every, runs_root / p)
            elif p == "full":
                res[p] = part_train(args, 0, args.full_steps, max(args.full_steps // 4, 1), runs["full"])
            elif p == "sweep":
                fr = [r for r in _records(runs["full"]) if r.get("kind") == "result"]
                if not fr:
                    print("sweep: the full-data run has not finished; run --part full first", file=sys.stderr)
                    continue
                res[p] = part_sweep(args, runs["sweep"], ROOT / fr[0]["unet_dir"])
            elif p == "figures":
                res[p] = part_figures(args, runs)
            else:
                raise SystemExit(f"unknown part {p!r}")
            res[p]["wall_s"] = time.time() - t0
            _save(jpath, res)
    if "cost" in res:
        print_cost(res["cost"])
    if "sweep" in res:
        print_sweep(res["sweep"])
    tr = {k: res[k] for k in res if k.startswith("small-") or k == "full"}
    if tr:
        print_train(tr)
    if "figures" in res:
        print(f"\nfigures: {res['figures']}")


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
