"""The scoring rules of KV-cache eviction, by policy name (``SCORERS``), and the pieces they share.

Every rule maps one layer's cache to a score per (batch, KV head, token), higher = keep::

    score_<name>(x: LayerInputs, p: ScoreParams) -> Tensor (B, Hkv, T)

Selection (``select_indices``) then keeps the sinks, a recent window and the top-scoring rest
per KV head, so every head keeps exactly the same budgeted count. The rules live in
``capkv`` (CapKV, the paper, arXiv 2604.25975, and our ``capkv-qa`` channel) and ``baselines``;
the layer's inputs and queries in ``queries``; the options in ``options``; selection in
``selection``. This module re-exports them so ``scoring.<name>`` keeps working.
"""

from __future__ import annotations

from typing import Callable

import torch

from icml26.methods.kvcache.baselines import (  # noqa: F401
    score_expected_attention,
    score_h2o,
    score_knorm,
    score_random,
    score_snapkv,
    score_streaming,
    score_tova,
)
from icml26.methods.kvcache.capkv import (  # noqa: F401
    _expected_weights_grouped,
    _expected_weights_strata,
    _expected_weights_window,
    _leverage,
    _pad_sinks,
    _past_attention,
    _window_count,
    _window_source,
    _without_sinks,
    adaptive_recent,
    capkv_token_weights,
    capkv_weights,
    observed_attention,
    pool_scores,
    recent_window,
    reserve_recent,
    reserve_top,
    score_capkv,
    score_capkv_channels,
    score_capkv_question,
)
from icml26.methods.kvcache.options import PressOptions, ScoreParams  # noqa: F401
from icml26.methods.kvcache.queries import (  # noqa: F401
    LayerInputs,
    _group_mean,
    _moments,
    _repeat_kv,
    _stat_rows,
    _window_attention,
    averaged_rope_matrix,
    layer_prerope_queries,
    layer_rotary,
    prerope_moments,
    prerope_queries,
    query_statistics,
    rope,
    window_queries,
)
from icml26.methods.kvcache.selection import n_kept, select_adaptive, select_indices  # noqa: F401
from icml26.methods.kvcache.spec import METHODS  # noqa: F401

SCORERS: dict[str, Callable[[LayerInputs, ScoreParams], torch.Tensor]] = {
    "capkv": score_capkv,
    "capkv-qa": score_capkv,  # its retrieval channel is reserved first by the press (question_share)
    "streaming": score_streaming,
    "snapkv": score_snapkv,
    "h2o": score_h2o,
    "tova": score_tova,
    "knorm": score_knorm,
    "random": score_random,
    "expected-attention": score_expected_attention,
}
