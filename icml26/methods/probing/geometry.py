"""Geometry of sentence representations: leave-one-out centroids, matched-pair
similarities and the Information Imbalance with a delete-a-group jackknife.

All functions take NumPy arrays and compute in float64 (the official code of
Acevedo, Laio & Baroni, arXiv 2601.04765, also moves to float64 so that rank ties
are broken by the data, not by rounding).

Notation: ``x`` is ``(N, d)``, one row per sentence; ``labels`` is ``(N,)`` integer
group ids (a syntax template, or a meaning).
"""

from __future__ import annotations

import numpy as np


def _as2d(x: np.ndarray, name: str = "x") -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError(f"{name} must be 2-D (N, d), got shape {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{name} has non-finite values")
    return x


def _labels(labels: np.ndarray, n: int) -> np.ndarray:
    labels = np.asarray(labels)
    if labels.shape != (n,):
        raise ValueError(f"labels must have shape ({n},), got {labels.shape}")
    return np.unique(labels, return_inverse=True)[1].reshape(n)


def group_centroids(x: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean of each group.

    Returns ``(centroids (G, d), counts (G,), index (N,))`` where ``index[i]`` is the
    row of ``centroids`` holding sentence i's group (groups in sorted label order)."""
    x = _as2d(x)
    idx = _labels(labels, x.shape[0])
    g = int(idx.max()) + 1
    sums = np.zeros((g, x.shape[1]))
    np.add.at(sums, idx, x)
    counts = np.bincount(idx, minlength=g)
    return sums / counts[:, None], counts, idx


def loo_centroids(x: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Leave-one-out centroid of every sentence's group, ``(N, d)``.

    c_i = (n_g * c_g - x_i) / (n_g - 1): the mean of the *other* members of i's group
    (official code, ``utils.load_and_subtract_syn_group_averages``). Raises ValueError
    when a group has a single member (its leave-one-out centroid is undefined).

    Note: for a member of the group, x_i - c_i = n_g / (n_g - 1) * (x_i - c_g), so with
    scale-free distances (cosine, normalized L2) the subtraction equals subtracting the
    full group mean; the leave-one-out form matters when a centroid is compared to, or
    assigned to, another sentence (the shuffled control)."""
    x = _as2d(x)
    cents, counts, idx = group_centroids(x, labels)
    if np.any(counts < 2):
        raise ValueError(
            f"{int(np.sum(counts < 2))} group(s) have a single member: a leave-one-out centroid needs at least 2"
        )
    n = counts[idx][:, None].astype(np.float64)
    return (n * cents[idx] - x) / (n - 1.0)


def shuffled_assignment(centroids: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Shuffled-label control: sentence i receives the centroid of a random other
    sentence (a permutation of the rows), as the official code's ``center_flag == -1``."""
    perm = rng.permutation(centroids.shape[0])
    return centroids[perm]


def cosine_matrix(x: np.ndarray) -> np.ndarray:
    """Cosine similarity of every pair of rows, ``(N, N)``. Zero rows -> ValueError."""
    x = _as2d(x)
    norms = np.linalg.norm(x, axis=1)
    if np.any(norms == 0):
        raise ValueError("a representation has zero norm; cosine similarity is undefined")
    xn = x / norms[:, None]
    s = xn @ xn.T
    return np.clip(s, -1.0, 1.0)


def normalized_l2(x: np.ndarray) -> np.ndarray:
    """|| x_i/||x_i|| - x_j/||x_j|| || = sqrt(2 - 2 cos): the official distance, ``(N, N)``."""
    return np.sqrt(np.maximum(2.0 - 2.0 * cosine_matrix(x), 0.0))


def partner_masks(syntax: np.ndarray, meaning: np.ndarray) -> dict[str, np.ndarray]:
    """Boolean ``(N, N)`` masks of the partner kinds (the diagonal is never a partner).

    syntax:    same syntax, different meaning (syntax twins)
    semantic:  same meaning, different syntax (paraphrases)
    unmatched: different syntax and different meaning (baseline)"""
    syntax, meaning = np.asarray(syntax), np.asarray(meaning)
    same_syn = syntax[:, None] == syntax[None, :]
    same_sem = meaning[:, None] == meaning[None, :]
    return {"syntax": same_syn & ~same_sem, "semantic": same_sem & ~same_syn, "unmatched": ~same_syn & ~same_sem}


def mean_partner_similarity(sim: np.ndarray, mask: np.ndarray) -> float:
    """Mean over sentences (that have a partner) of the mean similarity to their partners.

    sim, mask: (N, N). Each sentence weighs the same however many partners it has."""
    counts = mask.sum(axis=1)
    has = counts > 0
    if not np.any(has):
        return float("nan")
    row = np.where(mask, sim, 0.0).sum(axis=1)[has] / counts[has]
    return float(row.mean())


def information_imbalance(d_a: np.ndarray, d_b: np.ndarray) -> float:
    """Information Imbalance Delta(A -> B) with k = 1 (Glielmo et al., PNAS Nexus 2022, Eq. 1).

    d_a, d_b: (N, N) distance matrices of the same N points in spaces A and B (diagonal
    ignored). Steps (as the official ``geometry.py``):
      1. rank each row of d_a and d_b with ties ranked "min" (1 = nearest, self excluded);
      2. for every j with rank_A(i, j) = 1 (all tied nearest neighbours), take rank_B(i, j) - 1;
      3. Delta = 2 * mean / (N - 2).
    The N - 2 normalisation (the official one, for N - 1 neighbours per row) makes
    identical spaces give exactly 0 and independent spaces 1 in expectation.
    ~0: A's nearest neighbours are also near in B (A predicts B); ~1: no information."""
    d_a = np.asarray(d_a, dtype=np.float64)
    d_b = np.asarray(d_b, dtype=np.float64)
    n = d_a.shape[0]
    if d_a.shape != (n, n) or d_b.shape != (n, n):
        raise ValueError(f"distance matrices must both be (N, N), got {d_a.shape} and {d_b.shape}")
    if n < 3:
        raise ValueError(f"Information Imbalance needs at least 3 points, got {n}")
    eye = np.eye(n, dtype=bool)
    da = np.where(eye, np.inf, d_a)
    db = np.where(eye, np.inf, d_b)
    nn_mask = da == da.min(axis=1, keepdims=True)  # (N, N) tied nearest neighbours in A
    nn_first = np.argmax(nn_mask, axis=1)  # (N,)
    rows = np.arange(n)
    # rank_B(i, j) - 1 = number of points strictly closer to i than j in B ("min" ties)
    rel = (db < db[rows, nn_first][:, None]).sum(axis=1).astype(np.float64)  # (N,)
    ties = np.flatnonzero(nn_mask.sum(axis=1) > 1)
    for i in ties:  # rare with real-valued data
        js = np.flatnonzero(nn_mask[i])
        rel[i] = float(np.mean([(db[i] < db[i, j]).sum() for j in js]))
    return float(2.0 * rel.mean() / (n - 2))


def _jackknife_replicates_exact(d_a: np.ndarray, d_b: np.ndarray, blocks: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Delta recomputed on the submatrices without each block (any ties handled)."""
    reps = np.empty(len(ids))
    for k, b in enumerate(ids):
        keep = blocks != b
        reps[k] = information_imbalance(d_a[np.ix_(keep, keep)], d_b[np.ix_(keep, keep)])
    return reps


def _jackknife_replicates_fast(
    d_a: np.ndarray, d_b: np.ndarray, blocks: np.ndarray, ids: np.ndarray, top_k: int = 48
) -> np.ndarray | None:
    """The same replicates in O(N^2) total, or None when the data have ties in A.

    Removing block b changes a row's nearest neighbour in A only when that neighbour is
    in b (then the next one of the row's sorted top-k list that is not in b is taken), and
    lowers rank_B - 1 by the number of removed points closer in B than the neighbour."""
    n = d_a.shape[0]
    k = min(top_k, n - 1)
    rows = np.arange(n)
    da = np.array(d_a, dtype=np.float64)
    db = np.array(d_b, dtype=np.float64)
    da[rows, rows] = np.inf
    db[rows, rows] = np.inf
    top = np.argpartition(da, k - 1, axis=1)[:, :k] if k < n else np.argsort(da, axis=1)[:, :k]  # (N, k)
    top_d = np.take_along_axis(da, top, axis=1)
    order = np.argsort(top_d, axis=1, kind="stable")
    top, top_d = np.take_along_axis(top, order, axis=1), np.take_along_axis(top_d, order, axis=1)
    if np.any(top_d[:, 1:] == top_d[:, :-1]):
        return None  # ties in A: use the exact path
    nn = top[:, 0]
    thr = db[rows, nn]
    cnt = (db < thr[:, None]).sum(axis=1)  # rank_B(i, nn_i) - 1 on all points
    reps = np.empty(len(ids))
    for j, b in enumerate(ids):
        removed = np.flatnonzero(blocks == b)
        keep = blocks != b
        kept = np.flatnonzero(keep)
        in_b = ~keep
        rel = cnt[kept] - (db[np.ix_(kept, removed)] < thr[kept, None]).sum(axis=1)
        moved = kept[in_b[nn[kept]]]  # rows whose neighbour was removed
        if len(moved):
            ok = keep[top[moved]]  # (m, k)
            if not np.all(ok.any(axis=1)):
                return None
            new_nn = top[moved, np.argmax(ok, axis=1)]
            t = db[moved, new_nn]
            c = ((db[moved] < t[:, None]) & keep[None, :]).sum(axis=1)
            pos = np.searchsorted(kept, moved)
            rel[pos] = c
        m = len(kept)
        reps[j] = 2.0 * rel.mean() / (m - 2)
    return reps


def jackknife_ii(
    d_a: np.ndarray, d_b: np.ndarray, blocks: np.ndarray, level: float = 0.95
) -> tuple[float, float, tuple[float, float]]:
    """Information Imbalance with a delete-a-group jackknife confidence interval.

    blocks: (N,) block id of each point; each block is left out in turn (rows and
    columns) and Delta recomputed. se^2 = (G - 1)/G * sum_g (Delta_(g) - mean)^2
    (Efron & Tibshirani 1993, Sec. 11.5, the delete-d form with G groups).
    Returns ``(Delta on all points, se, (lo, hi))`` with a normal interval at ``level``."""
    from scipy.stats import norm

    theta = information_imbalance(d_a, d_b)
    blocks = np.asarray(blocks)
    ids = np.unique(blocks)
    g = len(ids)
    if g < 2:
        return theta, float("nan"), (float("nan"), float("nan"))
    if np.any([np.sum(blocks != b) < 3 for b in ids]):
        raise ValueError("every jackknife replicate needs at least 3 points")
    reps = _jackknife_replicates_fast(d_a, d_b, blocks, ids)
    if reps is None:
        reps = _jackknife_replicates_exact(d_a, d_b, blocks, ids)
    se = float(np.sqrt((g - 1) / g * np.sum((reps - reps.mean()) ** 2)))
    z = float(norm.ppf(0.5 + level / 2.0))
    return theta, se, (theta - z * se, theta + z * se)


def assign_blocks(groups: np.ndarray, n_blocks: int, rng: np.random.Generator) -> np.ndarray:
    """Jackknife blocks that keep each group (e.g. a meaning) whole: the groups are
    shuffled and dealt round-robin into ``min(n_blocks, #groups)`` blocks. (N,) ints."""
    groups = np.asarray(groups)
    uniq = np.unique(groups)
    order = rng.permutation(len(uniq))
    nb = max(1, min(int(n_blocks), len(uniq)))
    block_of = {uniq[j]: k % nb for k, j in enumerate(order)}
    return np.array([block_of[g] for g in groups], dtype=np.int64)
