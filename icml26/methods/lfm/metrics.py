"""Sample-quality and stability metrics in the feature space of a network trained here.

NOT Inception FID: the embedding is the penultimate layer of the classifier trained by
``train-lfm`` on the same data set (no Inception weights ship offline). Records name it
``feature_net``.

  frechet_distance   ||mu_r - mu_g||^2 + Tr(S_r + S_g - 2 (S_r S_g)^{1/2})   (Heusel et al. 2017)
  precision_recall   k-NN manifold estimate (Kynkaenniemi et al. 2019, k = 3): precision = share of
                     generated points inside some real point's k-NN ball; recall = the converse.
  paired_cosine      mean cosine similarity of matched rows (same noise seed), and of a fixed
                     derangement of the rows (the "unmatched" baseline of the paper).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor


def frechet_distance(real: np.ndarray | Tensor, fake: np.ndarray | Tensor) -> float:
    """Fréchet distance between Gaussians fitted to two feature sets (N, D) and (M, D)
    (the formula of ``_fid_from_stats``, which the bootstrap shares)."""
    a = np.asarray(real, dtype=np.float64)
    b = np.asarray(fake, dtype=np.float64)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"feature sets must be (N, D) and (M, D), got {a.shape} and {b.shape}")
    if min(len(a), len(b)) < 2:
        raise ValueError("need at least 2 samples per set")
    return _fid_from_stats(a.mean(0), np.cov(a, rowvar=False), b.mean(0), np.cov(b, rowvar=False))


def _knn_radii(x: Tensor, k: int) -> Tensor:
    d = torch.cdist(x, x)  # (N, N)
    return d.kthvalue(k + 1, dim=1).values  # k+1: the point itself is at distance 0


def precision_recall(real: np.ndarray | Tensor, fake: np.ndarray | Tensor, k: int = 3) -> tuple[float, float]:
    """Improved precision and recall (k-NN balls). Returns (precision, recall) in [0, 1]."""
    r = torch.as_tensor(np.asarray(real), dtype=torch.float64)
    f = torch.as_tensor(np.asarray(fake), dtype=torch.float64)
    if min(len(r), len(f)) <= k:
        raise ValueError(f"need more than k={k} samples per set")
    rr, rf = _knn_radii(r, k), _knn_radii(f, k)
    d = torch.cdist(f, r)  # (M, N)
    precision = (d <= rr[None]).any(1).double().mean()
    recall = (d.T <= rf[None]).any(1).double().mean()
    return float(precision), float(recall)


def paired_cosine(a: Tensor, b: Tensor, seed: int = 0, shift: int | None = None) -> tuple[float, float]:
    """(mean cosine of matched rows, mean cosine after a fixed derangement of b's rows).

    The derangement is the cyclic shift i -> i + shift (mod n); ``shift`` None draws it from ``seed``.
    For class-conditional samples with labels i mod K, shift = K pairs each sample with one of the
    SAME class from other noise (the stricter baseline sample-lfm reports)."""
    a = a.flatten(1).double()
    b = b.flatten(1).double()
    if a.shape != b.shape:
        raise ValueError(f"shapes differ: {tuple(a.shape)} vs {tuple(b.shape)}")
    matched = torch.nn.functional.cosine_similarity(a, b, dim=1).mean()
    n = a.shape[0]
    g = torch.Generator().manual_seed(seed)
    k = 1 + int(torch.randint(max(n - 1, 1), (1,), generator=g)) if shift is None else int(shift) % n
    if n > 1 and k == 0:
        raise ValueError(f"shift {shift} is a multiple of n = {n}: no derangement")
    perm = (torch.arange(n) + k) % n  # a shift: no fixed point for n > 1
    unmatched = torch.nn.functional.cosine_similarity(a, b[perm], dim=1).mean()
    return float(matched), float(unmatched)


def _fid_from_stats(mu1, s1, mu2, s2) -> float:
    """Fréchet distance from means and covariances, via the symmetric form
    Tr (S1 S2)^{1/2} = sum sqrt(eig(S1^{1/2} S2 S1^{1/2})) (exact for PSD S1, S2; no complex sqrtm)."""
    w, v = np.linalg.eigh(s1)
    r1 = (v * np.sqrt(np.clip(w, 0.0, None))) @ v.T
    ev = np.linalg.eigvalsh(r1 @ s2 @ r1)
    return float(((mu1 - mu2) ** 2).sum() + np.trace(s1) + np.trace(s2) - 2.0 * np.sqrt(np.clip(ev, 0.0, None)).sum())


def bootstrap_fid(
    real: np.ndarray | Tensor, fakes: "list[np.ndarray | Tensor]", n_boot: int = 200, seed: int = 0
) -> np.ndarray:
    """Paired bootstrap of the Fréchet distance.

    real (N, D); fakes: a list of (M, D) feature sets whose rows are PAIRED (row i of every set comes
    from the same noise seed). Each replicate resamples the real rows and, with one shared index
    vector, the rows of every fake set, so differences and ratios between the sets keep their pairing.
    Returns (n_boot, len(fakes)) FIDs; percentiles of a column give that set's interval, percentiles of
    a ratio of columns the interval of the ratio."""
    r = np.asarray(real, dtype=np.float64)
    fs = [np.asarray(f, dtype=np.float64) for f in fakes]
    if not fs or any(f.shape != fs[0].shape for f in fs):
        raise ValueError("fakes must be a non-empty list of equally shaped (M, D) arrays")
    g = np.random.default_rng(seed)
    out = np.empty((n_boot, len(fs)))
    for b in range(n_boot):
        ir = g.integers(0, len(r), len(r))
        ig = g.integers(0, len(fs[0]), len(fs[0]))
        rb = r[ir]
        mu_r, s_r = rb.mean(0), np.cov(rb, rowvar=False)
        for j, f in enumerate(fs):
            fb = f[ig]
            out[b, j] = _fid_from_stats(mu_r, s_r, fb.mean(0), np.cov(fb, rowvar=False))
    return out
