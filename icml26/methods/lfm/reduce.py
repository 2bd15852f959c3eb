"""Data reduction for latent flow matching: which training samples to keep.

Scorers (``--scorer``), all returning sorted indices of the kept samples (``keep_ratio`` of N):

  random              uniform subset (the baseline).
  kcenter             greedy k-center coreset (Sener & Savarese 2018) on image features.
  balanced-cluster    the paper's default: spherical k-means (k = 24) on L2-normalised image
                      features (official ``cluster_features.py``, commit 3593fed), an equal per-cluster
                      quota ~ (N/k) * keep; clusters smaller than the quota give their deficit to
                      clusters with spare samples; inside a cluster keep those NEAREST the centroid
                      (Euclidean distance of normalised feature and normalised centre, as official).
                      ``clustering="euclidean"``: a named variant, scikit-learn k-means on raw features.
  cluster-proportional  the same fraction of every cluster, nearest the centroid.
  loss                FM loss of a scoring model at 8 interior times t_k = linspace(0, 1, 10)[1:-1]
                      with 2 fixed noise draws shared by all samples; each t_k loss is divided by a
                      running EMA (alpha = 0.9, initialised to 1, updated after use, in data order) of
                      that time's loss; score = mean over t_k; keep the highest (``inverse``: lowest).
  grad                the same protocol with the squared norm of the parameter gradient of the
                      per-sample loss.

The official code computes features with CLIP/DINO; offline we use the feature network trained
here on the same data. Everything follows the official repository's ``scoring/`` and
``fm_training/pruning.py`` (commit f0123a7); the balanced quota follows its
``allocate_balanced_counts`` (exact total kept).
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch
from torch import Tensor

from icml26.methods.lfm.config import SCORERS  # noqa: F401  (re-exported)


def num_kept(n: int, keep_ratio: float) -> int:
    if not 0.0 < keep_ratio <= 1.0:
        raise ValueError(f"keep_ratio must be in (0, 1], got {keep_ratio}")
    return max(1, int(n * keep_ratio))


def select_random(n: int, keep_ratio: float, seed: int) -> np.ndarray:
    g = torch.Generator().manual_seed(seed)
    return np.sort(torch.randperm(n, generator=g)[: num_kept(n, keep_ratio)].numpy())


def kcenter_greedy(features: Tensor, keep_ratio: float, seed: int) -> np.ndarray:
    """Greedy 2-approximation of k-center: start from a seeded random point, repeatedly add the
    point furthest from the chosen set. features: (N, D). Returns sorted kept indices."""
    x = features.float()
    n = x.shape[0]
    k = num_kept(n, keep_ratio)
    g = torch.Generator().manual_seed(seed)
    first = int(torch.randint(n, (1,), generator=g))
    sq = (x * x).sum(1)
    chosen = torch.empty(k, dtype=torch.long)
    chosen[0] = first
    mind = (sq - 2 * x @ x[first] + sq[first]).clamp_min_(0)  # (N,) squared distance to the set
    mind[first] = -1.0
    for i in range(1, k):
        j = int(torch.argmax(mind))
        chosen[i] = j
        d = (sq - 2 * x @ x[j] + sq[j]).clamp_min_(0)
        mind = torch.minimum(mind, d)
        mind[chosen[: i + 1]] = -1.0
    return np.sort(chosen.numpy())


def spherical_kmeans(
    features: Tensor, num_clusters: int, seed: int, iterations: int = 100
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Spherical k-means as the official ``cluster_features.py`` (3593fed) runs it: L2-normalise the
    features; centres = k rows drawn by ``torch.randperm`` (seeded); assign by the largest dot
    product; a centre is its members' mean, re-normalised (an empty one keeps its place); stop
    when the mean centre shift < 1e-6 or after ``iterations``. Returns (labels, centers, x_norm)."""
    x = torch.nn.functional.normalize(features.float(), p=2, dim=-1, eps=1e-12)
    k = min(num_clusters, x.shape[0])
    g = torch.Generator().manual_seed(seed)
    centers = torch.nn.functional.normalize(x[torch.randperm(x.shape[0], generator=g)[:k]], p=2, dim=-1, eps=1e-12)
    for _ in range(iterations):
        labels = (x @ centers.t()).argmax(1)
        sums = torch.zeros_like(centers).index_add_(0, labels, x)
        counts = torch.bincount(labels, minlength=k).float()
        new = centers.clone()
        ne = counts > 0
        new[ne] = sums[ne] / counts[ne, None]
        new = torch.nn.functional.normalize(new, p=2, dim=-1, eps=1e-12)
        shift = float((new - centers).norm(dim=1).mean())
        centers = new
        if shift < 1e-6:
            break
    labels = (x @ centers.t()).argmax(1)
    return labels.numpy().astype(np.int64), centers.double().numpy(), x.double().numpy()


