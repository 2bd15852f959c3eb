"""What one attention layer exposes at compression time (``LayerInputs``), and the queries the
scoring rules read from it: pre-RoPE queries, the recent post-RoPE window, RoPE averaged over
future positions, the prompt's query moments and the window's softmax attention.

LLaMA-style attention (q_proj, optional q_norm, RoPE as ``x cos + rotate_half(x) sin``), as in
transformers' LLaMA / Mistral / Qwen2/3.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

from icml26.methods.kvcache.options import ScoreParams


@dataclass
class LayerInputs:
    """What one attention layer exposes at compression time.

    keys, values: (B, Hkv, T, D) cached (post-RoPE) keys and values.
    hidden: (B, Tq, hidden) input of the attention layer for the last Tq tokens (Tq = T at prefill),
        or None during decoding (then ``queries`` must hold recent post-RoPE queries).
    module: the attention module (q_proj, head_dim, config).
    cos, sin: (B, Tq, D) RoPE tables of those Tq tokens; rotary: the model's rotary embedding
        (for averaged future rotations); queries: (B, Hq, W, D) recent post-RoPE queries.
    """

    keys: torch.Tensor
    values: torch.Tensor
    module: torch.nn.Module
    hidden: torch.Tensor | None = None
    cos: torch.Tensor | None = None
    sin: torch.Tensor | None = None
    rotary: Callable | None = None
    queries: torch.Tensor | None = None
    layer_idx: int = 0
    q_proj_out: torch.Tensor | None = (
        None  # (B, Tq, Hq*D): q_proj(hidden) saved during the forward, so scoring reuses it
    )

    @property
    def n_heads(self) -> int:
        return int(self.module.config.num_attention_heads)

    @property
    def head_dim(self) -> int:
        return int(self.keys.shape[-1])


# ----------------------------------------------------------------------------- query helpers


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def prerope_queries(module: torch.nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    """(B, Tq, hidden) -> (B, Hq, Tq, D) queries before RoPE (LLaMA-style q_proj, optional q_norm)."""
    b, t, _ = hidden.shape
    hq = int(module.config.num_attention_heads)
    d = int(module.head_dim)
    q = module.q_proj(hidden).view(b, t, hq, d).transpose(1, 2)  # (B, Hq, Tq, D)
    if hasattr(module, "q_norm"):
        q = module.q_norm(q)
    return q


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Apply RoPE: x (B, H, T, D), cos/sin (B, T, D)."""
    return x * cos.unsqueeze(1) + _rotate_half(x) * sin.unsqueeze(1)


def layer_prerope_queries(x: LayerInputs, rows) -> torch.Tensor:
    """Pre-RoPE queries (B, Hq, n, D) of the prompt rows ``rows`` (a slice or index tensor):
    taken from the q_proj output saved during the forward when there is one (no recomputation),
    else recomputed from the hidden states."""
    if x.q_proj_out is None:
        return prerope_queries(x.module, x.hidden[:, rows])
    q = x.q_proj_out[:, rows]
    b, n, _ = q.shape
    q = q.view(b, n, x.n_heads, -1).transpose(1, 2)
    if hasattr(x.module, "q_norm"):
        q = x.module.q_norm(q)
    return q


def window_queries(x: LayerInputs, window: int) -> torch.Tensor:
    """The last ``window`` post-RoPE queries, (B, Hq, W, D)."""
    if x.queries is not None:
        return x.queries[:, :, -window:]
    if x.hidden is None or x.cos is None:
        raise ValueError("window queries need hidden states and RoPE tables (or a query buffer)")
    w = min(window, x.hidden.shape[1])
    q = layer_prerope_queries(x, slice(x.hidden.shape[1] - w, None))
    return rope(q, x.cos[:, -w:], x.sin[:, -w:])


def averaged_rope_matrix(rotary: Callable, start: int, n: int, d: int, device, dtype) -> torch.Tensor:
    """(D, D) rotation averaged over positions start..start+n-1 (RoPE as x -> R_p x).

    R_p = diag(cos_p) + diag(sin_p) P is linear in (cos_p, sin_p), so the mean rotation is
    diag(mean cos) + diag(mean sin) P: no (n, D, D) stack is built."""
    pos = torch.arange(start, start + n, device=device).unsqueeze(0)
    cos, sin = rotary(torch.zeros(1, 1, d, device=device, dtype=dtype), pos)
    c, s_ = cos[0].to(dtype).mean(0), sin[0].to(dtype).mean(0)  # (D,)
    p = torch.zeros(d, d, device=device, dtype=dtype)
    h = d // 2
    p[h:, :h] = torch.eye(h, device=device, dtype=dtype)
    p[:h, h:] = -torch.eye(h, device=device, dtype=dtype)
    return torch.diag(c) + s_.unsqueeze(1) * p


