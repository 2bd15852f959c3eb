"""A filter-data quality classifier as a datatrove filter step, usable without icml26.

``filter-data train`` copies this file beside ``model.safetensors``; it needs numpy,
scikit-learn and safetensors only (datatrove when used in a pipeline). It recomputes the
hashed n-gram features exactly as icml26 does (scikit-learn ``HashingVectorizer`` with the
model's settings) and the score: ``sigmoid(x . coef + b)`` (ngram) or ``x . coef`` (dsir).

    from datatrove_filter import CQFQualityFilter
    step = CQFQualityFilter("model/model.safetensors", threshold=0.5)   # in a datatrove pipeline
    step.score(["some text", ...])                                      # or on its own
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

try:  # a datatrove filter step when datatrove is installed, a plain class otherwise
    from datatrove.pipeline.filters.base_filter import BaseFilter
except ImportError:  # pragma: no cover - depends on the user's environment
    BaseFilter = object


class CQFQualityFilter(BaseFilter):
    name = "CQF quality classifier"

    def __init__(self, model_path=None, threshold=None, field="quality_score", exclusion_writer=None):
        if BaseFilter is not object:
            super().__init__(exclusion_writer)
        from safetensors import safe_open
        from sklearn.feature_extraction.text import HashingVectorizer

        path = Path(model_path) if model_path else Path(__file__).with_name("model.safetensors")
        with safe_open(str(path), "np") as f:
            meta = f.metadata() or {}
            self.coef = f.get_tensor("coef").astype(np.float32)
            self.intercept = float(f.get_tensor("intercept")[0])
        self.classifier = meta.get("classifier")
        if self.classifier not in ("ngram", "dsir"):
            raise ValueError(f"{path}: classifier {self.classifier!r}; this step runs the ngram and dsir classifiers")
        s = json.loads(meta["settings"])
        self.vectorizer = HashingVectorizer(
            n_features=s["n_features"],
            ngram_range=(1, s["ngram_max"]),
            alternate_sign=False,
            norm=s["norm"],
            lowercase=True,
            dtype=np.float32,
        )
        self.threshold = (0.5 if self.classifier == "ngram" else 0.0) if threshold is None else float(threshold)
        self.field = field

    def score(self, texts) -> np.ndarray:
        """(N,) float64: P(HQ | x) for ngram, the log importance weight for dsir."""
        if len(texts) == 0:
            return np.zeros(0)
        z = np.asarray(self.vectorizer.transform(list(texts)) @ self.coef, dtype=np.float64).reshape(-1)
        if self.classifier == "dsir":
            return z
        return 1.0 / (1.0 + np.exp(-np.clip(z + self.intercept, -60.0, 60.0)))

    def filter(self, doc) -> bool:
        """datatrove's contract: keep the document (True) when its score >= threshold; the score
        goes to ``doc.metadata[field]``."""
        s = float(self.score([doc.text])[0])
        doc.metadata[self.field] = s
        return s >= self.threshold
