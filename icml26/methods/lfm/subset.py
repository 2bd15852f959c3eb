"""Step 4 of train-lfm: the kept subset of the training latents (``reduce`` scorers), with the
proxy scoring model for the loss / grad scorers and the image features for the cluster scorers.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from icml26.core.dist import Dist
from icml26.core.progress import progress
from icml26.methods.lfm import reduce
from icml26.methods.lfm.artifacts import arch_for, load_flow
from icml26.methods.lfm.config import Config
from icml26.methods.lfm.fm_steps import _fm_batch_fn, _fm_loss
from icml26.methods.lfm.loop import Trainer
from icml26.methods.lfm.nets import DiT


def _proxy_scorer(
    cfg: Config,
    arts: dict,
    *,
    seed: int,
    dist: Dist,
    num_classes: int,
    score_net: DiT | None = None,
    device: str = "cpu",
) -> DiT:
    """A scoring model: the given FM checkpoint (``score_net``: already loaded by validate()),
    else a small model trained on all data."""
    if cfg.score_checkpoint:
        return score_net if score_net is not None else load_flow(cfg.score_checkpoint)[0]
    lat, lab = arts["latents"], arts["labels"] if num_classes else None
    torch.manual_seed(seed + 7)
    net = DiT(arch_for(cfg, cfg.score_model, lat.shape[1:], num_classes))
    batch_fn = _fm_batch_fn(cfg, lat, lab, np.arange(len(lat)), seed=seed, stage="proxy", num_classes=num_classes)
    for _ in Trainer(dist, device).fit(
        "proxy", net, _fm_loss(cfg, None), batch_fn, steps=cfg.score_steps, lr=cfg.lr, ema_decay=cfg.ema_decay
    ):
        pass
    return net.cpu()


_SCORE_CACHE: dict = {}


def select_subset(
    cfg: Config,
    arts: dict,
    *,
    seed: int,
    dist: Dist,
    num_classes: int,
    score_net: DiT | None = None,
    device: str = "cpu",
) -> tuple[np.ndarray, dict]:
    """Step 4: indices (into the cached latents) of the kept training samples, and a summary.
    score_net: score_checkpoint's model when validate() has loaded it."""
    n = len(arts["latents"])
    info: dict = {"scorer": cfg.scorer, "keep_ratio": cfg.keep_ratio}
    t0 = time.perf_counter()
    if cfg.keep_ratio >= 1.0:
        kept = np.arange(n)
        info["scorer"] = "none"
    elif cfg.scorer == "random":
        kept = reduce.select_random(n, cfg.keep_ratio, seed)
    elif cfg.scorer in ("kcenter", "balanced-cluster", "cluster-proportional"):
        feats = image_features(arts, arts["latents"])
        info["feature_space"] = "feature network (trained here)" if arts["features"] is not None else "VAE encoder mean"
        if cfg.scorer == "kcenter":
            kept = reduce.kcenter_greedy(feats, cfg.keep_ratio, seed)
        else:
            kept = reduce.select_cluster(
                feats,
                cfg.keep_ratio,
                seed,
                num_clusters=cfg.num_clusters,
                balanced=cfg.scorer == "balanced-cluster",
                largest=cfg.score_inverse,
                spherical=cfg.clustering == "spherical",
            )
            info["clustering"] = cfg.clustering
    else:
        key = None
        if cfg.score_checkpoint:  # same scoring model + data -> same scores: reuse within a process
            st = Path(cfg.score_checkpoint).stat()
            key = (str(Path(cfg.score_checkpoint).resolve()), st.st_mtime_ns, str(arts["dir"]), cfg.scorer, num_classes)
        raw = _SCORE_CACHE.get(key) if key else None
        if raw is None:
            net = _proxy_scorer(
                cfg, arts, seed=seed, dist=dist, num_classes=num_classes, score_net=score_net, device=device
            )
            lab = arts["labels"] if num_classes else None
            with progress(n, f"{cfg.scorer} scores") as bar:
                raw = reduce.fm_raw_scores(net, arts["latents"], lab, kind=cfg.scorer, progress=bar.advance)
            if key:
                _SCORE_CACHE[key] = raw
        scores = reduce.ema_normalised_scores(raw)
        kept = reduce.select_by_score(scores, cfg.keep_ratio, largest=not cfg.score_inverse)
        info["scoring_model"] = cfg.score_checkpoint or f"{cfg.score_model} proxy, {cfg.score_steps} steps"
    info["kept"] = int(len(kept))
    info["of"] = int(n)
    info["seconds"] = time.perf_counter() - t0
    if arts["labels"] is not None:
        info["kept_per_class"] = np.bincount(
            arts["labels"][kept].numpy(), minlength=int(arts["labels"].max()) + 1
        ).tolist()
    return kept, info


@torch.no_grad()
def image_features(arts: dict, latents: Tensor) -> Tensor:
    """Embeddings (N, D) of the training images behind the cached latents: the feature network's
    penultimate layer on the original images (re-read from the data set), else the latents."""
    from icml26.core.data.images import load_images

    lm = arts["latents_meta"]
    ds = load_images(lm["dataset_arg"], "train", size=lm["image_shape"][-1])
    x = torch.from_numpy(ds.images[arts["indices"].numpy()]).float().div_(255.0)
    if arts["features"] is not None:
        return torch.cat([arts["features"].features(x[s : s + 1000]) for s in range(0, len(x), 1000)])
    return latents.flatten(1)
