"""The options of the eviction policies (torch-free): declared once, read by the press, the
``evict-kv`` config and the scoring rules (``ScoreParams``)."""

from __future__ import annotations

from dataclasses import dataclass


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
    # uniform | adaptive (Ada-KV style allocation across a layer's KV heads, prefill only; ``select_adaptive``)
    head_budget: str = "uniform"
    head_floor: float = 0.2  # adaptive: each head keeps at least this share of its uniform free budget
    window_mix: float = 0.5  # CapKV query_source=mixture: share of the window (question) queries in the mixture
    pool: str = "none"  # CapKV: pool the leverage scores over pool_kernel neighbours: none | max | avg
    pool_kernel: int = 13  # capkv-qa retrieval channel's max-pool width (and CapKV's ``pool``), odd
    recent_share: float = (
        0.0  # CapKV: share of the per-head budget given to the most recent tokens (at least window_tokens)
    )
    past_tokens: int = 0  # past_mix: strided prompt queries observed (0 = stat_tokens)
    past_mix: float = (
        0.0  # CapKV continuation weights: share of the prompt queries' observed attention (``_past_attention``)
    )
    future_strata: int = 1  # CapKV future-rope expected weights: mean over this many strata of the future horizon
    # CapKV: fixed (recent_share) | adaptive (per-head recency from observed attention, ``adaptive_recent``)
    recent_mode: str = "fixed"
    question_share: float | None = None  # capkv-qa: share of the budget for its retrieval channel (None = 0.4)
    stat_window: int = 16  # CapKV window channel: the last this many queries (0 = window_tokens)
    window_stats: str = (
        "gaussian"  # CapKV window channel: gaussian (moments of the window queries) | observed (their mean attention)
    )


@dataclass(kw_only=True)
class ScoreParams(PressOptions):
    """What the scoring rules read: the press options and the random baseline's seed."""

    seed: int = 0  # random baseline
