"""CapKV's score (the paper's channel) and our question-aware retrieval channel (``capkv-qa``).

CapKV ("Rethinking KV Cache Eviction via a Unified Information-Theoretic Objective", Yang et al.,
ICML 2026, arXiv 2604.25975): a future query q ~ N(mu, Sigma) reads the kept cache C through the
channel Y_C = U_C K_C q + noise; its capacity is log det(rho I + sum_{i in C} w_i u_i u_i^T) with
u_i = v_i, and the one-shot greedy gain of token i is the weighted ridge leverage
s_i = w_i u_i^T (rho I + sum_j w_j u_j u_j^T)^{-1} u_i, kept top-B per head (``icml26.ops.kv``).
kvpress' CapPress (NVIDIA/kvpress PR #234) is reproduced by ``weight="exp-cos",
query_source="future-rope", ridge_absolute=True, gqa="per-head", stat_tokens=0, window_tokens=0``.

Our defaults where the sources are silent (RECONSTRUCTED): ``weight="expected"`` (expected
attention under the query Gaussian), future-rope statistics with covariance from ``stat_tokens``
prompt queries, ridge relative to trace(M)/d, one channel per KV head (``gqa="pool"``).
OURS (not in the paper; ``capkv-qa``): ``score_capkv_question``, the same leverage under the
observed attention of the last ``stat_window`` queries, max-pooled over ``pool_kernel`` tokens;
the press keeps ``question_share`` of each budget by it first (``reserve_top``). The other
extras (``recent_share``, ``recent_mode``, ``future_strata``, ``past_mix``, ``pool``) are off by
default. Their measurements and history: docs/evict-kv.md.
"""

from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn.functional as F

from icml26.methods.kvcache.options import ScoreParams
from icml26.methods.kvcache.queries import (
    LayerInputs,
    _group_mean,
    _repeat_kv,
    _stat_rows,
    _window_attention,
    averaged_rope_matrix,
    layer_prerope_queries,
    prerope_moments,
    query_statistics,
    rope,
    window_queries,
)
from icml26.ops import kv as kv_ops


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
        s = kv_ops.weighted_leverage(u, we, p.ridge_ratio, relative=not p.ridge_absolute, check=False) * (w / we)
    else:
        s = kv_ops.weighted_leverage(u, w, p.ridge_ratio, relative=not p.ridge_absolute, check=False)
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
