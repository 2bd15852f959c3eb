"""Selection: the per-head budget (kvpress' rule), top-B with protected sinks and recent window,
and head-adaptive budgets (Ada-KV's allocation, Feng et al., 2024)."""

from __future__ import annotations

import math

import torch


def n_kept(t: int, compression_ratio: float) -> int:
    """Budget per head: max(1, floor(T (1 - ratio))) (kvpress' rule, so counts match)."""
    return max(1, int(t * (1.0 - compression_ratio)))


def select_indices(scores: torch.Tensor, n_keep: int, *, sink_tokens: int = 0, window_tokens: int = 0) -> torch.Tensor:
    """Indices (B, H, n_keep), ascending, of the tokens kept per head.

    The first ``sink_tokens`` and the last ``window_tokens`` are always kept (if the budget
    allows: sinks first, then the most recent), the rest of the budget goes to the top scores."""
    b, h, t = scores.shape
    if not 1 <= n_keep <= t:
        raise ValueError(f"n_keep must be in [1, {t}], got {n_keep}")
    sinks = min(sink_tokens, n_keep, t)
    window = max(0, min(window_tokens, n_keep - sinks, t - sinks))
    s = scores.float().clone()
    s = torch.nan_to_num(s, nan=float("-inf"))
    pos = torch.arange(t, device=s.device)
    forced = (pos < sinks) | (pos >= t - window)
    big = torch.finfo(torch.float32).max
    s[..., forced] = big
    idx = torch.topk(s, n_keep, dim=-1).indices
    return idx.sort(dim=-1).values


def select_adaptive(
    scores: torch.Tensor, n_keep: int, *, sink_tokens: int = 0, window_tokens: int = 0, floor: float = 0.2
) -> tuple[torch.Tensor, torch.Tensor]:
    """Head-adaptive selection: the layer keeps ``H * n_keep`` entries in total, shared unevenly.

    Every head keeps its sinks and recent window (as ``select_indices``) and at least
    ``floor`` of its uniform share of the free budget (Ada-KV's safeguard, alpha = 0.2); the
    rest of the layer's free budget goes to the highest scores over all heads of the layer
    (Ada-KV's allocation: a global top-k across heads, so heads whose scores are concentrated
    give budget to heads whose scores are spread).  With CapKV's leverage scores a score is the
    token's marginal capacity gain in its head, and the layer's capacity is the sum over heads,
    so the global top-k is the one-shot greedy maximiser of the layer's total capacity.

    scores (B, H, T) -> (idx, keep), both (B, H, Lmax): ascending kept positions per head,
    padded with position 0 where ``keep`` is False; Lmax = the largest head's count."""
    b, h, t = scores.shape
    if not 1 <= n_keep <= t:
        raise ValueError(f"n_keep must be in [1, {t}], got {n_keep}")
    if not 0.0 <= floor <= 1.0:
        raise ValueError(f"floor must be in [0, 1], got {floor}")
    sinks = min(sink_tokens, n_keep, t)
    window = max(0, min(window_tokens, n_keep - sinks, t - sinks))
    pos = torch.arange(t, device=scores.device)
    forced = (pos < sinks) | (pos >= t - window)
    free = n_keep - int(forced.sum())
    s = torch.nan_to_num(scores.float(), nan=float("-inf")).masked_fill(forced, float("-inf"))
    kept = forced.expand(b, h, t).clone()
    if free > 0:
        m = int(math.floor(floor * free))
        order = s.argsort(dim=-1, descending=True)  # (B, H, T)
        rank = torch.empty_like(order)
        rank.scatter_(-1, order, pos.expand(b, h, t))
        big = torch.finfo(torch.float32).max
        g = s.masked_fill((rank < m) & ~forced, big)  # each head's guaranteed share first
        top = g.reshape(b, h * t).topk(free * h, dim=-1).indices
        sel = torch.zeros(b, h * t, dtype=torch.bool, device=scores.device)
        sel.scatter_(1, top, True)
        kept |= sel.view(b, h, t)
    lmax = int(kept.sum(-1).max())
    key = torch.where(kept, pos, t + pos)
    key = key.sort(dim=-1).values[..., :lmax]
    keep = key < t
    return torch.where(keep, key, torch.zeros_like(key)), keep
