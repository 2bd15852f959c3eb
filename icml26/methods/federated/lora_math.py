"""The weight math of federated LoRA: split, aggregation, SVD redistribution, OOD weighting.

Conventions (peft): one LoRA module is ``A: (r, d_in)`` and ``B: (d_out, r)``; its weight update
is ``scaling * B @ A`` with ``scaling = alpha / r``. An adapter is ``{module name: (A, B)}``.

Het-CPFLoRA (docs/fed-lora.md, from the official code tongxin-tx/Het-CPFLoRA):
- split by rank slots: generalized ``(B[:, :r_s], A[:r_s])``, personal ``(B[:, r_s:], A[r_s:])``;
- server: ``dW = sum_i w_i dW_i`` with ``w_i = r_s,i / sum_j r_s,j`` (or data size), then per client
  the truncated SVD of ``dW`` to ``r_s,j``: ``B_s = U_r S_r``, ``A_s = V_r^T``;
- inference: ``sigma = mean_k (1 - |s_k - s(x)| / max(s_k, s(x)))`` over the training prompts'
  scores ``s_k`` (``s = exp(mean NLL) / n_tokens``); ``w_p = sigma max(r_s, r_p) / r``, ``w_s = 1 - w_p``.
The SVD is computed from the stacked factors (QR of both sides, SVD of the small core), which is
exactly the SVD of the dense sum without forming it (``svd_of_sum``; tested against the dense one).
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import Tensor


def split_adapter(A: Tensor, B: Tensor, shared_rank: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Rank-slot split of one LoRA module: ``(A_s, B_s, A_p, B_p)``.

    A: (r, d_in), B: (d_out, r); shared_rank r_s in [0, r]. A_s: (r_s, d_in), B_s: (d_out, r_s),
    A_p: (r - r_s, d_in), B_p: (d_out, r - r_s). ValueError for a bad rank or shapes."""
    r = A.shape[0]
    if B.shape[1] != r:
        raise ValueError(f"A has rank {r} but B has {B.shape[1]} columns")
    if not 0 <= shared_rank <= r:
        raise ValueError(f"shared_rank must be in [0, {r}], got {shared_rank}")
    return A[:shared_rank], B[:, :shared_rank], A[shared_rank:], B[:, shared_rank:]


def merge_adapter(A_s: Tensor, B_s: Tensor, A_p: Tensor, B_p: Tensor) -> tuple[Tensor, Tensor]:
    """Inverse of :func:`split_adapter`: ``A = [A_s; A_p]``, ``B = [B_s | B_p]``."""
    return torch.cat([A_s, A_p], 0), torch.cat([B_s, B_p], 1)


def weighted_sum_dense(factors: Sequence[tuple[Tensor, Tensor]], weights: Sequence[float]) -> Tensor:
    """``sum_i w_i B_i @ A_i``: (d_out, d_in), dense (the oracle of :func:`svd_of_sum`)."""
    out = None
    for (A, B), w in zip(factors, weights):
        t = float(w) * (B.double() @ A.double())
        out = t if out is None else out + t
    return out.to(factors[0][0].dtype)


def svd_of_sum(factors: Sequence[tuple[Tensor, Tensor]], weights: Sequence[float]) -> tuple[Tensor, Tensor, Tensor]:
    """Thin SVD ``U, S, Vh`` of ``sum_i w_i B_i A_i`` without forming the dense sum.

    factors: ``(A_i: (r_i, d_in), B_i: (d_out, r_i))``. Stacked ``Bc = [w_1 B_1 | ...]`` (d_out, R) and
    ``Ac = [A_1; ...]`` (R, d_in), R = sum r_i: QR of ``Bc`` and ``Ac^T``, SVD of the (R, R) core.
    Returns U: (d_out, k), S: (k,), Vh: (k, d_in), k = min(R, d_out, d_in); float64."""
    Bc = torch.cat([float(w) * B.double() for (A, B), w in zip(factors, weights)], 1)  # (d_out, R)
    Ac = torch.cat([A.double() for A, _ in factors], 0)  # (R, d_in)
    Q1, R1 = torch.linalg.qr(Bc)  # (d_out, k1), (k1, R)
    Q2, R2 = torch.linalg.qr(Ac.T)  # (d_in, k2), (k2, R)
    U_, S, Vh_ = torch.linalg.svd(R1 @ R2.T, full_matrices=False)  # core (k1, k2)
    return Q1 @ U_, S, Vh_ @ Q2.T


