"""``icml26 icr analyze``: ICR and linear-probe accuracy of a U-Net's features across noise levels
(paper Sec. 4.1, Fig. 2/3: the "semantic window"; docs/icr.md, protocol A).

Per noise level of the grid:
  1. features (N, V, d) of ``icr_images`` training images under ``views`` perturbations
     (``features.view_features``; the same images and augmentation draws at every level);
  2. ICR with the documented shrinkage (``estimator.icr``);
  3. linear probe: a standardised multinomial logistic regression (scikit-learn, lbfgs, C = 1) fitted
     on the first view's features of those training images, accuracy on ``probe_test_images`` test
     images seen through one perturbation of the same kind (RECON: the paper fits on the full training
     set; the SiT probe uses 200 images per class).
Targets of the paper: ICR is U-shaped in the noise level and its minimum coincides with the probe's peak.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np

from icml26.core.data.images import load_images, require_images
from icml26.core.errors import InputError
from icml26.core.progress import progress
from icml26.core.seed import seed_everything
from icml26.methods.diffusion import estimator as E
from icml26.methods.diffusion import features as F
from icml26.methods.diffusion import unet as U
from icml26.methods.diffusion.config import AnalyzeConfig  # noqa: F401  (re-exported)


@dataclass
class AnalyzeInputs:
    unet: object
    sched: object
    levels: tuple
    x_train: object
    y_train: np.ndarray | None
    x_test: object
    y_test: np.ndarray | None
    image_size: int
    meta: dict = field(default_factory=dict)


def validate(cfg: AnalyzeConfig, model: str | None, seed: int) -> AnalyzeInputs:
    """Every check of ``analyze`` before its config record: model folder, noise levels, layer, data.
    Raises InputError (exit 2)."""
    if not model:
        raise InputError(
            "icr analyze needs --model DIR (a diffusers UNet2DModel folder, e.g. RUN/size-N/unet of `icml26 icr train`)"
        )
    d, conf, sched, meta = U.check_model_dir(model)
    levels = tuple(cfg.noise_levels) if cfg.noise_levels else sched.default_grid()
    for lv in levels:
        sched.check_level(float(lv))
    if len(set(levels)) != len(levels):
        raise InputError(f"noise_levels repeat a value: {list(levels)}")
    require_images(cfg.data)
    unet = U.load_unet(d)
    F.resolve_layer(unet, cfg.feature_layer)
    size = conf.get("sample_size", 32)
    size = int(size[0] if isinstance(size, (list, tuple)) else size)
    ch = int(conf.get("in_channels", 1))
    tr = load_images(cfg.data, "train")
    if len(tr) < cfg.icr_images:
        raise InputError(
            f"icr_images = {cfg.icr_images} but {cfg.data!r} has {len(tr)} training images; lower --set icr_images"
        )
    g = np.random.default_rng(seed)
    idx = np.sort(g.choice(len(tr), cfg.icr_images, replace=False))
    x_train = F.prepare_images(tr.images[idx], size, ch)
    y_train = tr.labels[idx] if tr.labels is not None else None
    x_test = y_test = None
    if y_train is not None and cfg.probe_test_images > 0:
        te = load_images(cfg.data, "test")
        k = min(cfg.probe_test_images, len(te))
        jdx = np.sort(g.choice(len(te), k, replace=False))
        x_test = F.prepare_images(te.images[jdx], size, ch)
        y_test = te.labels[jdx] if te.labels is not None else None
        if y_test is None:
            x_test = None
    return AnalyzeInputs(
        unet,
        sched,
        levels,
        x_train,
        y_train,
        x_test,
        y_test,
        size,
        {
            "model_dir": str(d),
            "schedule": sched.kind,
            "image_size": size,
            "in_channels": ch,
            **{k: v for k, v in meta.items() if k in ("data", "train_size", "step")},
        },
    )


def probe_accuracy(f_train: np.ndarray, y_train: np.ndarray, f_test: np.ndarray, y_test: np.ndarray) -> float:
    """Test accuracy of a standardised logistic-regression probe (scikit-learn, lbfgs, C = 1, 2000 iterations)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    clf = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000, C=1.0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # convergence warnings at the noisiest levels
        clf.fit(f_train, y_train)
    return float((clf.predict(f_test) == y_test).mean())


