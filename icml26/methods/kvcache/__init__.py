"""KV-cache eviction: CapKV (ICML 2026, arXiv 2604.25975) beside the standard baselines.

Library API (no CLI needed)::

    from icml26.methods.kvcache import KVPress
    with KVPress(method="capkv", compression_ratio=0.5)(model):
        model.generate(input_ids, max_new_tokens=32)

Modules: ``scoring`` (CapKV leverage score + baselines, selection), ``logdet`` (capacity
objective, exact greedy and brute force), ``press`` (hooks), ``kvpress_adapter`` (run as a
kvpress press), ``evaluate`` (needle retrieval and fidelity harness behind ``icml26 evict-kv``).
"""

from icml26.methods.kvcache.press import KVPress, cache_bytes, capture_layers, compress_captured  # noqa: F401
from icml26.methods.kvcache.scoring import METHODS, n_kept, select_indices  # noqa: F401