def truncate_svd(U: Tensor, S: Tensor, Vh: Tensor, rank: int, *, scale: float = 1.0) -> tuple[Tensor, Tensor]:
    """Rank-``rank`` factors of ``U diag(S) Vh`` with S folded into B (the official code):
    ``A = Vh[:rank]`` (rank, d_in), ``B = U[:, :rank] S[:rank] / scale`` (d_out, rank).

    ``scale``: the receiving client's LoRA scaling (alpha / r), so that ``scale * B @ A`` is the
    truncated sum. Ranks beyond the SVD's are zero-padded (the sum has lower rank: exact)."""
    k = min(rank, S.numel())
    A = Vh[:k]
    B = U[:, :k] * (S[:k] / scale)
    if k < rank:
        A = torch.cat([A, A.new_zeros(rank - k, A.shape[1])], 0)
        B = torch.cat([B, B.new_zeros(B.shape[0], rank - k)], 1)
    return A, B


def zero_pad(A: Tensor, B: Tensor, rank: int) -> tuple[Tensor, Tensor]:
    """HetLoRA's padding of a rank-r module to ``rank`` >= r with zero slots."""
    r = A.shape[0]
    if rank < r:
        raise ValueError(f"cannot pad rank {r} down to {rank}")
    return (torch.cat([A, A.new_zeros(rank - r, A.shape[1])], 0), torch.cat([B, B.new_zeros(B.shape[0], rank - r)], 1))


def stack(factors: Sequence[tuple[Tensor, Tensor]], weights: Sequence[float]) -> tuple[Tensor, Tensor]:
    """FLoRA's stacking: ``A = [A_1; ...]`` (R, d_in), ``B = [w_1 B_1 | ...]`` (d_out, R), so that
    ``B @ A = sum_i w_i B_i A_i`` exactly."""
    return torch.cat([A for A, _ in factors], 0), torch.cat([float(w) * B for (_, B), w in zip(factors, weights)], 1)


def normalized(weights: Sequence[float]) -> list[float]:
    s = float(sum(weights))
    if s <= 0:
        raise ValueError(f"aggregation weights must have a positive sum, got {list(weights)}")
    return [float(w) / s for w in weights]


def prompt_score(mean_nll: float, n_tokens: int) -> float:
    """The official OOD score of a prompt: ``exp(mean token NLL) / n_tokens`` (its perplexity
    per token)."""
    return math.exp(min(mean_nll, 700.0)) / max(1, n_tokens)


def ood_similarity(score: float, reference: Sequence[float]) -> float:
    """sigma in [0, 1]: ``mean_k (1 - |s_k - s| / max(s_k, s))`` over the reference scores (the
    client's training prompts). 1: the prompt looks like the training prompts; toward 0: it does
    not. ValueError on an empty reference or a negative score."""
    if not reference:
        raise ValueError("ood_similarity needs at least one reference score")
    if score < 0 or any(r < 0 for r in reference):
        raise ValueError("prompt scores are perplexities per token, >= 0")
    tot = 0.0
    for r in reference:
        m = max(r, score)
        tot += 1.0 - (abs(r - score) / m if m > 0 else 0.0)
    return tot / len(reference)


def part_weights(sigma: float, shared_rank: int, personal_rank: int, mode: str = "sigma") -> tuple[float, float]:
    """(w_s, w_p): the scales of the generalized and personal slots at inference.

    mode ``sigma-official``: ``w_p = sigma max(r_s, r_p) / r``, ``w_s = 1 - w_p`` (the official code:
    the adapter shrinks, since training used 1 / 1); ``sigma`` (default): the same pair divided by
    its larger entry, so the dominant part keeps its trained scale; ``fixed``: (1, 1), the
    adapter as trained; ``half``: (0.5, 0.5)."""
    if mode == "fixed":
        return 1.0, 1.0
    if mode == "half":
        return 0.5, 0.5
    r = shared_rank + personal_rank
    w_p = sigma * max(shared_rank, personal_rank) / r if personal_rank > 0 else 0.0
    w_s = 1.0 - w_p
    if mode == "sigma-official":
        return w_s, w_p
    if mode == "sigma":
        m = max(w_s, w_p)
        return w_s / m, w_p / m
    raise ValueError(f"unknown OOD weighting mode {mode!r}; valid: sigma, sigma-official, fixed, half")
