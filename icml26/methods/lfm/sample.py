"""``icml26 sample-lfm``: sample latent FM models, alone and coarse-to-fine, and measure
quality, speed and same-seed stability (LFM stability, ICML 2026, arXiv 2605.08398).

For one set of noise seeds x0 ~ N(0, I) (and class labels y = i mod K for conditional models):
  1. ``large``: the fine model integrates t in [0, 1];
  2. ``small``: the coarse model alone;
  3. ``coarse-to-fine``: the coarse model for t < t_split, the fine model after (paper Sec. on
     two-model inference; default t_split = 0.7, 60 Euler steps);
  4. each ``--compare`` checkpoint alone (e.g. a model trained on reduced data).
Each mode reports NFE, wall-clock seconds per sample (ODE + decoding), FID / precision / recall
in the feature space of the classifier trained here (NOT Inception), class accuracy of the
samples, and its same-seed similarity to the ``large`` samples (cosine of feature embeddings,
the paper's DINO-cosine analogue; latent cosine; pixel correlation) beside the unmatched baseline.
An independent judge (``judge``: a network the method did not train or choose, see
``core/data/judges.py``) gives ``judge_fid`` / ``judge_precision`` / ``judge_recall`` beside them.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Iterator, Sequence

import torch
from torch import Tensor

from icml26.core.errors import InputError
from icml26.core.verdict import verdict
from icml26.methods.lfm import flow, metrics
from icml26.methods.lfm.sample_config import DEFAULT_STEPS, SAMPLERS, SampleConfig  # noqa: F401  (re-exported)
from icml26.methods.lfm.train import load_flow, load_vae_dir, model_velocity


def _sample_latents(v_factory, x0: Tensor, y: Tensor | None, cfg: SampleConfig, *, c2f: bool = False):
    """Integrate in batches. v_factory(y_batch) -> velocity fn (or a CoarseToFine). Returns (x1, nfe, extra)."""
    outs, nfe, extra = [], 0, {}
    for s in range(0, len(x0), cfg.batch_size):
        xb = x0[s : s + cfg.batch_size]
        yb = None if y is None else y[s : s + cfg.batch_size]
        v = v_factory(yb)
        if c2f:  # count the network evaluations of each model (integers; a mixed batch calls both)
            v.coarse, v.fine = flow.CountingVelocity(v.coarse), flow.CountingVelocity(v.fine)
        x1, n = flow.integrate(v, xb, method=cfg.sampler, steps=cfg.steps or 0, rtol=cfg.rtol, atol=cfg.atol)
        outs.append(x1)
        if c2f and (n > nfe or not extra):  # the batch that took the most evaluations (adaptive: batches differ)
            extra = {"nfe_coarse": int(v.coarse.calls), "nfe_fine": int(v.fine.calls)}
        nfe = max(nfe, int(n))
    return torch.cat(outs), nfe, extra


def checkpoint_file(path: str | Path, flag: str = "--fine") -> str:
    """A checkpoint argument: a file as given, or a train-lfm run directory -> its
    ``checkpoint.safetensors``. InputError for a directory without one."""
    p = Path(path).expanduser()
    if p.is_dir():
        c = p / "checkpoint.safetensors"
        if c.is_file():
            return str(c)
        raise InputError(
            f"{flag} {str(path)!r} is a directory, expected a file (a train-lfm checkpoint.safetensors; "
            "this directory has none)"
        )
    return str(path)


def run(
    cfg: SampleConfig,
    *,
    fine: str,
    coarse: str | None = None,
    compare: Sequence[str] = (),
    vae: str | None = None,
    seed: int = 0,
    out: str | Path | None = None,
    device: str = "cpu",
) -> Iterator[dict]:
    """The records of one sampling comparison (see the module doc). The checkpoints and the VAE
    run are read and checked when ``run`` is called (InputError), before the first record.
    device: where the networks run (sampling and decoding); metrics are computed on the CPU."""
    fine = checkpoint_file(fine, "--fine")
    coarse = checkpoint_file(coarse, "--coarse") if coarse else coarse
    compare = [checkpoint_file(p, "--compare") for p in compare]
    fine_net, fine_meta = load_flow(fine)
    coarse_net = coarse_meta = None
    if coarse:
        coarse_net, coarse_meta = load_flow(coarse)
    others = [(p, *load_flow(p)) for p in compare]
    arts = load_vae_dir(vae or fine_meta["vae_dir"])
    lm = arts["latents_meta"]
    shape = tuple(lm["latent_shape"])
    for p, net in [(fine, fine_net)] + ([(coarse, coarse_net)] if coarse else []) + [(p, n) for p, n, _ in others]:
        a = net.arch
        if (a.in_channels, a.input_size, a.input_size) != shape:
            raise InputError(
                f"{p}: latent shape {(a.in_channels, a.input_size, a.input_size)} does not match the VAE's {shape}"
            )
    return _records(
        cfg,
        fine=fine,
        coarse=coarse,
        seed=seed,
        out=out,
        fine_net=fine_net,
        fine_meta=fine_meta,
        coarse_net=coarse_net,
        coarse_meta=coarse_meta,
        others=others,
        arts=arts,
        judge=_judge(cfg.judge, lm),
        device=device,
    )


def _records(
    cfg: SampleConfig,
    *,
    fine: str,
    coarse: str | None,
    seed: int,
    out,
    fine_net,
    fine_meta,
    coarse_net,
    coarse_meta,
    others,
    arts,
    judge,
    device,
) -> Iterator[dict]:
    from icml26.core.data.images import load_images
    from icml26.core.progress import progress
    from icml26.core.seed import seed_everything

    for net in [fine_net, coarse_net, arts["vae"]] + [n for _, n, _ in others]:
        if net is not None:
            net.to(device)

    seed_everything(seed)
    lm = arts["latents_meta"]
    shape = tuple(lm["latent_shape"])
    vae_net, feat = arts["vae"], arts["features"]
    scale = float(lm["latent_scale"])
    K = fine_net.arch.num_classes
    feature_name = (
        f"classifier trained here on {lm['dataset']} (penultimate layer; not Inception)"
        if feat is not None
        else "VAE encoder mean (no labels; not Inception)"
    )

    # real reference features (test split)
    ref = load_images(lm["dataset_arg"], "test", size=int(lm["image_shape"][-1]))
    if cfg.reference_offset >= len(ref.images):
        raise InputError(f"reference_offset {cfg.reference_offset} is past the {len(ref.images)} test images")
    xr = (
        torch.from_numpy(ref.images[cfg.reference_offset : cfg.reference_offset + cfg.reference_size])
        .float()
        .div_(255.0)
    )
    with torch.no_grad():
        fr = _features(feat, vae_net.cpu(), xr)
        jr = _features(judge[0], None, xr) if judge[0] is not None else None
    vae_net.to(device)
    yield {
        "kind": "reference",
        "dataset": lm["dataset"],
        "split": "test",
        "split_source": ref.split_source,
        "offset": cfg.reference_offset,
        "images": int(len(xr)),
        "feature_net": feature_name,
        "judge": judge[1],
    }

    g = torch.Generator().manual_seed(seed)
    x0 = torch.randn((cfg.num_samples, *shape), generator=g).to(device)
    y = (torch.arange(cfg.num_samples) % K).to(device) if K > 0 else None

    def single(net):
        return lambda yb: model_velocity(net, yb, cfg.cfg_scale)

    def two(yb):
        return flow.CoarseToFine(
            model_velocity(coarse_net, yb, cfg.cfg_scale), model_velocity(fine_net, yb, cfg.cfg_scale), cfg.t_split
        )

    modes = [("large", single(fine_net), fine_meta, False)]
    if coarse_net is not None:
        modes += [("small", single(coarse_net), coarse_meta, False), ("coarse-to-fine", two, None, True)]
    for p, net, m in others:
        modes.append((f"compare:{Path(p).parent.name or Path(p).stem}", single(net), m, False))

    # warm-up (first-call overheads out of the timings)
    for _, fac, _, _ in modes:
        yb = None if y is None else y[:4]
        v = fac(yb)
        flow.euler(v, x0[:4], 2)

    # timing: the modes take turns (each repeat starting one mode later), so a change of machine load
    # does not always hit the same mode; same noise every repeat (identical samples); the fastest counts
    times: dict[str, list[float]] = {m[0]: [] for m in modes}
    outs: dict[str, tuple] = {}
    with progress(cfg.timing_repeats * len(modes), "sampling") as bar:
        for rep in range(cfg.timing_repeats):
            k = rep % len(modes)
            for name, fac, meta, c2f in modes[k:] + modes[:k]:
                t0 = time.perf_counter()
                with torch.no_grad():
                    z, nfe, extra = _sample_latents(fac, x0, y, cfg, c2f=c2f)
                    x = torch.cat([vae_net.decode(z[s : s + 1000] / scale) for s in range(0, len(z), 1000)])
                if str(device).startswith("cuda"):
                    torch.cuda.synchronize()
                times[name].append(time.perf_counter() - t0)
                outs[name] = (z.cpu(), nfe, extra, x.cpu())
                bar.advance(1, mode=name)
    vae_net.cpu()
    y = y.cpu() if y is not None else None

    results, imgs, ref_large, feats, jfeats = [], {}, None, [], []
    for name, fac, meta, c2f in modes:
        z, nfe, extra, x = outs[name]
        sps = min(times[name]) / cfg.num_samples
        with torch.no_grad():
            ff = _features(feat, vae_net, x)
        prec, rec = metrics.precision_recall(fr, ff)
        r = {
            "kind": "result",
            "mode": name,
            "nfe": nfe,
            **extra,
            "seconds_per_sample": sps,
            "fid": metrics.frechet_distance(fr, ff),
            "precision": prec,
            "recall": rec,
        }
        if judge[0] is not None:
            with torch.no_grad():
                jf = _features(judge[0], None, x)
            jfeats.append(jf)
            r["judge_fid"] = metrics.frechet_distance(jr, jf)
            r["judge_precision"], r["judge_recall"] = metrics.precision_recall(jr, jf)
        if feat is not None and y is not None:
            with torch.no_grad():
                pred = torch.cat([feat(x[s : s + 1000]).argmax(1) for s in range(0, len(x), 1000)])
            r["class_accuracy"] = float((pred == y).float().mean())
        if ref_large is None:
            ref_large = (z, x, ff)
        zl, xl, fl = ref_large
        shift = K if K > 0 else None
        r["same_seed_similarity"], r["unmatched_similarity"] = metrics.paired_cosine(ff, fl, seed, shift=shift)
        r["latent_similarity"], r["latent_unmatched_similarity"] = metrics.paired_cosine(z, zl, seed, shift=shift)
        r["pixel_similarity"], r["pixel_unmatched_similarity"] = metrics.paired_cosine(
            _centred(x), _centred(xl), seed, shift=shift
        )
        r["parameters"] = int(meta["parameters"]) if meta else int(coarse_meta["parameters"] + fine_meta["parameters"])
        if meta:
            r["keep_ratio"], r["scorer"] = meta.get("keep_ratio"), meta.get("scorer")
        if c2f:
            r["t_split"] = cfg.t_split
        r["feature_net"] = "trained here" if feat is not None else "vae-encoder"
        results.append(r)
        imgs[name] = x
        feats.append(ff)
    if cfg.bootstrap:
        add_fid_intervals(results, fr, feats, cfg.bootstrap, seed)
        if jfeats:
            add_fid_intervals(results, jr, jfeats, cfg.bootstrap, seed, key="judge_fid")
    base = results[0]["seconds_per_sample"]
    for r in results:
        r["speedup"] = base / r["seconds_per_sample"] if r["seconds_per_sample"] > 0 else None
        yield r

    grids = _write_grids(cfg, out, imgs) if out is not None else {}
    yield _summary(cfg, results, feature_name=feature_name, judge=judge, device=device, grids=grids)


def _write_grids(cfg: SampleConfig, out, imgs: dict) -> dict[str, str]:
    """PNG grids in ``out``: the first samples of each mode, and one row per mode at the same noise."""
    from icml26.core.data.images import save_png_grid

    grids = {}
    outp = Path(out)
    for name, x in imgs.items():
        fn = outp / f"samples_{name.replace(':', '_')}.png"
        save_png_grid(x[: cfg.grid_size], fn, nrow=8)
        grids[name] = str(fn)
    ncol = min(12, cfg.num_samples)
    rows = torch.cat([imgs[n][:ncol] for n in imgs])
    save_png_grid(rows, outp / "same_seed.png", nrow=ncol)
    grids["same_seed"] = str(outp / "same_seed.png")
    return grids


def _summary(cfg: SampleConfig, results: list[dict], *, feature_name, judge, device, grids) -> dict:
    """The summary record: modes, sampler settings, verdicts on FID, coarse-to-fine headline figures."""
    summary = {
        "kind": "summary",
        "modes": [r["mode"] for r in results],
        "num_samples": cfg.num_samples,
        "sampler": cfg.sampler,
        "steps": cfg.steps,
        "feature_net": feature_name,
        "judge": judge[1],
        "device": str(device),
        "grids": grids,
    }
    if cfg.sampler == "adaptive":  # no fixed steps: the solver's tolerances and the evaluations it took
        summary.update(rtol=cfg.rtol, atol=cfg.atol, nfe={r["mode"]: r["nfe"] for r in results})
    for key in ("fid", "judge_fid"):  # a best mode only when its interval separates it (core/verdict)
        if any(key in r for r in results):
            summary.update(verdict(results, key, "mode", lower=True, ci_key=f"{key}_ci"))
    by = {r["mode"]: r for r in results}
    if "coarse-to-fine" in by:
        summary["c2f_speedup"] = by["coarse-to-fine"]["speedup"]
        summary["c2f_fid"] = by["coarse-to-fine"]["fid"]
        summary["large_fid"] = by["large"]["fid"]
        summary["c2f_same_seed_similarity"] = by["coarse-to-fine"]["same_seed_similarity"]
    return summary


def add_fid_intervals(
    results: list[dict], fr: Tensor, feats: list[Tensor], n_boot: int, seed: int, key: str = "fid"
) -> None:
    """Add ``<key>_sd`` / ``_low`` / ``_high`` and, vs the first result (large), ``<key>_ratio`` with
    ``<key>_ratio_low`` / ``_high`` to each result, in place (key: ``fid`` or ``judge_fid``).

    Paired bootstrap (metrics.bootstrap_fid: real rows and, jointly, the same-seed rows of every mode
    resampled). Resampled FIDs are biased upwards, so the interval is the normal one around the
    full-sample value, estimate +- 1.96 bootstrap sd (for the ratio: the sd of the replicate ratios)."""
    boot = metrics.bootstrap_fid(fr, feats, n_boot=n_boot, seed=seed)
    sd = boot.std(0, ddof=1)
    rsd = (boot / boot[:, :1]).std(0, ddof=1)
    base = results[0][key]
    for j, r in enumerate(results):
        r[f"{key}_sd"] = float(sd[j])
        r[f"{key}_low"], r[f"{key}_high"] = r[key] - 1.96 * float(sd[j]), r[key] + 1.96 * float(sd[j])
        r[f"{key}_ci"] = [r[f"{key}_low"], r[f"{key}_high"]]
        ratio = r[key] / base
        r[f"{key}_ratio"] = ratio
        r[f"{key}_ratio_low"], r[f"{key}_ratio_high"] = ratio - 1.96 * float(rsd[j]), ratio + 1.96 * float(rsd[j])
        r[f"{key}_bootstrap"] = n_boot


def _judge(name: str, lm: dict):
    """(judge network or None, record dict) for SampleConfig.judge: ``auto`` uses the data set's
    registered judge when it is built (else says how to build it), ``none`` none."""
    from icml26.core.data import judges
    from icml26.core.errors import MissingDataError

    if name == "none":
        return None, {"name": None}
    if name == "auto":
        name = judges.DEFAULT_FOR.get(lm["dataset"])
        if name is None:
            return None, {"name": None, "note": f"no registered judge for {lm['dataset']!r}; set judge=FILE"}
        try:
            net, meta = judges.load_judge(name)
        except MissingDataError as e:
            return None, {"name": None, "note": str(e)}
    else:
        net, meta = judges.load_judge(name)
    want = [int(v) for v in lm["image_shape"]]
    if [int(meta["in_channels"]), int(meta["image_size"]), int(meta["image_size"])] != want:
        raise InputError(
            f"judge {name!r} reads {meta['in_channels']}x{meta['image_size']}x{meta['image_size']} images; "
            f"this model makes {want[0]}x{want[1]}x{want[2]}"
        )
    info = {k: meta.get(k) for k in ("name", "dataset", "train_images", "feature_dim", "test_accuracy")}
    return net, info


def _centred(x: Tensor) -> Tensor:
    """Rows minus their mean: cosine of centred pixels = the pixel correlation."""
    x = x.flatten(1).double()
    return x - x.mean(1, keepdim=True)


def _features(feat, vae_net, x: Tensor) -> Tensor:
    if feat is not None:
        return torch.cat([feat.features(x[s : s + 1000]) for s in range(0, len(x), 1000)])
    return torch.cat([vae_net.encode(x[s : s + 1000])[0].flatten(1) for s in range(0, len(x), 1000)])


def _pixel_corr(a: Tensor, b: Tensor) -> float:
    a = a.flatten(1).double()
    b = b.flatten(1).double()
    a = a - a.mean(1, keepdim=True)
    b = b - b.mean(1, keepdim=True)
    return float(torch.nn.functional.cosine_similarity(a, b, dim=1).mean())
