"""KV-cache eviction: CapKV (ICML 2026, arXiv 2604.25975) beside the standard baselines.

Library API (no CLI needed)::

    from icml26.methods.kvcache import KVPress
    with KVPress(method="capkv", compression_ratio=0.5)(model):
        model.generate(input_ids, max_new_tokens=32)

Modules: ``spec`` (method names and settings), ``options`` (press options), ``queries``,
``capkv``, ``baselines``, ``selection`` and ``scoring`` (the scores by name), ``logdet``
(capacity objective, exact greedy), ``press`` (hooks), ``kvpress_adapter`` (kvpress interop),
``config`` / ``samples`` / ``evaluate`` / ``decode`` (the harness behind ``icml26 evict-kv``).
The torch-backed names below load on first use, so ``config`` and ``spec`` stay torch-free.
"""

_LAZY = {
    "KVPress": "press",
    "cache_bytes": "press",
    "capture_layers": "press",
    "compress_captured": "press",
    "n_kept": "selection",
    "select_indices": "selection",
    "METHODS": "spec",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"icml26.methods.kvcache.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'icml26.methods.kvcache' has no attribute {name!r}")
