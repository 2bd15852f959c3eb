"""The eviction baselines' scores, each as its paper (and kvpress 0.5.5) defines it: StreamingLLM
(Xiao et al., 2024), SnapKV (Li et al., 2024), TOVA (Oren et al., 2024), H2O (Zhang et al., 2023),
key-norm (Devoto et al., 2024), random, Expected Attention (Devoto et al., 2025).

Every rule maps one layer's cache to (B, Hkv, T) scores, higher = keep."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from icml26.methods.kvcache.capkv import _pad_sinks, _without_sinks
from icml26.methods.kvcache.options import ScoreParams
from icml26.methods.kvcache.queries import (
    LayerInputs,
    _group_mean,
    _repeat_kv,
    _window_attention,
    layer_prerope_queries,
    query_statistics,
    rope,
)


def score_streaming(x: LayerInputs, p: ScoreParams) -> torch.Tensor:
    """StreamingLLM (Xiao et al., 2024): recency only; sinks are protected by the selector."""
    b, h, t, _ = x.keys.shape
    return torch.arange(t, dtype=torch.float32, device=x.keys.device).expand(b, h, t).clone()


def score_snapkv(x: LayerInputs, p: ScoreParams) -> torch.Tensor:
    """SnapKV (Li et al., 2024): observation-window attention, pooled (kernel_size), group-mean."""
    hkv = x.keys.shape[1]
    att = _window_attention(x, min(p.window_tokens, max(1, x.keys.shape[2] - 1)))  # (B, Hq, W, T); W < T
    w = att.shape[2]
    s = att[..., : att.shape[-1] - w].mean(2)  # (B, Hq, T - W): keys outside the window
    s = F.avg_pool1d(s, kernel_size=p.kernel_size, padding=p.kernel_size // 2, stride=1)
    s = _group_mean(s, hkv)
    return F.pad(s, (0, w), value=float(s.max()) + 1 if s.numel() else 1.0)  # the window itself is kept


def score_tova(x: LayerInputs, p: ScoreParams) -> torch.Tensor:
    """TOVA (Oren et al., 2024): attention of the last query, averaged over all heads."""
    att = _window_attention(x, 1)[:, :, 0]  # (B, Hq, T)
    s = att.mean(1, keepdim=True)
    return s.expand(-1, x.keys.shape[1], -1).clone()


def score_h2o(x: LayerInputs, p: ScoreParams, chunk: int = 256) -> torch.Tensor:
    """H2O (Zhang et al., 2023): attention accumulated over all prompt queries (heavy hitters)."""
    if x.hidden is None:
        return score_snapkv(x, p)  # decoding: only recent queries are known
    hkv = x.keys.shape[1]
    k = _repeat_kv(x.keys, x.n_heads // hkv).float()  # (B, Hq, T, D)
    t = k.shape[2]
    tq = x.hidden.shape[1]
    off = t - tq
    acc = torch.zeros(k.shape[:3], dtype=torch.float32, device=k.device)
    for s0 in range(0, tq, chunk):
        s1 = min(tq, s0 + chunk)
        q = rope(layer_prerope_queries(x, slice(s0, s1)), x.cos[:, s0:s1], x.sin[:, s0:s1]).float()
        logits = q @ k.transpose(-1, -2) / math.sqrt(k.shape[-1])  # (B, Hq, c, T)
        qpos = torch.arange(s0, s1, device=k.device)[:, None] + off
        mask = torch.arange(t, device=k.device)[None, :] > qpos
        acc += torch.softmax(logits.masked_fill(mask, float("-inf")), dim=-1).sum(2)
    return _group_mean(acc, hkv)


def score_knorm(x: LayerInputs, p: ScoreParams) -> torch.Tensor:
    """Key-norm (Devoto et al., 2024): low L2 norm keys draw attention; score = -||k||."""
    return -torch.linalg.vector_norm(x.keys.float(), dim=-1)


def score_random(x: LayerInputs, p: ScoreParams) -> torch.Tensor:
    """Uniformly random scores (seeded per layer)."""
    g = torch.Generator(device="cpu").manual_seed(p.seed * 1000003 + x.layer_idx)
    return torch.rand(x.keys.shape[:3], generator=g).to(x.keys.device)


def score_expected_attention(x: LayerInputs, p: ScoreParams) -> torch.Tensor:
    """Expected Attention (Devoto et al., 2025): E_q[attention] under Gaussian future queries,
    times ||v||; softmax over tokens, group mean. Its queries are always its own paper's
    statistics (pre-RoPE prompt queries rotated by the averaged future RoPE), whatever CapKV's
    ``query_source``; during decoding (no prompt hidden states) the recent-query window."""
    x, s0 = _without_sinks(x, p)
    hkv = x.keys.shape[1]
    d = x.head_dim
    mu, cov = query_statistics(x, p, covariance=True, source="future-rope")  # the paper's (and kvpress') statistics
    k = _repeat_kv(x.keys, x.n_heads // hkv).float()
    logits = (k @ mu.unsqueeze(-1)).squeeze(-1) / math.sqrt(d)
    logits = logits + ((k @ cov) * k).sum(-1) / (2 * d)
    s = _group_mean(torch.softmax(logits, dim=-1), hkv)
    return _pad_sinks(s * torch.linalg.vector_norm(x.values.float(), dim=-1), s0)
