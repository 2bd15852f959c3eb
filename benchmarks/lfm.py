"""Benchmark for train-lfm / sample-lfm (LFM stability, ICML 2026, arXiv 2605.08398).

Prints, in one run, on real Fashion-MNIST (FID etc. in the feature space of a classifier trained
here, NOT Inception; every FID with a paired-bootstrap 95% interval, ratios with their own):
  1. data reduction at equal compute: a flow model trained on all the data vs on 50% and 25% kept
     by each scorer, with the same number of steps; each reduced model's same-seed similarity;
  2. coarse-to-fine vs large-only: a large and a small model trained with the same seed (same data
     order); the small one, 7x cheaper per step, for more steps (--coarse-train-steps);
     a validation sweep over t_split (other noise, other half of the test split) picks t_split;
     the reported sweep gives, per split, wall-clock per sample (modes timed side by side, taking
     turns), speed-up, NFE split, FID, precision/recall, same-seed similarity; a PNG grid;
  3. the same at the paper's t_split 0.7 with the coarse model trained the paper's way
     (t < t_split only, plus the seam loss against the fine model).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/lfm.py --out runs/bench-lfm --grid-copy docs/lfm_same_seed_c2f.png

Runs reuse trained models and cached evaluations in --out (delete it to start over). From nothing
the defaults take roughly 2-2.5 hours on a loaded shared 2-core CPU (mostly the 3000-step large
model and the 30000-step small one); --quick is a smoke run of every section in a few minutes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def train(out: Path, **kw) -> dict:
    """One training run, reused when ``out`` already holds its checkpoint and info; an interrupted run resumes."""
    from icml26.methods.lfm import train as T

    ck = out / ("latents.safetensors" if kw.get("stage") == "vae" else "checkpoint.safetensors")
    info_f = out / "bench_info.json"
    if ck.is_file() and info_f.is_file():
        return json.loads(info_f.read_text())
    t0 = time.perf_counter()
    info: dict = {}
    for r in T.run(T.Config(**kw), seed=0, out=out, resume=True):
        if r["kind"] in ("vae", "feature_network", "reduction", "model"):
            info[r["kind"]] = {k: v for k, v in r.items() if k not in ("kind", "arch", "kept_per_class")}
        if r["kind"] == "step":
            info["final_loss"] = r["loss"]
    info["seconds"] = time.perf_counter() - t0
    info_f.write_text(json.dumps(info))
    return info


def sample(**kw) -> list[dict]:
    from icml26.methods.lfm import sample as S

    cfg_keys = {f for f in S.SampleConfig.__dataclass_fields__}
    cfg = S.SampleConfig(**{k: v for k, v in kw.items() if k in cfg_keys})
    return list(S.run(cfg, **{k: v for k, v in kw.items() if k not in cfg_keys}))


def ci(r: dict, k: str, nd: int = 3) -> str:
    return f"{r[k]:.{nd}f} [{r[k + '_low']:.{nd}f}, {r[k + '_high']:.{nd}f}]"


def fmt(v, nd=3):
    return "-" if v is None else (f"{v:.{nd}f}" if isinstance(v, float) else str(v))


def cached(path: Path, key: dict, fn):
    """fn() once per key: results kept in ``path`` (JSON) so an interrupted benchmark resumes."""
    if path.is_file():
        d = json.loads(path.read_text())
        if d.get("key") == json.loads(json.dumps(key)):
            return d["result"]
    res = fn()
    path.write_text(json.dumps({"key": key, "result": res}))
    return res


def c2f_key(a) -> dict:
    return {
        k: getattr(a, k)
        for k in (
            "dataset",
            "train_size",
            "c2f_train_steps",
            "coarse_train_steps",
            "seam_train_steps",
            "fine_model",
            "coarse_model",
            "c2f_steps",
            "t_splits",
            "samples_c2f",
            "val_samples",
            "val_bootstrap",
            "bootstrap",
        )
    }


def timing_key(a) -> dict:
    return {
        k: getattr(a, k)
        for k in (
            "dataset",
            "train_size",
            "c2f_train_steps",
            "coarse_train_steps",
            "seam_train_steps",
            "fine_model",
            "coarse_model",
            "c2f_steps",
            "t_splits",
            "seam_t_split",
            "timing_samples",
            "timing_repeats",
        )
    }


def target_line(res: list[dict], t: float, what: str) -> None:
    by = {r["mode"]: r for r in res}
    c, l = by[f"c2f@{t}"], by["large"]
    fid_ok = c["fid_ratio"] <= 1.10
    print(
        "target (coarse-to-fine >= 2x faster than large-only at comparable FID: here FID within 10%, and same-seed "
        "similarity), "
        f"{what}, t_split {t}: {c['cpu_speedup']:.2f}x in CPU time ({c['speedup']:.2f}x wall-clock), FID "
        f"{c['fid']:.2f} [{c['fid_low']:.2f}, {c['fid_high']:.2f}] vs "
        f"{l['fid']:.2f} [{l['fid_low']:.2f}, {l['fid_high']:.2f}] (ratio {c['fid_ratio']:.3f} "
        f"[{c['fid_ratio_low']:.3f}, {c['fid_ratio_high']:.3f}]), "
        f"same-seed sim {c['same_seed_similarity']:.3f} (unmatched {c['unmatched_similarity']:.3f}) -> "
        f"{'MET' if c['cpu_speedup'] >= 2.0 and fid_ok else 'NOT MET'}"
        f" (ratio's 95% upper bound {'<=' if c['fid_ratio_high'] <= 1.10 else '>'} 1.10)",
        flush=True,
    )


def grid(out: Path, fine_ck: str, coarse_ck: str, splits, a) -> None:
    """PNG: rows large, coarse-to-fine at each t_split (ascending), small; the same 12 noise seeds (columns)."""
    import shutil

    import torch

    from icml26.core.data.images import save_png_grid

    fine, fm, coarse, cm, arts = _load_pair(fine_ck, coarse_ck)
    x0, y = _noise(arts, 12, 0, fine.arch.num_classes)
    z, _ = trajectories(fine, coarse, x0, y, a.c2f_steps, splits)
    scale = float(arts["latents_meta"]["latent_scale"])
    with torch.no_grad():
        rows = torch.cat([arts["vae"].decode(z[k] / scale) for k in ("large", *sorted(splits), "small")])
    fn = save_png_grid(rows, out / "c2f_same_seed.png", nrow=12)
    if a.grid_copy:
        shutil.copyfile(fn, a.grid_copy)
    print(
        f"grid (rows: large, coarse-to-fine at t_split {', '.join(map(str, sorted(splits)))}, small; same noise per "
        f"column): {fn}"
    )


# ----------------------------------------------------------------------------- coarse-to-fine sweep
def _load_pair(fine_ck: str, coarse_ck: str):
    from icml26.methods.lfm.train import load_flow, load_vae_dir

    fine, fm = load_flow(fine_ck)
    coarse, cm = load_flow(coarse_ck)
    arts = load_vae_dir(fm["vae_dir"])
    return fine, fm, coarse, cm, arts


def _reference(arts, offset: int, size: int):
    import torch

    from icml26.core.data.images import load_images
    from icml26.methods.lfm.sample import _features

    ref = load_images(arts["latents_meta"]["dataset_arg"], "test")
    xr = torch.from_numpy(ref.images[offset : offset + size]).float().div_(255.0)
    with torch.no_grad():
        return _features(arts["features"], arts["vae"], xr)


def _noise(arts, n: int, seed: int, K: int):
    import torch

    g = torch.Generator().manual_seed(seed)
    x0 = torch.randn((n, *arts["latents_meta"]["latent_shape"]), generator=g)
    return x0, (torch.arange(n) % K if K > 0 else None)


def trajectories(fine, coarse, x0, y, steps: int, splits, batch: int = 500):
    """Final latents of large-only, small-only and coarse-to-fine at every t_split, for the same noise.

    Euler on the grid t_i = i / steps (exactly flow.euler's grid): the small model's trajectory is run
    once and its state at the first grid time >= t_split is handed to the large model, which is what
    flow.CoarseToFine does step by step (checked against it in main()). Returns {mode: (N, C, h, w)}."""
    import torch

    from icml26.methods.lfm.train import model_velocity

    ts = [i / steps for i in range(steps + 1)]
    ks = {s: next(i for i, t in enumerate(ts) if t >= s - 1e-9) for s in splits}
    out = {"large": [], "small": [], **{s: [] for s in splits}}
    with torch.no_grad():
        for b in range(0, len(x0), batch):
            xb = x0[b : b + batch]
            yb = None if y is None else y[b : b + batch]
            vf, vc = model_velocity(fine, yb), model_velocity(coarse, yb)

            def run(v, x, i0):
                for a, c in zip(ts[i0:-1], ts[i0 + 1 :]):
                    x = x + (c - a) * v(x, torch.full((x.shape[0],), a))
                return x

            out["large"].append(run(vf, xb, 0))
            x, states = xb, {0: xb}
            for i, (a, c) in enumerate(zip(ts[:-1], ts[1:])):
                x = x + (c - a) * vc(x, torch.full((x.shape[0],), a))
                states[i + 1] = x
            out["small"].append(x)
            for s, k in ks.items():
                out[s].append(run(vf, states[k], k))
    return {k: torch.cat(v) for k, v in out.items()}, ks


def evaluate(z: dict, arts, fr, y, n_boot: int, seed: int) -> list[dict]:
    """Quality and same-seed similarity of each mode's latents vs the reference features fr."""
    import torch

    from icml26.methods.lfm import metrics
    from icml26.methods.lfm.sample import _features, _pixel_corr, add_fid_intervals

    scale = float(arts["latents_meta"]["latent_scale"])
    vae, feat = arts["vae"], arts["features"]
    res, feats, base = [], [], None
    K = 0 if y is None else int(y.max()) + 1
    for mode, zz in z.items():
        with torch.no_grad():
            x = torch.cat([vae.decode(zz[s : s + 1000] / scale) for s in range(0, len(zz), 1000)])
            ff = _features(feat, vae, x)
            pred = feat(x).argmax(1) if y is not None else None
        if base is None:
            base = (zz, x, ff)
        p, r = metrics.precision_recall(fr, ff)
        rec = {
            "mode": mode,
            "fid": metrics.frechet_distance(fr, ff),
            "precision": p,
            "recall": r,
            "class_accuracy": None if pred is None else float((pred == y).float().mean()),
        }
        rec["same_seed_similarity"], rec["unmatched_similarity"] = metrics.paired_cosine(
            ff, base[2], seed, shift=K or None
        )
        rec["latent_similarity"], _ = metrics.paired_cosine(zz, base[0], seed, shift=K or None)
        rec["pixel_similarity"] = _pixel_corr(x, base[1])
        res.append(rec)
        feats.append(ff)
    add_fid_intervals(res, fr, feats, n_boot, seed)
    return res


def time_modes(fine, coarse, arts, splits, n: int, steps: int, repeats: int, seed: int, K: int) -> dict:
    """Wall-clock and CPU time per sample (Euler through flow.CoarseToFine, plus decoding) of every mode,
    measured side by side: the modes take turns within each repeat, each repeat starting one mode later
    (so a change of machine load does not always hit the same modes); the fastest repeat counts. The
    CPU time (``time.process_time``: all threads of this process) does not count time spent waiting for
    a core, so on a shared machine it is the steadier measure; with one thread it equals the wall-clock
    of an idle machine. Returns {mode: {"seconds_per_sample", "cpu_seconds_per_sample", "nfe", "runs"}}."""
    import torch

    from icml26.methods.lfm import flow
    from icml26.methods.lfm.train import model_velocity

    x0, y = _noise(arts, n, seed, K)
    scale = float(arts["latents_meta"]["latent_scale"])
    facs = {"large": lambda: model_velocity(fine, y), "small": lambda: model_velocity(coarse, y)}
    for s in splits:
        facs[f"c2f@{s}"] = lambda s=s: flow.CoarseToFine(model_velocity(coarse, y), model_velocity(fine, y), s)
    runs: dict = {m: [] for m in facs}
    cpu: dict = {m: [] for m in facs}
    nfe = {}
    names = list(facs)
    with torch.no_grad():
        for m, f in facs.items():  # warm-up, full batch
            flow.euler(f(), x0, 2)
        for rep in range(repeats):
            for m in names[rep % len(names) :] + names[: rep % len(names)]:
                v = facs[m]()
                t0, c0 = time.perf_counter(), time.process_time()
                z, _n = flow.euler(v, x0, steps)
                arts["vae"].decode(z / scale)
                runs[m].append((time.perf_counter() - t0) / n)
                cpu[m].append((time.process_time() - c0) / n)
                nfe[m] = f"{v.nfe_coarse:.0f}+{v.nfe_fine:.0f}" if isinstance(v, flow.CoarseToFine) else str(_n)
    return {
        m: {"seconds_per_sample": min(runs[m]), "cpu_seconds_per_sample": min(cpu[m]), "nfe": nfe[m], "runs": runs[m]}
        for m in facs
    }


def timed_sweep(fine_ck: str, coarse_ck: str, splits, *, steps: int, n: int, repeats: int, seed: int = 0) -> dict:
    fine, fm, coarse, cm, arts = _load_pair(fine_ck, coarse_ck)
    return time_modes(fine, coarse, arts, splits, n, steps, repeats, seed, fine.arch.num_classes)


def with_speed(res: list[dict], speed: dict) -> list[dict]:
    """Copy of the quality records with the timed ``seconds_per_sample``, ``cpu_seconds_per_sample``, ``nfe``,
    ``speedup`` (wall-clock, vs large) and ``cpu_speedup`` (CPU time, vs large)."""
    out = [dict(r) for r in res]
    for r in out:
        sp = speed[r["mode"]]
        r["seconds_per_sample"], r["nfe"], r["timing_runs"] = sp["seconds_per_sample"], sp["nfe"], sp["runs"]
        r["speedup"] = speed["large"]["seconds_per_sample"] / sp["seconds_per_sample"]
        r["cpu_seconds_per_sample"] = sp["cpu_seconds_per_sample"]
        r["cpu_speedup"] = speed["large"]["cpu_seconds_per_sample"] / sp["cpu_seconds_per_sample"]
    return out


def c2f_sweep(
    fine_ck: str,
    coarse_ck: str,
    splits,
    *,
    steps: int,
    n: int,
    seed: int,
    ref_offset: int,
    ref_size: int,
    n_boot: int,
    check: bool = False,
) -> list[dict]:
    """One sweep over t_split: quality, with paired-bootstrap FID intervals (speed: timed_sweep)."""

    from icml26.methods.lfm import flow
    from icml26.methods.lfm.train import model_velocity

    fine, fm, coarse, cm, arts = _load_pair(fine_ck, coarse_ck)
    K = fine.arch.num_classes
    fr = _reference(arts, ref_offset, ref_size)
    x0, y = _noise(arts, n, seed, K)
    z, ks = trajectories(fine, coarse, x0, y, steps, splits)
    if check:  # the hand-off above equals flow.CoarseToFine routed per step, on a few samples
        s = splits[len(splits) // 2]
        v = flow.CoarseToFine(
            model_velocity(coarse, y[:8] if y is not None else None),
            model_velocity(fine, y[:8] if y is not None else None),
            s,
        )
        zc, _ = flow.euler(v, x0[:8], steps)
        err = float((zc - z[s][:8]).abs().max())
        assert err < 1e-4, f"prefix-shared coarse-to-fine differs from CoarseToFine by {err}"
    res = evaluate(z, arts, fr, y, n_boot, seed)
    for r in res:
        m = r["mode"]
        r["t_split"] = m if isinstance(m, float) else None
        r["mode"] = f"c2f@{m}" if isinstance(m, float) else m
        r["nfe_coarse"] = ks[m] if isinstance(m, float) else (steps if m == "small" else 0)
    for r in res:
        r["parameters"] = {"large": fm["parameters"], "small": cm["parameters"]}.get(
            r["mode"], fm["parameters"] + cm["parameters"]
        )
    return res


def sweep_table(res: list[dict], title: str, timed: bool) -> None:
    print(f"\n## {title}")
    hdr = (
        "| mode | NFE (coarse+fine) |"
        + (" ms / sample | speed-up | CPU ms / sample | CPU speed-up |" if timed else "")
        + " FID [95% CI] | FID / large [95% CI] | precision | recall | class acc | same-seed sim | latent cos | "
        "unmatched |"
    )
    print(hdr)
    print("|" + "---|" * (hdr.count("|") - 1))
    for r in res:
        nfe = r.get("nfe") or ""
        row = f"| {r['mode']} | {nfe} |"
        if timed:
            row += (
                f" {1000 * r['seconds_per_sample']:.2f} | {r['speedup']:.2f} |"
                f" {1000 * r['cpu_seconds_per_sample']:.2f} | {r['cpu_speedup']:.2f} |"
            )
        row += (
            f" {r['fid']:.2f} [{r['fid_low']:.2f}, {r['fid_high']:.2f}] | {r['fid_ratio']:.3f} "
            f"[{r['fid_ratio_low']:.3f}, {r['fid_ratio_high']:.3f}] |"
            f" {fmt(r['precision'])} | {fmt(r['recall'])} | {fmt(r['class_accuracy'])} | "
            f"{fmt(r['same_seed_similarity'])} |"
            f" {fmt(r['latent_similarity'])} | {fmt(r['unmatched_similarity'])} |"
        )
        print(row, flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="runs/bench-lfm")
    ap.add_argument("--dataset", default="fashion-mnist")
    ap.add_argument("--train-size", type=int, default=5000)
    ap.add_argument("--vae-steps", type=int, default=300)
    ap.add_argument("--feature-steps", type=int, default=150)
    ap.add_argument("--steps", type=int, default=400, help="flow-matching steps of every run (equal compute)")
    ap.add_argument("--samples", type=int, default=1000, help="samples per model in the data-reduction table")
    ap.add_argument(
        "--samples-c2f", type=int, default=1000, help="samples per mode in the reported coarse-to-fine sweep"
    )
    ap.add_argument(
        "--val-samples", type=int, default=500, help="samples per mode in the validation sweep that picks t_split"
    )
    ap.add_argument("--val-bootstrap", type=int, default=50)
    ap.add_argument("--c2f-train-steps", type=int, default=3000, help="training steps of the fine (large) model")
    ap.add_argument(
        "--coarse-train-steps",
        type=int,
        default=30000,
        help="training steps of the coarse (small) model: 7x fewer FLOPs per step, so 30000 cost about 1.4x the fine "
        "model's 3000",
    )
    ap.add_argument(
        "--seam-train-steps",
        type=int,
        default=3000,
        help="training steps of the seam-trained coarse model of section 3 (its per-step cost is about 1.2x the plain "
        "one's)",
    )
    ap.add_argument(
        "--seam-t-split",
        type=float,
        default=0.7,
        help="switch time of the seam-trained coarse model (paper default 0.7)",
    )
    ap.add_argument("--t-splits", default="0.3,0.5,0.7,0.9")
    ap.add_argument("--bootstrap", type=int, default=100, help="paired bootstrap replicates for the FID intervals")
    ap.add_argument("--timing-samples", type=int, default=256)
    ap.add_argument(
        "--grid-copy",
        default="",
        help="also write the large / small / coarse-to-fine grid here (e.g. docs/lfm_same_seed_c2f.png)",
    )
    ap.add_argument("--ratios", default="0.5,0.25")
    ap.add_argument("--scorers", default="random,kcenter,balanced-cluster,loss,grad")
    ap.add_argument("--reduction-model", default="small")
    ap.add_argument("--coarse-model", default="small")
    ap.add_argument("--fine-model", default="large")
    ap.add_argument("--eval-steps", type=int, default=30, help="Euler steps for the data-reduction FIDs")
    ap.add_argument("--c2f-steps", type=int, default=60)
    ap.add_argument("--timing-repeats", type=int, default=5)
    ap.add_argument("--reduction-only", action="store_true", help="stop after the data-reduction table")
    ap.add_argument("--no-seam", action="store_true", help="skip the coarse model trained with the seam loss")
    ap.add_argument("--quick", action="store_true", help="tiny budget smoke run")
    a = ap.parse_args()
    if a.quick:
        (
            a.train_size,
            a.vae_steps,
            a.feature_steps,
            a.steps,
            a.c2f_train_steps,
            a.coarse_train_steps,
            a.seam_train_steps,
            a.samples,
        ) = 1000, 30, 30, 30, 30, 60, 30, 64
        a.eval_steps, a.c2f_steps, a.timing_repeats, a.samples_c2f, a.val_samples, a.timing_samples = (
            10,
            20,
            1,
            64,
            64,
            16,
        )
        a.t_splits, a.bootstrap, a.scorers = "0.5,0.7", 20, "random,balanced-cluster"
    import torch

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    print(
        f"# lfm benchmark: {a.dataset}, train_size={a.train_size}, torch threads={torch.get_num_threads()}", flush=True
    )
    common = dict(
        vae_steps=a.vae_steps,
        feature_steps=a.feature_steps,
        train_size=a.train_size,
        log_every=10**6,
        checkpoint_every=10**6,
    )

    # 0. VAE + feature network + latents
    vinfo = train(out / "vae", stage="vae", dataset=a.dataset, **common)
    print(
        f"vae: recon mse {vinfo['vae']['reconstruction_mse']:.4f}, latent {vinfo['vae']['latent_shape']}; "
        f"feature net test accuracy {vinfo.get('feature_network', {}).get('test_accuracy', float('nan')):.4f}; "
        f"{vinfo['seconds']:.0f}s",
        flush=True,
    )
    vae = str(out / "vae")
    fm = dict(common, stage="fm", vae=vae, steps=a.steps)

    # 1. data reduction at equal compute
    full = train(out / "full", model=a.reduction_model, **fm)
    full_ck = str(out / "full" / "checkpoint.safetensors")
    runs = {}
    for ratio in [float(x) for x in a.ratios.split(",") if x]:
        for sc in [s for s in a.scorers.split(",") if s]:
            name = f"{sc}-{int(round(ratio * 100))}"
            extra = {"score_checkpoint": full_ck} if sc in ("loss", "grad") else {}
            runs[name] = train(out / name, model=a.reduction_model, keep_ratio=ratio, scorer=sc, **fm, **extra)
            print(
                f"trained {name}: {runs[name]['seconds']:.0f}s (scoring {runs[name]['reduction']['seconds']:.0f}s)",
                flush=True,
            )
    key1 = {
        k: getattr(a, k)
        for k in (
            "dataset",
            "train_size",
            "steps",
            "samples",
            "eval_steps",
            "ratios",
            "scorers",
            "reduction_model",
            "bootstrap",
        )
    }
    recs = cached(
        out / "reduction_eval.json",
        key1,
        lambda: sample(
            fine=full_ck,
            compare=[str(out / n / "checkpoint.safetensors") for n in runs],
            num_samples=a.samples,
            steps=a.eval_steps,
            reference_size=5000,
            seed=0,
            out=out,
            bootstrap=a.bootstrap,
        ),
    )
    res = {r["mode"]: r for r in recs if r["kind"] == "result"}
    base = res["large"]
    print(
        f"\n## data reduction at equal compute ({a.steps} steps x batch 64, {a.reduction_model} model, "
        f"{a.samples} samples, Euler {a.eval_steps}; FID in the trained feature space, not Inception)"
    )
    print(
        "| data | scorer | kept | FID [95% CI] | FID / full [95% CI] | precision | recall | class acc | same-seed sim "
        "| unmatched |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    print(
        f"| 100% | - | {full['reduction']['kept']} | {ci(base, 'fid')} | 1.000 | {fmt(base['precision'])} | "
        f"{fmt(base['recall'])} | "
        f"{fmt(base.get('class_accuracy'))} | 1.000 | {fmt(base['unmatched_similarity'])} |"
    )
    table1 = []
    for name, info in runs.items():
        r = res[f"compare:{name}"]
        sc, pct = name.rsplit("-", 1)
        row = {
            "scorer": sc,
            "keep_ratio": int(pct) / 100,
            "kept": info["reduction"]["kept"],
            "fid": r["fid"],
            "fid_ratio": r["fid"] / base["fid"],
            "fid_low": r["fid_low"],
            "fid_high": r["fid_high"],
            "fid_ratio_low": r["fid_ratio_low"],
            "fid_ratio_high": r["fid_ratio_high"],
            "precision": r["precision"],
            "recall": r["recall"],
            "class_accuracy": r.get("class_accuracy"),
            "same_seed_similarity": r["same_seed_similarity"],
            "unmatched_similarity": r["unmatched_similarity"],
        }
        table1.append(row)
        print(
            f"| {pct}% | {sc} | {row['kept']} | {ci(r, 'fid')} | {ci(r, 'fid_ratio')} | {fmt(r['precision'])} | "
            f"{fmt(r['recall'])} | "
            f"{fmt(r.get('class_accuracy'))} | {fmt(r['same_seed_similarity'])} | {fmt(r['unmatched_similarity'])} |"
        )
    best50 = min((r for r in table1 if r["keep_ratio"] == 0.5), key=lambda r: r["fid"], default=None)
    if best50:
        print(
            f"target (best scorer at 50% within 10% of full-data FID): {best50['scorer']} at "
            f"{best50['fid_ratio']:.3f}x -> "
            f"{'MET' if best50['fid_ratio'] <= 1.10 else 'NOT MET'}"
        )

    if a.reduction_only:
        return
    # 2. coarse-to-fine vs large-only: the same seed (same batches, times and noise: the data order the
    #    stability argument relies on); the small model, 7x cheaper per step, trained for more steps
    n_tr, n_co = a.c2f_train_steps, a.coarse_train_steps
    long = dict(fm, checkpoint_every=1000)  # checkpoints every 1000 steps: an interrupted run resumes
    fine = train(out / f"fine-{n_tr}", model=a.fine_model, **dict(long, steps=n_tr))
    coarse = train(out / f"coarse-{n_co}", model=a.coarse_model, **dict(long, steps=n_co))
    fine_ck, coarse_ck = (
        str(out / f"fine-{n_tr}" / "checkpoint.safetensors"),
        str(out / f"coarse-{n_co}" / "checkpoint.safetensors"),
    )
    print(
        f"\nc2f models: fine {a.fine_model} {fine['model']['parameters']} params, {n_tr} steps "
        f"({fine['seconds']:.0f}s); "
        f"coarse {a.coarse_model} {coarse['model']['parameters']} params, {n_co} steps ({coarse['seconds']:.0f}s)",
        flush=True,
    )
    tag = f"{n_tr}" if n_co == n_tr else f"{n_tr}_{n_co}"
    splits = [float(x) for x in a.t_splits.split(",") if x]
    # 2a. validation sweep: other noise (seed 1) and the other half of the test split; picks t_split
    val = cached(
        out / f"c2f_val_{tag}.json",
        c2f_key(a),
        lambda: c2f_sweep(
            fine_ck,
            coarse_ck,
            splits,
            steps=a.c2f_steps,
            n=a.val_samples,
            seed=1,
            ref_offset=5000,
            ref_size=5000,
            n_boot=a.val_bootstrap,
        ),
    )
    sweep_table(
        val,
        f"validation sweep (noise seed 1, reference = test images 5000-9999, {a.val_samples} samples, Euler "
        f"{a.c2f_steps}): picks t_split",
        False,
    )
    ok = [r for r in val if r["t_split"] is not None and r["fid_ratio"] <= 1.10]
    chosen = (
        max(ok, key=lambda r: r["t_split"])
        if ok
        else min((r for r in val if r["t_split"] is not None), key=lambda r: r["fid"])
    )
    t_pick = chosen["t_split"]
    why = (
        "largest split with validation FID within 10% of large" if ok else "no split within 10%: lowest validation FID"
    )
    print(f"chosen t_split = {t_pick} ({why})")
    # 2b. reported sweep: noise seed 0, test images 0-4999, wall-clock side by side
    rep = cached(
        out / f"c2f_test_{tag}.json",
        c2f_key(a),
        lambda: c2f_sweep(
            fine_ck,
            coarse_ck,
            splits,
            steps=a.c2f_steps,
            n=a.samples_c2f,
            seed=0,
            ref_offset=0,
            ref_size=5000,
            n_boot=a.bootstrap,
            check=True,
        ),
    )
    rep = with_speed(
        rep,
        cached(
            out / f"c2f_timing_{tag}.json",
            timing_key(a),
            lambda: timed_sweep(
                fine_ck, coarse_ck, splits, steps=a.c2f_steps, n=a.timing_samples, repeats=a.timing_repeats
            ),
        ),
    )
    sweep_table(
        rep,
        f"coarse-to-fine sweep (noise seed 0, reference = test images 0-4999, {a.samples_c2f} samples, Euler "
        f"{a.c2f_steps}; "
        f"ms/sample = fastest of {a.timing_repeats} interleaved runs of {a.timing_samples} samples, ODE + decoding)",
        True,
    )
    for t in splits:
        target_line(rep, t, "plain small coarse model" + (" (t_split picked on validation)" if t == t_pick else ""))
    grid(out, fine_ck, coarse_ck, splits, a)
    # 3. the paper's light model: trained on t < t_split only, plus the seam loss against the fine model
    res3 = []
    if not a.no_seam:
        ts = a.seam_t_split
        n_se = a.seam_train_steps
        name = f"coarse-seam-{n_se}-t{ts}"
        train(out / name, model=a.coarse_model, t_max=ts, seam_checkpoint=fine_ck, **dict(long, steps=n_se))
        res3 = cached(
            out / f"c2f_seam_test_{n_tr}_{n_se}_{ts}.json",
            c2f_key(a),
            lambda: c2f_sweep(
                fine_ck,
                str(out / name / "checkpoint.safetensors"),
                [ts],
                steps=a.c2f_steps,
                n=a.samples_c2f,
                seed=0,
                ref_offset=0,
                ref_size=5000,
                n_boot=a.bootstrap,
            ),
        )
        res3 = with_speed(
            res3,
            cached(
                out / f"c2f_seam_timing_{n_tr}_{n_se}_{ts}.json",
                timing_key(a),
                lambda: timed_sweep(
                    fine_ck,
                    str(out / name / "checkpoint.safetensors"),
                    [ts],
                    steps=a.c2f_steps,
                    n=a.timing_samples,
                    repeats=a.timing_repeats,
                ),
            ),
        )
        sweep_table(
            res3,
            f"coarse model trained the paper's way (t < {ts} only + seam loss 0.1 vs the fine model, {n_se} steps), "
            "same protocol",
            True,
        )
        target_line(res3, ts, "seam-trained coarse model")
    res2 = {"validation": val, "test": rep, "t_split": t_pick}
    summary = {
        "args": vars(a),
        "vae": vinfo,
        "reduction": table1,
        "full": {k: base[k] for k in ("fid", "precision", "recall")},
        "c2f": res2,
        "c2f_seam": res3,
        "seconds": time.perf_counter() - t_start,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(f"\ntotal {summary['seconds']:.0f}s; grids: {out / 'same_seed.png'}, {out / 'c2f_same_seed.png'}")


if __name__ == "__main__":
    main()