def _moments(q: torch.Tensor, covariance: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Mean (B, Hq, D) and covariance (B, Hq, D, D) of queries q (B, Hq, N, D)."""
    mu = q.mean(2)
    if not covariance:
        return mu, None
    c = q - mu.unsqueeze(2)
    return mu, c.transpose(-1, -2) @ c / max(q.shape[2], 1)


def _stat_rows(t: int, sink_tokens: int, n_rows: int, device) -> torch.Tensor:
    """The prompt positions after the sinks whose queries the statistics read: all of them, or a
    strided subsample of ``n_rows`` when there are more (then the moments, and any q_proj pass,
    cost O(n_rows), not O(T)); n_rows = 0: all."""
    s0 = min(sink_tokens, t - 1)
    if n_rows and t - s0 > n_rows:
        return s0 + torch.linspace(0, t - s0 - 1, n_rows, device=device).round().long()
    return torch.arange(s0, t, device=device)


def prerope_moments(
    x: LayerInputs, p: ScoreParams, covariance: bool = True
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Mean (B, Hq, D) and covariance of the prompt's pre-RoPE queries after the sinks (a strided
    subsample of ``stat_tokens`` of them when the prompt is longer; 0 = all)."""
    rows = _stat_rows(x.hidden.shape[1], p.sink_tokens, p.stat_tokens, x.hidden.device)
    return _moments(layer_prerope_queries(x, rows).float(), covariance)  # (B, Hq, T', D) -> moments


def query_statistics(
    x: LayerInputs, p: ScoreParams, *, covariance: bool = True, source: str | None = None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Mean (B, Hq, D) and covariance (B, Hq, D, D) of future queries, in post-RoPE key space.

    source (default ``p.query_source``): ``window`` = the last ``window_tokens`` post-RoPE
    queries; ``future-rope`` = the prompt's pre-RoPE queries after the sinks (a strided
    subsample of ``stat_tokens`` of them when the prompt is longer; 0 = all), rotated by the
    RoPE rotation averaged over the next ``n_future_positions`` positions."""
    source = source or p.query_source
    if source == "future-rope" and x.hidden is not None and x.rotary is not None:
        t = x.hidden.shape[1]
        mu, cov = prerope_moments(x, p, covariance)
        r = averaged_rope_matrix(x.rotary, t, p.n_future_positions, mu.shape[-1], mu.device, torch.float32)
        mu = mu @ r.T
        if cov is not None:
            cov = r @ cov @ r.T
        return mu, cov
    return _moments(window_queries(x, p.stat_window or p.window_tokens).float(), covariance)  # (B, Hq, W, D)


def _repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """(B, Hkv, T, D) -> (B, Hkv*n_rep, T, D) (query-head space)."""
    if n_rep == 1:
        return x
    b, h, t, d = x.shape
    return x[:, :, None].expand(b, h, n_rep, t, d).reshape(b, h * n_rep, t, d)


def _group_mean(s: torch.Tensor, hkv: int) -> torch.Tensor:
    """(B, Hq, T) -> (B, Hkv, T), averaging each KV head's query group."""
    b, hq, t = s.shape
    return s.view(b, hkv, hq // hkv, t).mean(2)


def _window_attention(x: LayerInputs, window: int) -> torch.Tensor:
    """Softmax attention of the last ``window`` queries over all keys (causal), (B, Hq, W, T)."""
    q = window_queries(x, window).float()  # (B, Hq, W, D)
    w = q.shape[2]
    k = _repeat_kv(x.keys, x.n_heads // x.keys.shape[1]).float()
    t = k.shape[2]
    logits = q @ k.transpose(-1, -2) / math.sqrt(k.shape[-1])  # (B, Hq, W, T)
    mask = torch.ones(w, t, dtype=torch.bool, device=k.device).triu(t - w + 1)
    logits = logits.masked_fill(mask, float("-inf"))
    return torch.softmax(logits, dim=-1)


def layer_rotary(rotary: Callable | None, module: torch.nn.Module) -> Callable | None:
    """The model's rotary embedding as layer ``module`` uses it: models with one RoPE per layer
    type (Gemma 3: local and global bases) take the layer's ``layer_types`` entry."""
    if rotary is None:
        return None
    import inspect

    if "layer_type" not in inspect.signature(rotary.forward).parameters:
        return rotary
    types = getattr(module.config, "layer_types", None) or []
    layer_type = types[module.layer_idx] if module.layer_idx < len(types) else None
    return lambda x, pos: rotary(x, pos, layer_type=layer_type)
