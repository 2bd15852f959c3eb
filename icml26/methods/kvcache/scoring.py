"""Scoring rules for KV-cache eviction: CapKV (the paper's method) and the baselines.

Every rule maps one layer's cache to a score per (batch, KV head, token), higher = keep:

    score_<name>(x: LayerInputs, p: ScoreParams) -> Tensor (B, Hkv, T)

Selection (``select_indices``) then keeps sinks and a recent window, and the top-scoring
remainder per KV head, so every head keeps exactly the same budgeted count.

CapKV ("Rethinking KV Cache Eviction via a Unified Information-Theoretic Objective",
Yang et al., ICML 2026, arXiv 2604.25975). The paper's text was not available to us; the
objective and leverage-score selection below follow the restatement by the same authors
(Jacap, Sec. 3.2/3.4, App. A-B), see ``shared/methods/capkv.md``:

1. Linear-Gaussian surrogate of one attention head: a future query q ~ N(mu, Sigma); the
   retained cache C is a channel Y_C = U_C K_C q + eps, eps ~ N(0, sigma^2 I).
2. Capacity (Eq. "L_C") = 1/2 log det(I + sigma^-2 U_C K_C Sigma K_C^T U_C^T).
3. Diagonalising the key response, the objective is 1/2 log det(rho I + sum_{i in C} w_i u_i u_i^T)
   with w_i the (relevance/variance) weight of token i and u_i = v_i (values as the
   output-direction proxy, as in Jacap's practical recipe).
4. Greedy marginal gain (matrix determinant lemma) log(1 + w_i u_i^T A_C^{-1} u_i); its
   one-shot version over the whole pool H is the weighted ridge leverage score
   s_i = w_i u_i^T (rho I + sum_{j in H} w_j u_j u_j^T)^{-1} u_i.  Keep the top-B per head.

What kvpress' CapPress implements (NVIDIA/kvpress PR #234; its code comments say how to "fully
reproduce the results from the paper", so it is likely the authors' own setting): w_i = exp(tau cos(k_i,
mu)), mu = mean of all prompt queries (sinks excluded) rotated by the RoPE rotation averaged
over the next 512 positions, u_i = v_i, rho = 1 (absolute), one leverage per query head averaged
over the GQA group, 4 sinks kept, no recent window. ``weight="exp-cos", query_source="future-rope",
ridge_absolute=True, gqa="per-head", stat_tokens=0, window_tokens=0`` reproduces it exactly
(tests/methods/test_kv_kvpress_parity.py).

RECONSTRUCTED (our defaults; not stated in the sources; measured in docs/evict-kv.md):
- the weight w_i. ``weight="expected"`` (default) is the expected attention weight of token i
  under q ~ N(mu, Sigma): softmax_i(mu.k_i/sqrt(d) + k_i^T Sigma k_i / (2d)) (log-normal mean),
  which carries both the query relevance and the logit variance kappa_i = k_i^T Sigma k_i of
  the restatement (the surrogate's Lambda_Q enters through Sigma); ``weight="kappa"`` uses
  kappa_i alone with a diagonal Sigma (the literal restatement); ``weight="exp-cos"`` is
  CapPress' weight.
- the query statistics (mu, Sigma): ``query_source="future-rope"`` (default; CapPress' choice
  for mu) = pre-RoPE prompt queries after the sinks, rotated by the averaged future RoPE,
  with the covariance as well as the mean, from a strided subsample of ``stat_tokens`` queries
  (so the extra q_proj pass costs O(stat_tokens), not O(T)); ``window`` = the last
  ``window_tokens`` post-RoPE queries (SnapKV's observation window; also what decoding-time
  compression uses); ``mixture`` = an equal mixture of the two query populations (weights
  averaged); ``joint`` = the sum of the two channels' capacities (leverage scores added).
- the ridge rho: relative to the trace of M = sum_j w_j u_j u_j^T (``ridge_ratio``), so the
  score does not depend on how w is normalised; ``ridge_absolute=True`` uses rho = ridge_ratio.
- GQA (``gqa="pool"``, default): the KV head is one channel read by its g query heads, weighted
  by their mean weight, so there is one (D x D) Cholesky per KV head; ``gqa="per-head"`` is
  CapPress' per-query-head leverage averaged over the group.
- sinks are left out of the pool H and always kept; the last ``window_tokens`` are always kept
  (every policy in this harness gets the same protection).
- head-adaptive budgets (``select_adaptive``, Ada-KV's rule on CapKV scores) are optional.

OURS (not in the paper; chosen on a dev split, docs/evict-kv.md): a second channel for the
queries that will retrieve from the cache. ``score_capkv_question`` scores tokens by the same
weighted ridge leverage, with w_i = the observed mean attention of the last ``stat_window``
prompt queries (the question, when the prompt ends with one) in its own A, max-pooled over
``pool_kernel`` neighbours (a multi-token fact is kept whole); the press keeps the top
``question_share`` of each head's budget by this channel first (``reserve_top``) and fills the
rest by ``score_capkv`` (the paper's continuation channel). ``question_share=0`` is the
single-channel CapKV. Also ours, off by default: ``recent_share`` (a recency share of the
budget), ``recent_mode="adaptive"`` (a per-head recent window from the recent queries' attention,
``adaptive_recent``), ``future_strata`` (expected weights averaged over strata of the future
positions), ``past_mix`` (the prompt queries' observed attention mixed into the continuation
weights), ``pool`` (pooling the continuation channel), ``window_mix`` / ``window_stats`` (mixed
query populations in one channel); each measured on the dev split in docs/evict-kv.md.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from icml26.ops._ref import kv as _kvref  # hot path: inputs come from the model, already checked

METHODS = ("capkv", "capkv-greedy", "streaming", "snapkv", "h2o", "tova", "knorm", "random", "expected-attention")


@dataclass(kw_only=True)
class PressOptions:
    """The options a user sets for an eviction policy: declared once, here. ``KVPress`` (the press)
    and the ``evict-kv`` config (``evaluate.Config``) are built on these fields, and the scoring
    rules read them through ``ScoreParams``."""

    sink_tokens: int = 4  # first tokens always kept (and left out of the query statistics)
    window_tokens: int = 64  # most recent tokens always kept; the observation window (SnapKV, decoding-time scoring)
    weight: str = "expected"  # CapKV weight: expected | kappa | exp-cos
    tau: float = 5.0  # temperature of the exp-cos weight
    ridge_ratio: float = 1.0  # CapKV ridge rho, relative to trace(M)/d (or absolute)
    ridge_absolute: bool = False
    query_source: str = "future-rope"  # future-rope | window | mixture | joint
    n_future_positions: int = 512  # averaged RoPE horizon for future-rope statistics
    stat_tokens: int = 256  # future-rope statistics from a strided subsample of this many prompt queries (0 = all)
    gqa: str = "pool"  # CapKV with GQA: pool (one channel per KV head) | per-head (kvpress)
    kernel_size: int = 5  # SnapKV pooling (CapKV pools with ``pool_kernel``)
    head_budget: str = "uniform"  # uniform | adaptive (Ada-KV style allocation across a layer's KV heads, prefill only; ``select_adaptive``)
    head_floor: float = 0.2  # adaptive: each head keeps at least this share of its uniform free budget
    window_mix: float = 0.5  # CapKV query_source=mixture: share of the window (question) queries in the mixture
    pool: str = "none"  # CapKV: pool the leverage scores over pool_kernel neighbours: none | max | avg
    pool_kernel: int = 13  # CapKV pooling kernel (odd)
    recent_share: float = (
        0.0  # CapKV: share of the per-head budget given to the most recent tokens (at least window_tokens)
    )
    past_tokens: int = 0  # past_mix: strided prompt queries observed (0 = stat_tokens)
    past_mix: float = (
        0.0  # CapKV continuation weights: share of the prompt queries' observed attention (``_past_attention``)
    )
    future_strata: int = 1  # CapKV future-rope expected weights: mean over this many strata of the future horizon
    recent_mode: str = "fixed"  # CapKV: fixed (recent_share) | adaptive (per-head recency from observed attention, ``adaptive_recent``)
    question_share: float = 0.4  # CapKV: share of the budget reserved for the retrieval channel (score_capkv_question)
    stat_window: int = 16  # CapKV window channel: the last this many queries (0 = window_tokens)
    window_stats: str = (
        "gaussian"  # CapKV window channel: gaussian (moments of the window queries) | observed (their mean attention)
    )


@dataclass(kw_only=True)
class ScoreParams(PressOptions):
    """What the scoring rules read: the press options and the random baseline's seed."""

    seed: int = 0  # random baseline


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


