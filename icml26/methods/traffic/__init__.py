"""Lane-level traffic forecasting: MiniTraffic (ICML 2026) beside the forecasting baselines.

Modules: ``data`` (splits, windows, metrics), ``baselines``, ``minitraffic``, ``harness``
(Config, run), ``checkpoints`` (pretrain / finetune / eval files). Notes:
docs/traffic.md.
"""