def kmeans(features: Tensor, num_clusters: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """k-means (scikit-learn, k-means++ init) on raw features: the ``euclidean`` variant.
    Returns (labels (N,), centers (k, D))."""
    from sklearn.cluster import KMeans

    x = features.double().numpy()
    k = min(num_clusters, x.shape[0])
    km = KMeans(n_clusters=k, n_init=1, random_state=seed).fit(x)
    return km.labels_.astype(np.int64), km.cluster_centers_


def balanced_counts(sizes: list[int], total_keep: int) -> list[int]:
    """Equal per-cluster quota; deficits of small clusters go to clusters with spare samples
    (largest spare first), so that sum == total_keep (official ``allocate_balanced_counts``)."""
    k = len(sizes)
    if total_keep > sum(sizes):
        raise ValueError(f"cannot keep {total_keep} of {sum(sizes)} samples")
    base, rem = divmod(total_keep, k)
    alloc = [base] * k
    order = sorted(range(k), key=lambda i: sizes[i], reverse=True)
    for i in range(rem):
        alloc[order[i % k]] += 1
    deficit = 0
    for c in range(k):
        if alloc[c] > sizes[c]:
            deficit += alloc[c] - sizes[c]
            alloc[c] = sizes[c]
    while deficit > 0:
        spare = [sizes[c] - alloc[c] for c in range(k)]
        for c in sorted(range(k), key=lambda i: spare[i], reverse=True):
            if deficit == 0:
                break
            if sizes[c] - alloc[c] > 0:
                alloc[c] += 1
                deficit -= 1
    return alloc


def select_cluster(
    features: Tensor,
    keep_ratio: float,
    seed: int,
    *,
    num_clusters: int = 24,
    balanced: bool = True,
    largest: bool = False,
    spherical: bool = True,
) -> np.ndarray:
    """Cluster-distance criterion. balanced: equal quotas (else proportional to cluster size);
    largest: keep the furthest from the centroid (else the nearest, the paper's default);
    spherical: the official normalised spherical k-means (else Euclidean k-means on raw features)."""
    if spherical:
        labels, centers, x = spherical_kmeans(features, num_clusters, seed)
    else:
        labels, centers = kmeans(features, num_clusters, seed)
        x = features.double().numpy()
    k = centers.shape[0]
    n = x.shape[0]
    sizes = np.bincount(labels, minlength=k).tolist()
    total = num_kept(n, keep_ratio)
    quota = balanced_counts(sizes, total) if balanced else [int(s * keep_ratio) for s in sizes]
    kept = []
    for c in range(k):
        idx = np.flatnonzero(labels == c)
        d = np.linalg.norm(x[idx] - centers[c], axis=1)
        order = np.argsort(-d if largest else d, kind="stable")
        kept.append(idx[order[: quota[c]]])
    return np.sort(np.concatenate(kept))


def ema_normalised_scores(raw: np.ndarray, alpha: float = 0.9) -> np.ndarray:
    """raw: (N, K) per-sample, per-time losses (or squared gradient norms), in data order.

    score_n = mean_k raw[n, k] / (ema_k + 1e-8), then ema_k <- alpha ema_k + (1 - alpha) raw[n, k],
    with ema_k = 1 initially (official ``compute_one_sample_scores``). Returns (N,)."""
    raw = np.asarray(raw, dtype=np.float64)
    ema = np.ones(raw.shape[1])
    out = np.empty(raw.shape[0])
    for i in range(raw.shape[0]):
        out[i] = np.mean(raw[i] / (ema + 1e-8))
        ema = alpha * ema + (1.0 - alpha) * raw[i]
    return out


def score_times(num_t: int = 8) -> Tensor:
    """t_k = linspace(0, 1, num_t + 2)[1:-1] (interior points)."""
    return torch.linspace(0, 1, num_t + 2)[1:-1]


def fm_raw_scores(
    model: torch.nn.Module,
    latents: Tensor,
    labels: Tensor | None,
    *,
    kind: str = "loss",
    num_t: int = 8,
    num_noise: int = 2,
    seed: int = 2025,
    batch_size: int = 256,
    progress: Callable[[int], None] | None = None,
) -> np.ndarray:
    """Per-sample FM loss (kind="loss") or squared parameter-gradient norm (kind="grad") at each
    interior time, averaged over ``num_noise`` noise draws shared by all samples.

    latents: (N, C, h, w); labels: (N,) or None. Returns (N, num_t) float64."""
    from torch.func import functional_call, grad, vmap

    from icml26.methods.lfm.flow import fm_loss_per_sample

    if kind not in ("loss", "grad"):
        raise ValueError(f"kind must be 'loss' or 'grad', got {kind!r}")
    model = model.eval()
    ts = score_times(num_t)
    g = torch.Generator().manual_seed(seed)
    bank = torch.randn((num_noise, *latents.shape[1:]), generator=g)  # (M, C, h, w) shared noise
    n = latents.shape[0]
    out = np.zeros((n, num_t))
    params = {k: v.detach() for k, v in model.named_parameters()}
    buffers = {k: v.detach() for k, v in model.named_buffers()}

    def one_loss(p, x1, y, t, x0):  # single sample -> scalar
        def fwd(xt, tt, yy):
            return functional_call(model, (p, buffers), (xt, tt, yy))

        yy = None if y is None else y[None]
        return fm_loss_per_sample(fwd, x1[None], t[None], x0[None], yy)[0]

    def sq_grad_norm(x1, y, t, x0):
        gr = grad(one_loss)(params, x1, y, t, x0)
        return sum((v * v).sum() for v in gr.values())

    if labels is None:
        vg = vmap(lambda x1, t, x0: sq_grad_norm(x1, None, t, x0), in_dims=(0, None, None))
    else:
        vg = vmap(sq_grad_norm, in_dims=(0, 0, None, None))
    for s in range(0, n, batch_size):
        x1 = latents[s : s + batch_size]
        y = None if labels is None else labels[s : s + batch_size]
        b = x1.shape[0]
        for k, tk in enumerate(ts):
            acc = torch.zeros(b, dtype=torch.float64)
            for m in range(num_noise):
                if kind == "loss":
                    with torch.no_grad():
                        acc += fm_loss_per_sample(model, x1, tk.expand(b), bank[m].expand_as(x1), y).double()
                else:
                    acc += vg(x1, tk, bank[m]).double() if y is None else vg(x1, y, tk, bank[m]).double()
            out[s : s + b, k] = (acc / num_noise).numpy()
        if progress is not None:
            progress(b)
    return out


def select_by_score(scores: np.ndarray, keep_ratio: float, *, largest: bool = True) -> np.ndarray:
    """Keep the top (or bottom) fraction by score; ties broken by index. Returns sorted indices."""
    n = len(scores)
    k = num_kept(n, keep_ratio)
    order = np.argsort(-scores if largest else scores, kind="stable")
    return np.sort(order[:k])
