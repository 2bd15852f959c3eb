"""The CapKV capacity objective and its exact greedy maximiser (the reference for small T).

Objective (capkv.md, "Tractable selection" step 2), per KV head, summed over the query
heads g of its group (each reads the head as its own channel):

    F(C) = sum_g [ log det(rho_g I + sum_{i in C} w_{g,i} u_i u_i^T) - log det(rho_g I) ]

F is monotone submodular with F({}) = 0, so the greedy maximiser is within (1 - 1/e) of the
optimum. ``greedy_logdet`` is exact greedy (every step takes the true best marginal gain
sum_g log(1 + w_{g,i} u_i^T A_g^{-1} u_i), matrix determinant lemma), kept O(T D) per step with
Sherman-Morrison updates of A_g^{-1}; ``brute_force_logdet`` enumerates all subsets (tiny T).
The one-shot leverage score of ``scoring.score_capkv`` is the first-order approximation of the
greedy gains against the whole pool; ``capacity`` measures how close it gets.
"""

from __future__ import annotations

import itertools

import torch


def ridge_of(u: torch.Tensor, w: torch.Tensor, ridge: float, relative: bool = True) -> torch.Tensor:
    """rho per (..., g): u (..., T, D), w (..., g, T) -> (..., g)."""
    if not relative:
        return torch.full(w.shape[:-1], float(ridge), dtype=torch.float64)
    d = u.shape[-1]
    tr = torch.einsum("...gt,...td->...g", w.double(), u.double() ** 2)  # trace of sum_j w_j u_j u_j^T
    return (ridge * tr / d).clamp_min(1e-300)


def capacity(u: torch.Tensor, w: torch.Tensor, idx, rho: torch.Tensor) -> float:
    """F(C) for one head: u (T, D), w (g, T), idx the kept tokens, rho (g,). float64."""
    u = u.double()
    w = w.double()
    idx = torch.as_tensor(list(idx), dtype=torch.long)
    d = u.shape[-1]
    total = 0.0
    for g in range(w.shape[0]):
        uc = u[idx]
        m = (uc * w[g, idx, None]).T @ uc  # (D, D)
        a = m / rho[g] + torch.eye(d, dtype=torch.float64)
        total += float(torch.linalg.slogdet(a)[1])
    return total


def greedy_logdet(
    u: torch.Tensor, w: torch.Tensor, n_select: int, rho: torch.Tensor, initial: torch.Tensor | None = None
) -> torch.Tensor:
    """Exact greedy maximisation of F, batched over heads.

    u: (H, T, D) capacity vectors (values); w: (H, g, T) weights per query head of the group;
    n_select: how many tokens to add; rho: (H, g); initial: (T,) bool tokens already in C.
    Returns (H, n_select) indices in the order picked. float64 throughout.
    """
    u = u.double()
    w = w.double()
    h, t, d = u.shape
    eye = torch.eye(d, dtype=torch.float64)
    ainv = (eye / rho[..., None, None]).clone()  # (H, g, D, D)
    chosen = torch.zeros(h, t, dtype=torch.bool)
    if initial is not None and bool(initial.any()):
        ui = u[:, initial]  # (H, n0, D)
        wi = w[:, :, initial]  # (H, g, n0)
        a = torch.einsum("hgn,hnd,hne->hgde", wi, ui, ui) + rho[..., None, None] * eye
        ainv = torch.linalg.inv(a)
        chosen[:, initial] = True
    z = u[:, None] @ ainv  # (H, g, T, D)
    lev = w * (z * u[:, None]).sum(-1)  # (H, g, T): w_i u_i^T A^{-1} u_i
    picks = torch.empty(h, n_select, dtype=torch.long)
    ar = torch.arange(h)
    for s in range(n_select):
        gain = torch.log1p(lev.clamp_min(0)).sum(1)  # (H, T): matrix determinant lemma
        gain = gain.masked_fill(chosen, float("-inf"))
        j = gain.argmax(-1)  # (H,)
        picks[:, s] = j
        chosen[ar, j] = True
        uj = u[ar, j]  # (H, D)
        wj = w[ar, :, j]  # (H, g)
        a = torch.einsum("hgde,he->hgd", ainv, uj)  # A^{-1} u_j
        denom = 1 + wj * (a * uj[:, None]).sum(-1)  # (H, g)
        ainv = ainv - (wj / denom)[..., None, None] * a[..., :, None] * a[..., None, :]  # Sherman-Morrison
        c = (u[:, None] @ a.unsqueeze(-1)).squeeze(-1)  # (H, g, T): u_i^T A^{-1} u_j
        lev = lev - w * (wj / denom)[..., None] * c * c
    return picks


def naive_greedy_logdet(u: torch.Tensor, w: torch.Tensor, n_select: int, rho: torch.Tensor) -> list[int]:
    """Greedy for ONE head recomputing F from scratch (slogdet) for every candidate: the oracle."""
    chosen: list[int] = []
    for _ in range(n_select):
        best, best_val = -1, -float("inf")
        for i in range(u.shape[0]):
            if i in chosen:
                continue
            v = capacity(u, w, chosen + [i], rho)
            if v > best_val + 1e-12:
                best, best_val = i, v
        chosen.append(best)
    return chosen


def brute_force_logdet(
    u: torch.Tensor, w: torch.Tensor, n_select: int, rho: torch.Tensor
) -> tuple[tuple[int, ...], float]:
    """The optimal subset of size n_select for one head (enumerates all C(T, n) subsets)."""
    best, best_val = (), -float("inf")
    for sub in itertools.combinations(range(u.shape[0]), n_select):
        v = capacity(u, w, sub, rho)
        if v > best_val:
            best, best_val = sub, v
    return best, best_val