# ----------------------------------------------------------------------------- CapKV


def capkv_weights(keys: torch.Tensor, mu: torch.Tensor, cov: torch.Tensor | None, p: ScoreParams) -> torch.Tensor:
    """Per-token weights w_i >= 0 (see the module doc, RECONSTRUCTED).

    keys (..., T, D) broadcastable against mu (..., D) and cov (..., D, D); returns (..., T)."""
    d = keys.shape[-1]
    k = keys.float()
    if p.weight == "expected":
        logits = (k @ mu.unsqueeze(-1)).squeeze(-1) / math.sqrt(d)
        if cov is not None:
            logits = logits + ((k @ cov) * k).sum(-1) / (2 * d)
        return torch.softmax(logits, dim=-1)
    if p.weight == "kappa":
        if cov is None:
            raise ValueError("weight='kappa' needs the query covariance")
        var = torch.diagonal(cov, dim1=-2, dim2=-1)  # (..., D): diagonal Lambda_Q
        return ((k * k) @ var.unsqueeze(-1)).squeeze(-1) / d  # kappa_i = k_i^T Lambda k_i / d
    if p.weight == "exp-cos":
        stat = (F.normalize(k, dim=-1) @ F.normalize(mu, dim=-1).unsqueeze(-1)).squeeze(-1).clamp(-1, 1)
        logits = p.tau * stat
        return torch.exp(logits - logits.amax(-1, keepdim=True))
    raise ValueError(f"unknown CapKV weight {p.weight!r}; valid: expected, kappa, exp-cos")


