"""The options of the eviction policies (torch-free): declared once, read by the press, the
``evict-kv`` config and the scoring rules (``ScoreParams``); ``check_options`` validates them
for a policy (the press and the config call it, so a bad value is refused before torch loads)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from icml26.core.settings import setting

QUESTION_SHARE = 0.4  # capkv-qa's default share of the budget for the retrieval channel (dev split, docs/evict-kv.md)


@dataclass(kw_only=True)
class PressOptions:
    """The options a user sets for an eviction policy: declared once, here. ``KVPress`` (the press)
    and the ``evict-kv`` config (``evaluate.Config``) are built on these fields, and the scoring
    rules read them through ``ScoreParams``."""

    sink_tokens: int = 4  # first tokens always kept (and left out of the query statistics)
    window_tokens: int = 64  # most recent tokens always kept; the observation window (SnapKV, decoding-time scoring)
    weight: Literal["expected", "kappa", "exp-cos"] = "expected"  # CapKV weight: expected | kappa | exp-cos
    tau: float = setting(5.0, gt=0)  # temperature of the exp-cos weight
    ridge_ratio: float = setting(
        1.0, "CapKV ridge rho, relative to trace(M)/d (or absolute: ridge_absolute)", unit="x trace(M)/d"
    )
    ridge_absolute: bool = False  # CapKV: ridge_ratio is the ridge rho itself, not relative to trace(M)/d
    query_source: Literal["future-rope", "window", "mixture", "joint"] = (
        "future-rope"  # CapKV query statistics: future-rope | window | mixture | joint
    )
    n_future_positions: int = setting(
        512,
        "averaged RoPE horizon for future-rope statistics (CapKV, expected-attention)",
        unit="positions",
        sized=2**20,
    )
    stat_tokens: int = setting(
        256,
        "future-rope statistics from a strided subsample of this many prompt queries (0 = all)",
        unit="tokens",
        sized=2**20,
    )
    gqa: Literal["pool", "per-head"] = "pool"  # CapKV with GQA: pool (one channel per KV head) | per-head (kvpress)
    kernel_size: int = setting(5, gt=0)  # SnapKV pooling, odd (CapKV pools with ``pool_kernel``)
    # uniform | adaptive (Ada-KV style allocation across a layer's KV heads, prefill only; ``select_adaptive``)
    head_budget: Literal["uniform", "adaptive"] = "uniform"
    head_floor: float = setting(
        0.2, ge=0, le=1
    )  # adaptive: each head keeps at least this share of its uniform free budget
    window_mix: float = setting(
        0.5, ge=0, le=1
    )  # CapKV query_source=mixture: share of the window (question) queries in the mixture
    pool: Literal["none", "max", "avg"] = (
        "none"  # CapKV: pool the leverage scores over pool_kernel neighbours: none | max | avg
    )
    pool_kernel: int = 13  # capkv-qa retrieval channel's max-pool width (and CapKV's ``pool``), odd
    recent_share: float = setting(
        0.0, ge=0, lt=1
    )  # CapKV: share of the per-head budget given to the most recent tokens (at least window_tokens)
    past_tokens: int = setting(
        0, "past_mix: strided prompt queries observed (0 = stat_tokens: 256 at the defaults)", sized=2**20
    )
    past_mix: float = (
        0.0  # CapKV continuation weights: share of the prompt queries' observed attention (``_past_attention``)
    )
    future_strata: int = setting(
        1, "CapKV future-rope expected weights: mean over this many strata of the future horizon", sized=4096
    )
    # CapKV: fixed (recent_share) | adaptive (per-head recency from observed attention, ``adaptive_recent``)
    recent_mode: Literal["fixed", "adaptive"] = "fixed"
    question_share: float | None = setting(
        None,
        f"capkv-qa: share of the budget for its retrieval channel ({QUESTION_SHARE} when unset; a run with "
        "capkv-qa shows it resolved); None for a run without capkv-qa (capkv, the paper: 0)",
    )
    stat_window: int = 16  # CapKV window channel: the last this many queries (0 = window_tokens: 64 at the defaults)
    window_stats: Literal["gaussian", "observed"] = (
        "gaussian"  # CapKV window channel: gaussian (moments of the window queries) | observed (their mean attention)
    )


@dataclass(kw_only=True)
class ScoreParams(PressOptions):
    """What the scoring rules read: the press options and the random baseline's seed."""

    seed: int = 0  # random baseline


