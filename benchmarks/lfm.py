"""Benchmark for train-lfm / sample-lfm (LFM stability, ICML 2026, arXiv 2605.08398).

Prints, in one run, on real Fashion-MNIST:
  1. data reduction at equal compute: FID (feature network trained here, NOT Inception) of a
     flow model trained on all the data vs on 50% and 25% kept by each scorer, with the same
     number of steps; plus each reduced model's same-seed similarity to the full-data model;
  2. coarse-to-fine vs large-only: wall-clock per sample (fastest of repeated runs), NFE, FID,
     precision/recall, same-seed similarity to the large model's samples.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/lfm.py --out /tmp/icml26-bench-lfm

Runs reuse finished artefacts in --out (delete it to start over). The defaults are sized for a
shared 2-core CPU (about 20-40 minutes there); --quick is a minutes-long smoke run.
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
    from icml26.methods.lfm import train as T

    ck = out / ("latents.safetensors" if kw.get("stage") == "vae" else "checkpoint.safetensors")
    info_f = out / "bench_info.json"
    if ck.is_file() and info_f.is_file():
        return json.loads(info_f.read_text())
    t0 = time.perf_counter()
    info: dict = {}
    for r in T.run(T.Config(**kw), seed=0, out=out):
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


def fmt(v, nd=3):
    return "-" if v is None else (f"{v:.{nd}f}" if isinstance(v, float) else str(v))


def c2f_table(recs: list[dict], coarse_desc: str, a, fine: dict) -> list[dict]:
    res = [r for r in recs if r["kind"] == "result"]
    print(f"\n## coarse-to-fine (t_split {a.t_split}, Euler {a.c2f_steps}; {coarse_desc}; fine = {a.fine_model} "
          f"{fine['model']['parameters']} params; {a.samples} samples, fastest of {a.timing_repeats} timed runs)")
    print("| mode | NFE (coarse+fine) | ms / sample | speed-up | FID | precision | recall | class acc | same-seed sim | latent cos | unmatched |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in res:
        nfe = f"{r['nfe']} ({fmt(r['nfe_coarse'], 0)}+{fmt(r['nfe_fine'], 0)})" if "nfe_coarse" in r else str(r["nfe"])
        print(f"| {r['mode']} | {nfe} | {1000 * r['seconds_per_sample']:.2f} | {fmt(r['speedup'], 2)} | {fmt(r['fid'])} | {fmt(r['precision'])} | "
              f"{fmt(r['recall'])} | {fmt(r.get('class_accuracy'))} | {fmt(r['same_seed_similarity'])} | {fmt(r['latent_similarity'])} | "
              f"{fmt(r['unmatched_similarity'])} |")
    by = {r["mode"]: r for r in res}
    c, l = by["coarse-to-fine"], by["large"]
    print(f"target (coarse-to-fine >= 2x faster than large-only at comparable FID, here within 10%): {c['speedup']:.2f}x, "
          f"FID {c['fid']:.3f} vs {l['fid']:.3f} -> {'MET' if c['speedup'] >= 2.0 and c['fid'] <= 1.10 * l['fid'] else 'NOT MET'}", flush=True)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="/tmp/icml26-bench-lfm")
    ap.add_argument("--dataset", default="fashion-mnist")
    ap.add_argument("--train-size", type=int, default=5000)
    ap.add_argument("--vae-steps", type=int, default=300)
    ap.add_argument("--feature-steps", type=int, default=150)
    ap.add_argument("--steps", type=int, default=400, help="flow-matching steps of every run (equal compute)")
    ap.add_argument("--fine-steps", type=int, default=400)
    ap.add_argument("--samples", type=int, default=400)
    ap.add_argument("--ratios", default="0.5,0.25")
    ap.add_argument("--scorers", default="random,kcenter,balanced-cluster,loss,grad")
    ap.add_argument("--reduction-model", default="small")
    ap.add_argument("--coarse-model", default="small")
    ap.add_argument("--fine-model", default="large")
    ap.add_argument("--eval-steps", type=int, default=30, help="Euler steps for the data-reduction FIDs")
    ap.add_argument("--c2f-steps", type=int, default=60)
    ap.add_argument("--t-split", type=float, default=0.7)
    ap.add_argument("--timing-repeats", type=int, default=2)
    ap.add_argument("--no-seam", action="store_true", help="skip the coarse model trained with the seam loss")
    ap.add_argument("--quick", action="store_true", help="tiny budget smoke run")
    a = ap.parse_args()
    if a.quick:
        a.train_size, a.vae_steps, a.feature_steps, a.steps, a.fine_steps, a.samples = 1000, 30, 30, 30, 30, 64
        a.eval_steps, a.c2f_steps, a.timing_repeats = 10, 20, 1
    import torch

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    print(f"# lfm benchmark: {a.dataset}, train_size={a.train_size}, torch threads={torch.get_num_threads()}", flush=True)
    common = dict(vae_steps=a.vae_steps, feature_steps=a.feature_steps, train_size=a.train_size, log_every=10**6, checkpoint_every=10**6)

    # 0. VAE + feature network + latents
    vinfo = train(out / "vae", stage="vae", dataset=a.dataset, **common)
    print(f"vae: recon mse {vinfo['vae']['reconstruction_mse']:.4f}, latent {vinfo['vae']['latent_shape']}; "
          f"feature net test accuracy {vinfo.get('feature_network', {}).get('test_accuracy', float('nan')):.4f}; {vinfo['seconds']:.0f}s", flush=True)
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
            print(f"trained {name}: {runs[name]['seconds']:.0f}s (scoring {runs[name]['reduction']['seconds']:.0f}s)", flush=True)
    recs = sample(fine=full_ck, compare=[str(out / n / "checkpoint.safetensors") for n in runs], num_samples=a.samples,
                  steps=a.eval_steps, reference_size=5000, seed=0, out=out)
    res = {r["mode"]: r for r in recs if r["kind"] == "result"}
    base = res["large"]
    print(f"\n## data reduction at equal compute ({a.steps} steps x batch 64, {a.reduction_model} model, "
          f"{a.samples} samples, Euler {a.eval_steps}; FID in the trained feature space, not Inception)")
    print("| data | scorer | kept | FID | FID / full | precision | recall | class acc | same-seed sim | unmatched |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    print(f"| 100% | - | {full['reduction']['kept']} | {fmt(base['fid'])} | 1.000 | {fmt(base['precision'])} | {fmt(base['recall'])} | "
          f"{fmt(base.get('class_accuracy'))} | 1.000 | {fmt(base['unmatched_similarity'])} |")
    table1 = []
    for name, info in runs.items():
        r = res[f"compare:{name}"]
        sc, pct = name.rsplit("-", 1)
        row = {"scorer": sc, "keep_ratio": int(pct) / 100, "kept": info["reduction"]["kept"], "fid": r["fid"], "fid_ratio": r["fid"] / base["fid"],
               "precision": r["precision"], "recall": r["recall"], "class_accuracy": r.get("class_accuracy"),
               "same_seed_similarity": r["same_seed_similarity"], "unmatched_similarity": r["unmatched_similarity"]}
        table1.append(row)
        print(f"| {pct}% | {sc} | {row['kept']} | {fmt(r['fid'])} | {fmt(row['fid_ratio'])} | {fmt(r['precision'])} | {fmt(r['recall'])} | "
              f"{fmt(r.get('class_accuracy'))} | {fmt(r['same_seed_similarity'])} | {fmt(r['unmatched_similarity'])} |")
    best50 = min((r for r in table1 if r["keep_ratio"] == 0.5), key=lambda r: r["fid"], default=None)
    if best50:
        print(f"target (best scorer at 50% within 10% of full-data FID): {best50['scorer']} at {best50['fid_ratio']:.3f}x -> "
              f"{'MET' if best50['fid_ratio'] <= 1.10 else 'NOT MET'}")

    # 2. coarse-to-fine vs large-only
    fine = train(out / "fine", model=a.fine_model, **dict(fm, steps=a.fine_steps))
    recs2 = sample(fine=str(out / "fine" / "checkpoint.safetensors"), coarse=full_ck, num_samples=a.samples, steps=a.c2f_steps,
                   t_split=a.t_split, timing_repeats=a.timing_repeats, reference_size=5000, seed=0, out=out / "c2f_samples")
    res2 = c2f_table(recs2, f"coarse = {a.reduction_model} {full['model']['parameters']} params trained on all t", a, fine)

    # 3. the paper's light model: trained on t < t_split only, plus the seam loss against the fine model
    res3 = []
    if not a.no_seam:
        train(out / "coarse-seam", model=a.coarse_model, t_max=a.t_split, seam_checkpoint=str(out / "fine" / "checkpoint.safetensors"), **fm)
        recs3 = sample(fine=str(out / "fine" / "checkpoint.safetensors"), coarse=str(out / "coarse-seam" / "checkpoint.safetensors"),
                       num_samples=a.samples, steps=a.c2f_steps, t_split=a.t_split, timing_repeats=a.timing_repeats, reference_size=5000,
                       seed=0, out=out / "c2f_seam_samples")
        res3 = c2f_table(recs3, f"coarse = {a.coarse_model} trained on t < {a.t_split} + seam loss 0.1 (paper)", a, fine)
    summary = {"args": vars(a), "vae": vinfo, "reduction": table1, "full": {k: base[k] for k in ("fid", "precision", "recall")},
               "c2f": res2, "c2f_seam": res3, "seconds": time.perf_counter() - t_start}
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(f"\ntotal {summary['seconds']:.0f}s; grids: {out / 'same_seed.png'}, {out / 'c2f_samples' / 'same_seed.png'}")


if __name__ == "__main__":
    main()