def _without_sinks(x: LayerInputs, p: ScoreParams) -> tuple[LayerInputs, int]:
    """The layer with its first sink tokens dropped from the candidate pool (they are kept anyway)."""
    s0 = min(p.sink_tokens, x.keys.shape[2] - 1)
    if s0 <= 0:
        return x, 0
    return dataclasses.replace(x, keys=x.keys[:, :, s0:], values=x.values[:, :, s0:]), s0


def _pad_sinks(s: torch.Tensor, s0: int) -> torch.Tensor:
    return F.pad(s, (s0, 0), value=float(s.max()) + 1) if s0 else s


def capkv_token_weights(x: LayerInputs, p: ScoreParams, source: str | None = None) -> torch.Tensor:
    """CapKV weights w (B, Hkv, g, T) of the layer's tokens, for each query head of a KV group,
    under the future-query statistics of ``source`` (default ``p.query_source``; ``mixture``
    is the mixture of the two query populations, window (question) queries with probability
    ``window_mix`` and future-rope queries otherwise: the expected attention under a mixture
    is the mixture of the expected attentions, so the weights are mixed)."""
    b, hkv, t, d = x.keys.shape
    g = x.n_heads // hkv
    k = x.keys.float().unsqueeze(2)  # (B, Hkv, 1, T, D)
    source = source or p.query_source
    sources = ("window", "future-rope") if source in ("mixture", "joint") else (source,)
    w = None
    for src in sources:
        wi = None
        if src == "window" and p.window_stats == "observed":
            # the empirical distribution of the observed window queries instead of its Gaussian fit:
            # E_q[softmax(q.k / sqrt d)] over the window = the mean attention of those queries
            a = _window_attention(x, min(p.stat_window or p.window_tokens, max(1, t - 1))).mean(2)  # (B, Hq, T)
            wi = a.view(b, hkv, g, t)
            if source == "mixture":
                wi = wi * p.window_mix
            elif len(sources) > 1:
                wi = wi / len(sources)
            w = wi if w is None else w + wi
            continue
        if (
            src == "future-rope"
            and p.weight == "expected"
            and p.future_strata > 1
            and x.hidden is not None
            and x.rotary is not None
        ):
            wi = _expected_weights_strata(x, k.squeeze(2), p)
        elif p.weight == "expected" and _window_source(x, src) and _window_count(x, p) < d:
            # the window's Gaussian has a covariance of rank < D: its quadratic terms from the centred queries
            q = window_queries(x, p.stat_window or p.window_tokens).float()  # (B, Hq, n, D)
            wi = _expected_weights_window(k.squeeze(2), q.view(b, hkv, g, q.shape[2], d))
        else:
            mu, cov = query_statistics(x, p, covariance=p.weight != "exp-cos", source=src)  # (B, Hq, D), (B, Hq, D, D)
            if p.weight == "expected":
                wi = _expected_weights_grouped(k.squeeze(2), mu.view(b, hkv, g, d), cov.view(b, hkv, g, d, d))
            else:
                wi = capkv_weights(k, mu.view(b, hkv, g, d), None if cov is None else cov.view(b, hkv, g, d, d), p)
        if src == "future-rope" and p.past_mix > 0 and x.hidden is not None and x.cos is not None:
            wi = (1.0 - p.past_mix) * wi + p.past_mix * _past_attention(x, p).view(b, hkv, g, t)
        if source == "mixture":
            wi = wi * (p.window_mix if src == "window" else 1.0 - p.window_mix)
        elif len(sources) > 1:
            wi = wi / len(sources)
        w = wi if w is None else w + wi
    return w


