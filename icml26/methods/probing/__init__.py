"""Probing LM hidden states for syntax and semantics (``icml26 probe-syntax``).

Acevedo, Laio & Baroni, "Differential syntactic and semantic encoding in LLMs"
(ICML 2026, arXiv 2601.04765; official code acevedo-s/syn-sem).

  geometry           leave-one-out centroids, matched-pair similarities, Information Imbalance + jackknife
  sentences          controlled sentence sets (WordNet vocabulary, spaCy-verified structures), TSV loader
  hidden             per-layer hidden states through forward hooks, mean / last-token pooling
  syntax_semantics   the analysis per layer: Config, run(), the layer-profile plot
"""