def grid_argext(values: list[float | None], largest: bool) -> int | None:
    """Index of the minimum (or maximum) of the finite values; None if none is finite."""
    ok = [(v, i) for i, v in enumerate(values) if v is not None and np.isfinite(v)]
    if not ok:
        return None
    return (max(ok) if largest else min(ok))[1]


def run(cfg: AnalyzeConfig, *, inputs: AnalyzeInputs, seed: int = 0) -> Iterator[dict]:
    """Yield a ``model`` record, one ``result`` per noise level, then the ``summary``."""
    seed_everything(seed)
    inp = inputs
    n_params = sum(p.numel() for p in inp.unet.parameters())
    yield {
        "kind": "model",
        **inp.meta,
        "parameters": int(n_params),
        "feature_layer": cfg.feature_layer,
        "noise_param": inp.sched.noise_param,
        "noise_levels": list(inp.levels),
    }
    aug = {"shift_px": cfg.shift_px, "hflip": cfg.hflip, "jitter": cfg.jitter}
    rows = []

    with progress(len(inp.levels), "icr analyze noise levels") as bar:
        for lv in inp.levels:
            t0 = time.perf_counter()
            h = F.view_features(
                inp.unet,
                inp.x_train,
                inp.sched,
                float(lv),
                views=cfg.views,
                layer=cfg.feature_layer,
                seed=seed,
                batch_size=cfg.batch_size,
                **aug,
            )  # (N, V, d)
            t_feat = time.perf_counter() - t0
            r = E.icr(h, shrinkage_rel=cfg.shrinkage_rel)
            t_icr = time.perf_counter() - t0 - t_feat
            acc = None
            if inp.x_test is not None:
                ft = F.view_features(
                    inp.unet,
                    inp.x_test,
                    inp.sched,
                    float(lv),
                    views=1,
                    layer=cfg.feature_layer,
                    seed=seed + 1,
                    batch_size=cfg.batch_size,
                    **aug,
                )[:, 0]
                acc = probe_accuracy(h[:, 0].numpy(), inp.y_train, ft.numpy(), inp.y_test)
            rec = {
                "kind": "result",
                "noise_level": float(lv),
                "noise_param": inp.sched.noise_param,
                "alpha_bar": inp.sched.alpha_bar(float(lv)),
                "icr": r.icr,
                "probe_accuracy": acc,
                "feature_layer": cfg.feature_layer,
                "shrinkage": r.shrinkage,
                "shrinkage_rel": cfg.shrinkage_rel,
                "trace_sigma_s": r.trace_sigma_s,
                "trace_sigma_xi": r.trace_sigma_xi,
                "feature_dim": r.feature_dim,
                "n_images": r.n_images,
                "views": r.n_views,
                "feature_seconds": t_feat,
                "icr_seconds": t_icr,
                "seconds": time.perf_counter() - t0,
            }
            rows.append(rec)
            bar.advance(1, noise_level=float(lv), icr=r.icr, probe_accuracy=acc)
            yield rec
    i_icr = grid_argext([r["icr"] for r in rows], largest=False)
    i_acc = grid_argext([r["probe_accuracy"] for r in rows], largest=True)
    n = len(rows)
    summ = {
        "kind": "summary",
        "noise_param": inp.sched.noise_param,
        "levels": n,
        "icr_min_level": rows[i_icr]["noise_level"] if i_icr is not None else None,
        "icr_min": rows[i_icr]["icr"] if i_icr is not None else None,
        "probe_peak_level": rows[i_acc]["noise_level"] if i_acc is not None else None,
        "probe_peak_accuracy": rows[i_acc]["probe_accuracy"] if i_acc is not None else None,
        "grid_steps_apart": abs(i_icr - i_acc) if (i_icr is not None and i_acc is not None) else None,
        "icr_min_intermediate": (0 < i_icr < n - 1) if i_icr is not None else None,
        "probe_peak_intermediate": (0 < i_acc < n - 1) if i_acc is not None else None,
    }
    summ["claim_window"] = (
        bool(summ["icr_min_intermediate"] and summ["probe_peak_intermediate"] and summ["grid_steps_apart"] <= 1)
        if summ["grid_steps_apart"] is not None
        else None
    )
    yield summ