def _past_attention(x: LayerInputs, p: ScoreParams) -> torch.Tensor:
    """Mean observed attention (B, Hq, T) of the prompt's own queries (ours, ``past_mix``): the
    strided subsample of ``stat_tokens`` prompt queries after the sinks (the rows the future-rope
    moments use), each at its own position, causal, over the layer's keys (``x`` may have its
    sinks dropped: then the softmax runs over the remaining keys). The empirical distribution of
    the prompt's queries, not a Gaussian fit; on all queries it is H2O's accumulated attention / T.
    ``past_tokens`` (when > 0) sets the subsample's size instead of ``stat_tokens``."""
    tq = x.hidden.shape[1]
    t = x.keys.shape[2]
    off = tq - t  # positions of the layer's first key (sinks dropped)
    rows = _stat_rows(tq, p.sink_tokens, p.past_tokens or p.stat_tokens, x.hidden.device)
    rows = rows[rows >= off]  # a query must see at least one key
    q = rope(layer_prerope_queries(x, rows), x.cos[:, rows], x.sin[:, rows]).float()  # (B, Hq, n, D)
    k = _repeat_kv(x.keys, x.n_heads // x.keys.shape[1]).float()
    logits = q @ k.transpose(-1, -2) / math.sqrt(k.shape[-1])  # (B, Hq, n, T)
    mask = (torch.arange(t, device=k.device)[None, :] + off) > rows[:, None]
    return torch.softmax(logits.masked_fill(mask, float("-inf")), dim=-1).mean(2)


def _expected_weights_strata(x: LayerInputs, k: torch.Tensor, p: ScoreParams) -> torch.Tensor:
    """Expected attention of a future query averaged over its position (ours, ``future_strata``).

    The future horizon [T, T + n_future_positions) is cut into ``future_strata`` equal strata;
    in each, the query Gaussian (pre-RoPE moments) is rotated by that stratum's averaged RoPE
    and the expected attention computed; the weights are the strata's mean (by length), i.e. the
    expected attention under the mixture over positions. ``future_strata=1`` is the single
    averaged rotation (the query at the mean position); as the strata shrink, the near future's
    queries keep the high-frequency RoPE phases that one rotation averaged over 512 positions
    cancels (the local, recency part of attention). k (B, Hkv, T, D) -> (B, Hkv, g, T)."""
    b, hkv, t, d = k.shape
    g = x.n_heads // hkv
    tq = x.hidden.shape[1]
    mu0, cov0 = prerope_moments(x, p, True)
    n = p.n_future_positions
    m = max(1, min(p.future_strata, n))
    w = None
    for j in range(m):
        a, e = j * n // m, (j + 1) * n // m
        r = averaged_rope_matrix(x.rotary, tq + a, e - a, d, mu0.device, torch.float32)
        wj = _expected_weights_grouped(k, (mu0 @ r.T).view(b, hkv, g, d), (r @ cov0 @ r.T).view(b, hkv, g, d, d)) * (
            (e - a) / n
        )
        w = wj if w is None else w + wj
    return w


def _expected_weights_grouped(k: torch.Tensor, mu: torch.Tensor, cov: torch.Tensor) -> torch.Tensor:
    """``capkv_weights(weight="expected")`` for a KV group in one pass: k (B, Hkv, T, D),
    mu (B, Hkv, g, D), cov (B, Hkv, g, D, D) -> (B, Hkv, g, T). The quadratic terms
    k_i^T Sigma_h k_i of the g query heads come from one (T x D) @ (D x gD) product per KV head."""
    b, hkv, g, d = mu.shape
    t = k.shape[2]
    lin = mu @ k.transpose(-1, -2) / math.sqrt(d)  # (B, Hkv, g, T)
    kc = k @ cov.permute(0, 1, 3, 2, 4).reshape(b, hkv, d, g * d)  # (B, Hkv, T, g*D): k_i^T Sigma_h, all h
    quad = (kc.view(b, hkv, t, g, d) * k.unsqueeze(3)).sum(-1).transpose(-1, -2)  # (B, Hkv, g, T)
    return torch.softmax(lin + quad / (2 * d), dim=-1)


def _window_source(x: LayerInputs, source: str) -> bool:
    """Whether ``query_statistics(x, p, source=source)`` reads the recent-query window (the
    ``window`` source, and ``future-rope`` without the prompt's hidden states: decoding)."""
    return not (source == "future-rope" and x.hidden is not None and x.rotary is not None)


def _window_count(x: LayerInputs, p: ScoreParams) -> int:
    """How many queries the window statistics read (``window_queries(x, stat_window or window_tokens)``)."""
    w = p.stat_window or p.window_tokens
    return min(w, x.queries.shape[2]) if x.queries is not None else min(w, x.hidden.shape[1])


def _expected_weights_window(k: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """``_expected_weights_grouped`` under the Gaussian fitted to n window queries, from the
    queries themselves: k (B, Hkv, T, D), q (B, Hkv, g, n, D) -> (B, Hkv, g, T).

    With the centred queries c_j = q_j - mu, Sigma = C^T C / n, so k_i^T Sigma k_i =
    ||C k_i||^2 / n: O(T n D) per query head instead of O(T D^2) for the (D x D) covariance
    (decoding: n = ``stat_window`` = 16 against D = 64); the same weights (tested)."""
    n, d = q.shape[-2], q.shape[-1]
    mu = q.mean(-2)  # (B, Hkv, g, D)
    c = q - mu.unsqueeze(-2)
    b, hkv, g, _ = mu.shape
    t = k.shape[-2]
    kt = k.transpose(-1, -2)  # (B, Hkv, D, T)
    lin = mu @ kt / math.sqrt(d)  # (B, Hkv, g, T)
    ck = (c.reshape(b, hkv, g * n, d) @ kt).view(b, hkv, g, n, t)  # C k_i for every query head: one product per KV head
    quad = (ck * ck).sum(-2) / max(n, 1)
    return torch.softmax(lin + quad / (2 * d), dim=-1)


def _leverage(u: torch.Tensor, w: torch.Tensor, p: ScoreParams) -> torch.Tensor:
    """Step 4 for one KV layer: u (B, Hkv, T, D), w (B, Hkv, g, T) -> scores (B, Hkv, T)
    (leading dims broadcast: u (1, B, Hkv, T, D) with w (C, B, Hkv, g, T) scores C channels at once).

    ``gqa="pool"``: the KV head is one channel read by its g query heads, weighted by their mean
    weight, one (D x D) Cholesky per KV head. ``gqa="per-head"``: one leverage per query head,
    averaged over the group (kvpress' CapPress)."""
    if p.gqa == "pool":
        w, u = w.mean(-2), u
    else:
        u = u.unsqueeze(-3)  # (B, Hkv, 1, T, D), broadcast over the group
    if p.weight == "exp-cos":  # kvpress' epsilon inside A only: s_i = w_i u_i^T (I + sum (w_j + eps) u_j u_j^T)^-1 u_i
        we = w + 1e-6
        s = _kvref.weighted_leverage(u, we, p.ridge_ratio, not p.ridge_absolute) * (w / we)
    else:
        s = _kvref.weighted_leverage(u, w, p.ridge_ratio, not p.ridge_absolute)
    return s if p.gqa == "pool" else s.mean(-2)


def score_capkv(x: LayerInputs, p: ScoreParams) -> torch.Tensor:
    """CapKV one-shot leverage score (module doc, steps 1-4). Returns (B, Hkv, T).

    The sinks (always kept) are left out of the pool H, so they do not dominate A.
    ``query_source="joint"``: the sum of the window channel's and the future-rope channel's
    leverage scores (each normalised in its own A), i.e. the one-shot marginal gain of the sum
    of the two channels' capacities (RECONSTRUCTED, see the module doc)."""
    x, s0 = _without_sinks(x, p)
    u = x.values.float()  # u_i = v_i, (B, Hkv, T, D)
    if p.query_source == "joint":
        s = sum(_leverage(u, capkv_token_weights(x, p, src), p) for src in ("window", "future-rope"))
    else:
        s = _leverage(u, capkv_token_weights(x, p), p)
    return _pad_sinks(pool_scores(s, p.pool, p.pool_kernel), s0)


def score_capkv_question(x: LayerInputs, p: ScoreParams) -> torch.Tensor:
    """CapKV's retrieval channel (ours; used with ``question_share``): the weighted ridge leverage
    of the tokens under the observed attention of the last ``stat_window`` queries (the question
    when it ends the prompt), in its own A, max-pooled over ``pool_kernel`` tokens so the span
    around a retrieved token (the rest of a multi-token fact) is kept with it. Returns (B, Hkv, T)."""
    x, s0 = _without_sinks(x, p)
    q = dataclasses.replace(p, query_source="window", window_stats="observed")
    s = _leverage(x.values.float(), capkv_token_weights(x, q), q)
    return _pad_sinks(pool_scores(s, "max", p.pool_kernel), s0)


def score_capkv_channels(x: LayerInputs, p: ScoreParams) -> tuple[torch.Tensor, torch.Tensor]:
    """(``score_capkv(x, p)``, ``score_capkv_question(x, p)``) in one pass: both channels' weighted
    ridge leverages share u = v, so their two (D x D) systems per KV head are built and solved in
    one batched call. Each (B, Hkv, T); the same scores as the two functions (tested).
    ``query_source="joint"`` (two continuation channels) falls back to the two functions."""
    if p.query_source == "joint":
        return score_capkv(x, p), score_capkv_question(x, p)
    x, s0 = _without_sinks(x, p)
    q = dataclasses.replace(p, query_source="window", window_stats="observed")
    w = torch.stack([capkv_token_weights(x, p), capkv_token_weights(x, q)])  # (2, B, Hkv, g, T)
    s = _leverage(x.values.float().unsqueeze(0), w, p)  # (2, B, Hkv, T)
    return (
        _pad_sinks(pool_scores(s[0], p.pool, p.pool_kernel), s0),
        _pad_sinks(pool_scores(s[1], "max", p.pool_kernel), s0),
    )


def reserve_top(scores: torch.Tensor, other: torch.Tensor, n: int) -> torch.Tensor:
    """``scores`` (B, H, T) with the top-``n`` tokens of ``other`` per head lifted above every other
    score (below the selector's forced sinks/window), so the selector keeps them first and fills the
    rest of the budget by ``scores``."""
    if n <= 0:
        return scores
    top = other.topk(min(n, other.shape[-1]), dim=-1).indices
    lift = torch.zeros_like(scores, dtype=torch.bool).scatter_(-1, top, True)
    return scores.float().masked_fill(lift, torch.finfo(torch.float32).max / 2)


def pool_scores(s: torch.Tensor, pool: str, kernel: int) -> torch.Tensor:
    """Pool scores (B, H, T) over ``kernel`` neighbouring tokens (odd kernel, centred, stride 1).

    ``max``: a token scores as its best neighbour, so a span whose one token carries a high
    marginal capacity is kept whole (a multi-token fact: the digits of a code); ``avg``:
    SnapKV's smoothing (zero-padded ends, as ``F.avg_pool1d``); ``none``: unchanged."""
    if pool == "none" or kernel <= 1:
        return s
    b, h, t = s.shape
    x = s.reshape(b * h, 1, t)
    if pool == "max":
        y = F.max_pool1d(x, kernel_size=kernel, stride=1, padding=kernel // 2)
    elif pool == "avg":
        y = F.avg_pool1d(x, kernel_size=kernel, stride=1, padding=kernel // 2)
    else:
        raise ValueError(f"pool must be none, max or avg, got {pool!r}")
    return y.reshape(b, h, t)


def observed_attention(x: LayerInputs, p: ScoreParams) -> torch.Tensor:
    """Mean attention (B, Hkv, T) the last ``stat_window`` prompt queries give each token, averaged
    over each KV head's query group (the retrieval channel's observed weights, group-pooled)."""
    t = x.keys.shape[2]
    a = _window_attention(x, min(p.stat_window or p.window_tokens, max(1, t - 1))).mean(2)  # (B, Hq, T)
    return _group_mean(a, x.keys.shape[1])


def adaptive_recent(att: torch.Tensor, span: int, *, sink_tokens: int, window_tokens: int) -> torch.Tensor:
    """Per-head count of extra recent tokens to keep beyond the protected window (ours; ``recent_mode=adaptive``).

    att (B, H, T): observed attention of the recent queries (``observed_attention``); span: the
    part of the budget that may go to recency, counted with the window (window + extra <= span).
    The region the selector is free to choose from is R = [sink_tokens, T - window_tokens); its
    most recent ``n = span - window_tokens`` tokens are the candidates for recency.  With
    m_h = (head h's attention mass on those n tokens) / (its mass on R) and f = n / |R| (the
    share a head without any recency preference would put there),

        rho_h = clamp((m_h - f) / (1 - f), 0, 1)        extra_h = floor(rho_h * n)

    i.e. the head keeps as large a share of the candidates as its attention is concentrated on
    them beyond chance: a head whose attention beyond the window decays with distance keeps a
    longer recent window (StreamingLLM for that head when rho_h = 1), a head that reads the far
    context as much as the near keeps none. Returns (B, H) int64 in [0, n]."""
    b, h, t = att.shape
    lo, hi = min(sink_tokens, t), max(min(sink_tokens, t), t - window_tokens)
    n = max(0, min(span - window_tokens, hi - lo))
    if n == 0:
        return torch.zeros(b, h, dtype=torch.long, device=att.device)
    if n == hi - lo:
        return torch.full((b, h), n, dtype=torch.long, device=att.device)
    a = att.float()
    mass = a[..., lo:hi].sum(-1)
    m = a[..., hi - n : hi].sum(-1) / mass.clamp_min(torch.finfo(torch.float32).tiny)
    f = n / (hi - lo)
    rho = ((m - f) / (1.0 - f)).clamp(0.0, 1.0)
    return torch.floor(rho * n + 1e-6).long().clamp(0, n)


def reserve_recent(scores: torch.Tensor, extra: torch.Tensor, window_tokens: int) -> torch.Tensor:
    """``scores`` (B, H, T) with, per head, the ``extra`` (B, H) tokens just before the last
    ``window_tokens`` lifted above every other score (below the selector's forced sinks/window)."""
    t = scores.shape[-1]
    hi = t - window_tokens
    pos = torch.arange(t, device=scores.device)
    lift = (pos < hi) & (pos >= hi - extra.unsqueeze(-1))
    return scores.float().masked_fill(lift, torch.finfo(torch.float32).max / 2)


def recent_window(n_keep: int, window_tokens: int, recent_share: float) -> int:
    """Recent tokens protected for a budget of ``n_keep``: max(window_tokens, floor(share * n_keep))."""
    return max(int(window_tokens), int(math.floor(recent_share * n_keep)))


# ----------------------------------------------------------------------------- baselines


def score_streaming(x: LayerInputs, p: ScoreParams) -> torch.Tensor:
    """StreamingLLM (Xiao et al., 2024): recency only; sinks are protected by the selector."""
    b, h, t, _ = x.keys.shape
    return torch.arange(t, dtype=torch.float32, device=x.keys.device).expand(b, h, t).clone()


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


SCORERS: dict[str, Callable[[LayerInputs, ScoreParams], torch.Tensor]] = {
    "capkv": score_capkv,
    "streaming": score_streaming,
    "snapkv": score_snapkv,
    "h2o": score_h2o,
    "tova": score_tova,
    "knorm": score_knorm,
    "random": score_random,
    "expected-attention": score_expected_attention,
}


# ----------------------------------------------------------------------------- selection


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
