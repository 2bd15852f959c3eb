"""Benchmark of ``icml26 icr`` on this CPU: the paper's two claims (arXiv 2606.09718) on Fashion-MNIST.

Parts (each resumable; results cached in --json, default benchmarks/results/icr.json; run folders
under --runs, default runs/icr-bench/; a rerun prints from the cache and computes what is missing):
  cost        one training step (batch 32) vs one ICR evaluation (512 images x 4 views and
              1024 x 2, features + ICR) vs one memorization check (64 Heun samples, 12 steps); CPU seconds
              (process_time), tiny preset, 16x16;
  small-<N>   ``icml26 icr train --train-size N`` with the monitor (--resume on rerun), N in --sizes;
  full        ``icml26 icr train --train-size 0`` (all 60k images), a short run (--full-steps);
  sweep       ``icml26 icr analyze`` on the full-data model: ICR and probe accuracy on the paper's sigma grid;
  small-<N>-s<K>, mnist-<N>[-s<K>]   the same with --seed K (seed 0 keeps the name small-<N>); MNIST: --mnist-steps;
  full-<S>    the full-data run with S steps, 12 monitor points of --full-samples samples;
  sweep-<S>   the noise sweep on that model;
  fd-noise    the Frechet distance of real images and of the full-data models' samples (noise floor, spread);
  figures     the PNGs of the run folders, copied to --fig-dir (default docs/); icr_seeds.png shows every seed.
Targets (the paper's claims, reported as shown / refuted / not measured):
  A. ICR's minimum and the probe accuracy's peak at an intermediate noise level, within one grid step;
  B. at every small training size ICR's minimum (smoothed, train.icr_min_step) comes before the
     memorization onset (memorization_fraction > 0.05); with the full data ICR keeps falling as the
     Frechet distance falls. Over seeds: per (data, size), "shown on k of n seeds" and the mean of
     onset - ICR min over the seeds with an onset, with its 95% t-interval.

    OMP_NUM_THREADS=1 nice -n 5 timeout 3000 .venv/bin/python benchmarks/icr.py --part small-32 \\
        --json benchmarks/results/icr_small32.json
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
    for r in recs:  # the saved results hold checkout-relative paths only
        for k in ("unet_dir", "model", "model_dir", "run", "plot"):
            if isinstance(r.get(k), str):
                r[k] = _rel(r[k])
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
    out = {
        "train_step_s": float(np.median(ts)),
        "parameters": sum(p.numel() for p in net.parameters()),
        "batch": 32,
        "threads": torch.get_num_threads(),
        "load": _uptime(),
    }
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
    print(
        f"\n## Cost (tiny U-Net, {c['parameters']} parameters, 16x16, {c['threads']} thread; CPU seconds of the "
        f"process; {c['load']})"
    )
    print("| what | CPU seconds | x one training step |")
    print("|---|---|---|")
    st = c["train_step_s"]
    print(f"| one training step (batch {c['batch']}, forward + backward + AdamW) | {st:.3f} | 1.0 |")
    for k in ("512x4", "1024x2"):
        f, e = c[f"icr_{k}_features_s"], c[f"icr_{k}_estimator_s"]
        print(f"| one ICR evaluation, {k.replace('x', ' images x ')} views: features | {f:.3f} | {f / st:.1f} |")
        print(
            f"| one ICR evaluation, {k.replace('x', ' images x ')} views: estimator (Cholesky) | {e:.4f} | "
            f"{e / st:.3f} |"
        )
    print(
        f"| memorization check: 64 samples, Heun 12 steps (23 evaluations) | {c['sample_64_s']:.3f} | "
        f"{c['sample_64_s'] / st:.1f} |"
    )


# ----------------------------------------------------------------------------- training runs
def parse_part(name: str) -> dict:
    """What a part name means: ``cost``, ``figures``, ``fd-noise``, ``small-<N>[-s<K>]`` (Fashion-MNIST, N images,
    seed K, default 0), ``mnist-<N>[-s<K>]``, ``full`` (--full-steps), ``full-<S>`` (S steps), ``sweep`` / ``sweep-<S>``
    (the noise sweep on that full-data model). Raises ValueError with the reason for any other name."""
    if name in ("cost", "figures", "full", "sweep", "fd-noise"):
        return {"kind": name, "name": name}
    head, _, rest = name.partition("-")
    if head in ("full", "sweep"):
        if not rest.isdigit() or int(rest) < 1:
            raise ValueError(f"part {name!r}: expected {head}-<steps> with steps >= 1")
        return {"kind": head, "name": name, "steps": int(rest)}
    if head in ("small", "mnist"):
        size, _, seed = rest.partition("-s")
        if not size.isdigit() or int(size) < 2:
            raise ValueError(f"part {name!r}: expected {head}-<N>[-s<seed>] with N >= 2 training images")
        if seed == "" and rest.endswith("-s") or seed and not seed.isdigit():
            raise ValueError(f"part {name!r}: the seed after '-s' must be an integer >= 0")
        k = int(seed or 0)
        # seed 0 keeps the name (and run folder) it had before seeds were added
        return {
            "kind": "train",
            "name": f"{head}-{int(size)}" + (f"-s{k}" if k else ""),
            "family": head,
            "size": int(size),
            "seed": k,
        }
    raise ValueError(
        f"unknown part {name!r} (cost | small-<N>[-s<K>] | mnist-<N>[-s<K>] | full[-<S>] | sweep[-<S>] | fd-noise | "
        "figures)"
    )


def part_train(
    args,
    size: int,
    steps: int,
    monitor_every: int,
    run_dir: Path,
    *,
    seed: int = 0,
    data: str | None = None,
    samples: int | None = None,
) -> dict:
    if not _finished(run_dir) and not args.collect:
        resume = ["--resume"] if (run_dir / "records.jsonl").is_file() else []
        _icml26(
            [
                "icr",
                "train",
                "--data",
                data or args.data,
                "--train-size",
                str(size),
                "--steps",
                str(steps),
                "--seed",
                str(seed),
                "--set",
                f"monitor_every={monitor_every}",
                "--set",
                f"memorization_samples={samples or args.samples}",
                "--set",
                f"sampler_steps={args.sampler_steps}",
                "-q",
                "--out",
                str(run_dir),
                *resume,
            ]
        )
    recs = _records(run_dir)
    return {
        "records": [r for r in recs if r.get("kind") in ("config", "step", "result", "summary", "feature_network")],
        "load": _uptime(),
        "run_dir": _rel(run_dir),
        "seed": seed,
    }


def part_sweep(args, run_dir: Path, model_dir: Path) -> dict:
    if not _finished(run_dir) and not args.collect:
        if run_dir.exists():
            shutil.rmtree(run_dir)
        _icml26(
            [
                "icr",
                "analyze",
                "--model",
                str(model_dir),
                "--data",
                args.data,
                "--set",
                f"icr_images={args.sweep_images}",
                "-q",
                "--out",
                str(run_dir),
            ]
        )
    return {"records": _records(run_dir), "load": _uptime(), "run_dir": _rel(run_dir)}


def _verdict(ok: bool | None) -> str:
    return "not measured" if ok is None else ("shown" if ok else "refuted")


def print_sweep(s: dict, name: str = "sweep") -> None:
    rows = [r for r in s["records"] if r.get("kind") == "result"]
    if not rows:
        print(f"\n## A. Noise sweep ({name}): not run yet")
        return
    model = s.get("model", "full")
    steps = next((r.get("step") for r in (s.get("records") or []) if r.get("kind") == "model"), None)
    summ = s["records"][-1]
    if summ.get("kind") != "summary":  # unfinished: the same rule on the levels done so far
        from icml26.methods.diffusion.analyze import grid_argext

        i, j = grid_argext([r["icr"] for r in rows], False), grid_argext([r["probe_accuracy"] for r in rows], True)
        n = len(rows)
        summ = {
            "icr_min_level": rows[i]["noise_level"],
            "icr_min": rows[i]["icr"],
            "probe_peak_level": rows[j]["noise_level"],
            "probe_peak_accuracy": rows[j]["probe_accuracy"],
            "grid_steps_apart": abs(i - j),
            "icr_min_intermediate": f"{0 < i < n - 1} (partial: {n} levels)",
            "probe_peak_intermediate": 0 < j < n - 1,
            "claim_window": None,
        }
    print(
        f"\n## A. Noise sweep `{name}` on the full-data model `{model}`{f' ({steps} steps)' if steps else ''} "
        f"({rows[0]['n_images']} training images x {rows[0]['views']} views, "
        f"{rows[0]['feature_layer']}, d = {rows[0]['feature_dim']}; probe: logistic regression on those images, "
        f"accuracy on 1000 test images; {s['load']})"
    )
    print("| sigma | alpha_bar | ICR | probe accuracy | Tr Sigma_s | Tr Sigma_xi | tau |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['noise_level']:g} | {r['alpha_bar']:.3f} | {r['icr']:.4f} | {r['probe_accuracy']:.3f} | "
            f"{r['trace_sigma_s']:.4g} "
            f"| {r['trace_sigma_xi']:.4g} | {r['shrinkage']:.2e} |"
        )
    ok = summ.get("claim_window")
    print(
        f"ICR minimum at sigma = {summ['icr_min_level']} (ICR {summ['icr_min']:.4f}); probe peak at sigma = "
        f"{summ['probe_peak_level']} "
        f"(accuracy {summ['probe_peak_accuracy']:.3f}); {summ['grid_steps_apart']} grid step(s) apart; intermediate: "
        "ICR "
        f"{summ['icr_min_intermediate']}, probe {summ['probe_peak_intermediate']}"
    )
    print(f"Target A (minimum and peak at an intermediate level, within one grid step): {_verdict(ok)}")


def _train_result(p: dict) -> tuple[dict | None, bool]:
    """(result, partial) of a training part: its ``result`` record, or the same rules applied to the
    monitor points of an unfinished run (partial = True); (None, False) before the first point."""
    from icml26.methods.diffusion import train as T

    res = [r for r in p["records"] if r.get("kind") == "result"]
    if res:
        return res[0], False
    st = [r for r in p["records"] if r.get("kind") == "step"]
    if not st:
        return None, False
    s_, i_, m_ = [r["step"] for r in st], [r["icr"] for r in st], [r["memorization_fraction"] for r in st]
    smin, on = T.icr_min_step(s_, i_, 3), T.onset_step(s_, m_, 0.05)
    return {
        "train_size": st[0]["train_size"],
        "steps": s_[-1],
        "icr_min_step": smin,
        "icr_min": dict(zip(s_, i_))[smin],
        "memorization_onset_step": on,
        "onset_minus_icr_min_steps": (on - smin) if on is not None else None,
        "final_memorization_fraction": m_[-1],
        "final_icr": i_[-1],
        "icr_min_before_onset": (smin < on) if on is not None else None,
    }, True


def _seed(name: str, p: dict) -> int:
    cfg = next((r for r in p.get("records", []) if r.get("kind") == "config"), None)
    return int(cfg["seed"]) if cfg is not None else int(p.get("seed", parse_part(name).get("seed", 0)))


def _data_label(name: str) -> str:
    return "MNIST" if name.startswith("mnist") else "Fashion-MNIST"


def print_train(parts: dict) -> None:
    print(
        "\n## B. Monitored training (tiny U-Net, 16x16, batch 32; ICR at sigma* = 0.29 on the training images; "
        "memorized = NN-distance ratio < 1/3, the stand-in for SSCD > 0.6; onset = first fraction > 0.05)"
    )
    print(
        "| part | data | training images | seed | steps | ICR min step (smoothed, window 3) | ICR min | onset step | "
        "onset - ICR min "
        "| final memorized | final ICR | ICR min before onset |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    f = lambda v, fmt="{}": "-" if v is None else fmt.format(v)  # noqa: E731
    for name, p in parts.items():
        r, partial = _train_result(p)
        if r is None:
            print(f"| {name} | {_data_label(name)} | | | (not started) | | | | | | | |")
            continue
        small = not name.startswith("full")
        print(
            f"| {name} | {_data_label(name)} | {r['train_size']} | {_seed(name, p)} | "
            f"{r['steps']}{' (partial)' if partial else ''} "
            f"| {f(r['icr_min_step'])} | {f(r['icr_min'], '{:.4f}')} | {f(r['memorization_onset_step'])} "
            f"| {f(r['onset_minus_icr_min_steps'])} | {f(r['final_memorization_fraction'], '{:.3f}')} | "
            f"{f(r['final_icr'], '{:.4f}')} "
            f"| {_verdict(r['icr_min_before_onset']) if small else '-'} |"
        )
    for name, p in parts.items():
        st = [r for r in p["records"] if r.get("kind") == "step"]
        if st:
            print(
                f"\n{name} monitor points (step: ICR / memorized / FD):  "
                + ";  ".join(
                    f"{r['step']}: {r['icr']:.3f} / {r['memorization_fraction']:.2f} / {r['frechet_distance']:.1f}"
                    if r.get("frechet_distance") is not None
                    else f"{r['step']}: {r['icr']:.3f} / {r['memorization_fraction']:.2f}"
                    for r in st
                )
            )


def seed_verdicts(parts: dict) -> list[dict]:
    """Claim B over seeds, per (data, training size): one row each with the seeds, the per-seed verdicts
    (True / False / None = no onset within the run), ``shown`` of ``measured``, and the mean of
    onset - ICR-min steps over the measured seeds with its standard deviation and 95% t-interval
    (None with fewer than 2 measured seeds). Unfinished runs are left out."""
    import numpy as np
    from scipy import stats

    groups: dict[tuple, list] = {}
    for name, p in parts.items():
        if name.startswith("full"):
            continue
        r, partial = _train_result(p)
        if r is None or partial:
            continue
        groups.setdefault((_data_label(name), r["train_size"], r["steps"]), []).append((_seed(name, p), r))
    out = []
    for (data, n, steps), rows in sorted(groups.items()):
        rows.sort(key=lambda t: t[0])
        d = [r["onset_minus_icr_min_steps"] for _, r in rows if r["onset_minus_icr_min_steps"] is not None]
        v = [r["icr_min_before_onset"] for _, r in rows]
        row = {
            "data": data,
            "train_size": n,
            "steps": steps,
            "seeds": [k for k, _ in rows],
            "verdicts": v,
            "differences": [r["onset_minus_icr_min_steps"] for _, r in rows],
            "shown": sum(x is True for x in v),
            "measured": sum(x is not None for x in v),
            "mean_onset_minus_icr_min": float(np.mean(d)) if d else None,
            "sd": None,
            "ci95": None,
        }
        if len(d) >= 2:
            sd = float(np.std(d, ddof=1))
            h = float(stats.t.ppf(0.975, len(d) - 1)) * sd / np.sqrt(len(d))
            row.update(sd=sd, ci95=[row["mean_onset_minus_icr_min"] - h, row["mean_onset_minus_icr_min"] + h])
        out.append(row)
    return out


def print_seeds(parts: dict) -> None:
    rows = seed_verdicts(parts)
    if not rows:
        return
    print(
        "\n## B over seeds (finished runs; the same rules: smoothing window 3, onset = memorized fraction > 0.05; "
        "monitor grid 100 steps; each seed draws its own training subset, initialisation, batches and sampler noise)"
    )
    print(
        "| data | training images | steps | seeds | onset - ICR min per seed | ICR min before onset | mean onset - ICR "
        "min (sd) | 95% t-interval |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        per = ", ".join("-" if x is None else f"{x:+d}" for x in r["differences"])
        m = (
            "-"
            if r["mean_onset_minus_icr_min"] is None
            else f"{r['mean_onset_minus_icr_min']:+.0f}" + ("" if r["sd"] is None else f" ({r['sd']:.0f})")
        )
        ci = "-" if r["ci95"] is None else f"[{r['ci95'][0]:+.0f}, {r['ci95'][1]:+.0f}]"
        print(
            f"| {r['data']} | {r['train_size']} | {r['steps']} | {','.join(map(str, r['seeds']))} | {per} "
            f"| shown on {r['shown']} of {len(r['seeds'])} seeds"
            + (f" ({len(r['seeds']) - r['measured']} without onset)" if r["measured"] < len(r["seeds"]) else "")
            + f" | {m} | {ci} |"
        )
    every = [r["shown"] == len(r["seeds"]) for r in rows]
    print(
        f"Target B (ICR minimum before onset at every small size, on every seed): {_verdict(all(every))}; "
        f"per run: shown on {sum(r['shown'] for r in rows)} of {sum(len(r['seeds']) for r in rows)} runs"
    )


def print_full(parts: dict, fdn: dict | None) -> None:
    """The full-data check: does the ICR keep falling as the Frechet distance falls? Same rule as before
    (ICR lower at the end than at the first point, and Pearson(ICR, FD) > 0), beside the FD noise floor."""
    import numpy as np
    from scipy import stats

    for name in sorted(k for k in parts if k.startswith("full")):
        st = [r for r in parts[name]["records"] if r.get("kind") == "step"]
        if len(st) < 2:
            continue
        cfg = next((r for r in parts[name]["records"] if r.get("kind") == "config"), {})
        icr = np.array([r["icr"] for r in st])
        fd = np.array([r["frechet_distance"] if r.get("frechet_distance") is not None else np.nan for r in st])
        falls = bool(icr[-1] < icr[0])
        ok = np.isfinite(fd).all()
        rho = float(np.corrcoef(icr, fd)[0, 1]) if ok else float("nan")
        sp = float(stats.spearmanr(icr, fd).statistic) if ok else float("nan")
        print(
            f"\nFull data `{name}` ({st[-1]['step']} steps, {cfg.get('memorization_samples', '?')} samples per point): "
            f"ICR {icr[0]:.4f} -> {icr[-1]:.4f} (min {icr.min():.4f} at step {st[int(icr.argmin())]['step']}), "
            f"FD {fd[0]:.1f} -> {fd[-1]:.1f} (min {np.nanmin(fd):.1f}); Pearson(ICR, FD) = {rho:.2f}, Spearman = "
            f"{sp:.2f}; "
            f"ICR keeps falling as FD improves: {_verdict(falls and rho > 0)}"
        )
        half = len(st) // 2
        print(
            f"  second half (steps {st[half]['step']}-{st[-1]['step']}): ICR {icr[half]:.4f} -> {icr[-1]:.4f}, "
            f"FD mean {np.nanmean(fd[half:]):.1f} sd {np.nanstd(fd[half:], ddof=1):.1f}; first half FD mean "
            f"{np.nanmean(fd[:half]):.1f}"
        )
    if fdn:
        print(
            f"\n## Frechet-distance noise floor ({fdn['repeats']} draws of M held-out real training images against the "
            f"{fdn['reference']} reference test images, in the classifier of `{fdn['feature_net']}`)"
        )
        print("| M | mean FD | sd | min | max |")
        print("|---|---|---|---|---|")
        for m, v in fdn["by_m"].items():
            print(f"| {m} | {v['mean']:.2f} | {v['sd']:.2f} | {v['min']:.2f} | {v['max']:.2f} |")
        if fdn.get("models"):
            print("\nSamples of the full-data models (512 Heun samples, fresh noise, cut into disjoint sets of M):")
            print("| model | step | M | sets | mean FD | sd | min | max |")
            print("|---|---|---|---|---|---|---|---|")
            for name, row in fdn["models"].items():
                for m in ("64", "256"):
                    v = row[m]
                    print(
                        f"| {name} | {row['step']} | {m} | {len(v['values'])} | {v['mean']:.2f} | {v['sd']:.2f} | "
                        f"{v['min']:.2f} | {v['max']:.2f} |"
                    )
                print(f"| {name} | {row['step']} | 512 | 1 | {row['512']:.2f} | | | |")
                if "monitor_noise" in row:
                    mn = row["monitor_noise"]
                    print(
                        f"| {name}, the monitor's noise draw | {row['step']} | {mn['samples']} | 1 | {mn['fd']:.2f} | "
                        "| | |"
                    )


def part_fd_noise(args) -> dict:
    """The Frechet distance of a perfect generator: M real training images (not in the reference set) against
    the 2000 test images the monitor uses, in the same classifier, over ``repeats`` disjoint draws, for M = 64
    and 256: its mean is the small-sample bias, its spread the noise of one monitor point."""
    import numpy as np
    import torch

    from icml26.core.data.images import load_images
    from icml26.methods.diffusion import features as Fe
    from icml26.methods.lfm import ckpt
    from icml26.methods.lfm.metrics import frechet_distance
    from icml26.methods.lfm.nets import FeatureNet

    run = Path(args.runs) / "full-3000"
    if not (run / "features.safetensors").is_file():
        run = Path(args.runs) / "full"
    tr, te = load_images(args.data, "train"), load_images(args.data, "test")
    net = FeatureNet(tr.images.shape[1], int(tr.labels.max()) + 1, 16)
    t, _ = ckpt.load(run / "features.safetensors", "feature network")
    net.load_state_dict(ckpt.sub(t, "model"))
    net.eval()
    with torch.no_grad():
        ref = net.features((Fe.prepare_images(te.images[:2000], 16, 1) + 1) / 2).double().numpy()
        perm = np.random.default_rng(0).permutation(len(tr.images))[: 20 * 256]
        real = net.features((Fe.prepare_images(tr.images[np.sort(perm)], 16, 1) + 1) / 2).double().numpy()
    real = real[np.random.default_rng(1).permutation(len(real))]
    out = {
        "by_m": {},
        "repeats": 20,
        "reference": 2000,
        "feature_net": _rel(run / "features.safetensors"),
        "load": _uptime(),
    }
    for m in (64, 256):
        v = np.array([frechet_distance(ref, real[k * m : (k + 1) * m]) for k in range(20)])
        out["by_m"][str(m)] = {
            "mean": float(v.mean()),
            "sd": float(v.std(ddof=1)),
            "min": float(v.min()),
            "max": float(v.max()),
            "values": v.tolist(),
        }
    # the same for the samples of each finished full-data model: 512 samples (12 Heun steps, fresh noise) cut
    # into 8 sets of 64 and 2 sets of 256, so the spread is that of one monitor point at a fixed model
    from icml26.methods.diffusion import unet as U

    out["models"] = {}
    for name in ("full", "full-3000"):
        res = [r for r in _records(Path(args.runs) / name) if r.get("kind") == "result"]
        if not res:
            continue
        d, _, _, meta = U.check_model_dir(ROOT / res[0]["unet_dir"])
        ema = U.load_unet(d)
        torch.manual_seed(0)
        with torch.no_grad():
            x = U.edm_sample(
                ema,
                torch.randn(512, 1, 16, 16, generator=torch.Generator().manual_seed(12345)),
                steps=args.sampler_steps,
                sigma_data=float(meta.get("sigma_data", 0.5)),
            )
            fg = net.features((x.clamp(-1, 1) + 1) / 2).double().numpy()
        row = {"step": meta.get("step")}
        for m in (64, 256):
            v = np.array([frechet_distance(ref, fg[k * m : (k + 1) * m]) for k in range(512 // m)])
            row[str(m)] = {
                "mean": float(v.mean()),
                "sd": float(v.std(ddof=1)),
                "min": float(v.min()),
                "max": float(v.max()),
                "values": v.tolist(),
            }
        row["512"] = float(frechet_distance(ref, fg))
        # and the monitor's own fixed noise draw (train._gen(seed, N, 0, 3)): reproduces the last monitor point
        from icml26.methods.diffusion import train as T

        cfg = next(r for r in _records(Path(args.runs) / name) if r.get("kind") == "config")
        with torch.no_grad():
            noise = torch.randn(
                (cfg["memorization_samples"], 1, 16, 16), generator=T._gen(cfg["seed"], res[0]["train_size"], 0, 3)
            )
            xm = U.edm_sample(ema, noise, steps=cfg["sampler_steps"], sigma_data=float(meta.get("sigma_data", 0.5)))
            row["monitor_noise"] = {
                "samples": cfg["memorization_samples"],
                "fd": float(frechet_distance(ref, net.features((xm + 1) / 2).double().numpy())),
            }
        out["models"][name] = row
    return out


def part_figures(args, runs_root: Path, res: dict) -> dict:
    """icr_sweep.png (the longest finished full-data sweep), icr_training.png / icr_quality.png (seed 0 of each
    small size and the longest full-data run, as before), icr_seeds.png (every seed of every small size)."""
    from icml26.methods.diffusion import report as R

    fig = Path(args.fig_dir)
    fig.mkdir(parents=True, exist_ok=True)
    out = {}
    sweeps = sorted(
        (k for k in res if k.startswith("sweep") and _finished(runs_root / k)),
        key=lambda k: parse_part(k).get("steps", 0),
    )
    if sweeps:
        out["sweep"] = _rel(shutil.copy(next(R.run(runs_root / sweeps[-1]))["plot"], fig / "icr_sweep.png"))
    fulls = sorted(
        (k for k in res if k.startswith("full") and _finished(runs_root / k)),
        key=lambda k: parse_part(k).get("steps", 0),
    )
    train_recs = []
    for k in [k for k in res if k.startswith("small") and "-s" not in k[len("small-") :]] + fulls[-1:]:
        train_recs += [r for r in _records(runs_root / k) if r.get("kind") in ("step", "result")]
    if train_recs:
        files = R.plot_training(train_recs, fig / "icr_training.png", fig / "icr_quality.png")
        out["training"] = [_rel(f) for f in files]
    groups: dict[str, dict[int, list[dict]]] = {}
    for k in sorted(res):
        if k.startswith(("small-", "mnist-")) and _finished(runs_root / k):
            sp = parse_part(k)
            groups.setdefault(f"{_data_label(k)}, N = {sp['size']}", {})[sp["seed"]] = _records(runs_root / k)
    if groups:
        out["seeds"] = _rel(R.plot_seeds(groups, fig / "icr_seeds.png"))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--part",
        action="append",
        help="cost | small-<N>[-s<K>] | mnist-<N>[-s<K>] | full[-<S>] | sweep[-<S>] | fd-noise | figures (repeatable; "
        "default: all)",
    )
    ap.add_argument("--print-only", action="store_true")
    ap.add_argument("--redo", action="append", default=[])
    ap.add_argument(
        "--collect",
        action="store_true",
        help="read the run folders as they are (unfinished runs are printed as partial); run nothing",
    )
    ap.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "icr.json"))
    ap.add_argument("--runs", default=str(ROOT / "runs" / "icr-bench"))
    ap.add_argument("--fig-dir", default=str(ROOT / "docs"))
    ap.add_argument("--data", default="fashion-mnist")
    ap.add_argument("--sizes", default="32,64")
    ap.add_argument("--seeds", default="0", help="seeds of the default small-<N> parts (comma-separated)")
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--mnist-steps", type=int, default=900)
    ap.add_argument("--monitor-every", type=int, default=100)
    ap.add_argument("--samples", type=int, default=64)
    ap.add_argument("--sampler-steps", type=int, default=12)
    ap.add_argument(
        "--full-steps", type=int, default=600, help="steps of the part 'full' (full-<S> parts give their own)"
    )
    ap.add_argument(
        "--full-samples",
        type=int,
        default=256,
        help="samples per monitor point of the full-<S> parts (memorization and Frechet distance)",
    )
    ap.add_argument("--sweep-images", type=int, default=512)
    args = ap.parse_args()
    try:
        sizes = [int(s) for s in args.sizes.split(",")]
        seeds = [int(s) for s in args.seeds.split(",")]
        if any(k < 0 for k in seeds):
            raise ValueError("--seeds: seeds must be integers >= 0")
        names = args.part or [
            "cost",
            *[f"small-{n}" + (f"-s{k}" if k else "") for k in seeds for n in sizes],
            "full",
            "sweep",
            "figures",
        ]
        specs = [parse_part(p) for p in names]
    except ValueError as e:  # every part is checked before anything runs
        print(f"benchmarks/icr.py: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    jpath = Path(args.json)
    res = _load(jpath)
    runs_root = Path(args.runs)
    if not args.print_only:
        for sp in specs:
            p = sp["name"]
            if (
                p in res
                and p not in args.redo
                and p != "figures"
                and not (args.collect and p not in ("cost", "fd-noise"))
            ):
                continue
            t0 = time.time()
            if p == "cost":
                res[p] = part_cost(args)
            elif p == "fd-noise":
                res[p] = part_fd_noise(args)
            elif sp["kind"] == "train":
                fam = sp["family"]
                res[p] = part_train(
                    args,
                    sp["size"],
                    args.steps if fam == "small" else args.mnist_steps,
                    args.monitor_every,
                    runs_root / p,
                    seed=sp["seed"],
                    data=args.data if fam == "small" else "mnist",
                )
            elif sp["kind"] == "full":
                if "steps" in sp:  # full-<S>: 12 monitor points, more samples per point
                    res[p] = part_train(
                        args, 0, sp["steps"], max(sp["steps"] // 12, 1), runs_root / p, samples=args.full_samples
                    )
                else:
                    res[p] = part_train(args, 0, args.full_steps, max(args.full_steps // 4, 1), runs_root / "full")
            elif sp["kind"] == "sweep":
                full = "full" + (f"-{sp['steps']}" if "steps" in sp else "")
                fr = [r for r in _records(runs_root / full) if r.get("kind") == "result"]
                if not fr:
                    print(f"{p}: the full-data run has not finished; run --part {full} first", file=sys.stderr)
                    continue
                res[p] = part_sweep(args, runs_root / p, ROOT / fr[0]["unet_dir"])
                res[p]["model"] = full
            elif p == "figures":
                res[p] = part_figures(args, runs_root, res)
            res[p]["wall_s"] = time.time() - t0
            _save(jpath, res)
    if "cost" in res:
        print_cost(res["cost"])
    for k in sorted(k for k in res if k.startswith("sweep")):
        print_sweep(res[k], k)
    tr = {k: res[k] for k in res if k.startswith(("small-", "mnist-", "full"))}
    if tr:
        print_train(tr)
        print_seeds(tr)
    print_full(tr, res.get("fd-noise"))
    if "figures" in res:
        print(f"\nfigures: {res['figures']}")


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
