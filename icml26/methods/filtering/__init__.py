"""Classifier-based quality filtering of pretraining data (CQF, arXiv 2510.00866) and its baselines.

Modules (import directly; nothing heavy loads here):
  jsonl        streaming JSONL/gzip/parquet documents in, atomic JSON lines out
  corpus       the HQ set and web-like pool built from real Debian text (seeded degradations, inserted bad lines)
  classifiers  hashed n-gram LR (fastText/DCLM-style), MiniLM-embedding LR (the paper's sBERT), DSIR weights
  cqf          scoring streams and selecting the top fraction / above a threshold
  lines        line-level scores and selection (one line rule for score and select; --min-kept)
  analysis     implicit filtering of the HQ set (paper Sec. 4-5)
  proxy        small-LM proxy experiments and the data-conditioning relation (Sec. 6-7)
"""