_CHOICES = {
    "weight": ("expected", "kappa", "exp-cos"),
    "query_source": ("window", "future-rope", "mixture", "joint"),
    "gqa": ("pool", "per-head"),
    "head_budget": ("uniform", "adaptive"),
    "window_stats": ("gaussian", "observed"),
    "pool": ("none", "max", "avg"),
    "recent_mode": ("fixed", "adaptive"),
}


def question_share(opts: PressOptions, method: str) -> float:
    """The share of each head's budget kept by capkv-qa's retrieval channel (0 for every other method)."""
    if method != "capkv-qa":
        return 0.0
    return QUESTION_SHARE if opts.question_share is None else float(opts.question_share)


def check_options(
    opts: PressOptions,
    method: str,
    *,
    compression_ratio: float = 0.0,
    decoding_budget_tokens: int = 0,
    decoding_interval_tokens: int = 16,
) -> None:
    """ValueError naming the first press option (or press argument) that ``method`` cannot run
    with. Torch-free: ``KVPress`` and the ``evict-kv`` config both call it."""
    if method != "capkv-qa" and opts.question_share not in (None, 0, 0.0):
        raise ValueError(
            f"question_share={opts.question_share} is capkv-qa's retrieval channel; method {method!r} "
            "(capkv: the paper's single channel, question_share 0) has none: use method='capkv-qa'"
        )
    if not (isinstance(compression_ratio, (int, float)) and 0.0 <= compression_ratio < 1.0):
        raise ValueError(f"compression_ratio must be in [0, 1), got {compression_ratio!r}")
    if decoding_budget_tokens < 0:
        raise ValueError(f"decoding_budget_tokens must be >= 0, got {decoding_budget_tokens}")
    if decoding_interval_tokens < 1:
        raise ValueError(f"decoding_interval_tokens must be >= 1, got {decoding_interval_tokens}")
    _check_numbers(opts)
    for name, valid in _CHOICES.items():
        if getattr(opts, name) not in valid:
            raise ValueError(f"{name} must be {', '.join(valid[:-1])} or {valid[-1]}, got {getattr(opts, name)!r}")
    if decoding_budget_tokens > 0 and opts.window_tokens < 1:
        raise ValueError("decoding-time compression needs window_tokens >= 1 (the recent queries score the cache)")
    if opts.head_budget == "adaptive" and (decoding_budget_tokens > 0 or method == "capkv-greedy"):
        raise ValueError(
            "head_budget=adaptive applies to prefill compression with a scoring method "
            "(not capkv-greedy, not decoding-time compression)"
        )
    if method == "capkv-qa" and not 0.0 < question_share(opts, method) < 1.0:
        raise ValueError(
            f"capkv-qa: question_share must be in (0, 1), got {opts.question_share} (0 is capkv, the paper's method)"
        )


def _check_numbers(opts: PressOptions) -> None:
    for name in ("sink_tokens", "window_tokens", "n_future_positions", "stat_window", "past_tokens", "stat_tokens"):
        if getattr(opts, name) < 0:
            raise ValueError(f"{name} must be >= 0, got {getattr(opts, name)}")
    if opts.n_future_positions < 1:
        raise ValueError(
            "n_future_positions must be >= 1 (the future positions the query statistics are rotated "
            f"to), got {opts.n_future_positions}"
        )
    for name in ("tau", "ridge_ratio"):
        v = getattr(opts, name)
        if not (v > 0 and math.isfinite(v)):
            raise ValueError(f"{name} must be > 0, got {v}")
    for name, hi_open in (("head_floor", False), ("window_mix", False), ("past_mix", False), ("recent_share", True)):
        v = getattr(opts, name)
        if not (0.0 <= v < 1.0 if hi_open else 0.0 <= v <= 1.0):
            raise ValueError(f"{name} must be in [0, {'1)' if hi_open else '1]'}, got {v}")
    if opts.future_strata < 1:
        raise ValueError(f"future_strata must be >= 1, got {opts.future_strata}")
    for name in ("pool_kernel", "kernel_size"):
        v = getattr(opts, name)
        if v < 1 or v % 2 == 0:
            raise ValueError(f"{name} must be a positive odd integer, got {v}")
