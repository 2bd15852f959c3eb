"""Implicit filtering of the high-quality set (paper Sec. 4-5).

With the Bayes-optimal classifier ``s = r / (1 + r)``, ``r = p_HQ / p_LQ``, CQF at top
fraction ``k`` keeps ``{x : r(x) >= tau_k}`` from the pool, and

    p_CQF(x) = 1[r(x) >= tau] p_LQ(x) / Z = w(x) p_HQ(x),   w(x) ∝ 1[r(x) >= tau] / r(x)

so the selected data is a *filtered, reweighted HQ distribution*: HQ documents whose score
falls under the pool threshold ``tau_k`` get weight 0. This module measures it:

1. Score a pool sample (the CDF ``C`` of the paper) and held-out HQ documents.
2. For each top fraction ``k``: ``tau_k`` = the pool's (1 - k) quantile; the fraction of
   held-out HQ that CQF would itself filter out (``hq_filtered_fraction``); when the pool
   carries ``make-corpus`` metadata, the precision/recall of clean curated text among the
   kept documents and the kept rate of every degradation ("removing noise, not finding gold").
3. HQ score deciles (Sec. 5's diagnostic): mean score, length and source mix per decile.
4. Length bias (App. C): Spearman correlation of score and length, on HQ and on the pool.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np

from icml26.core.settings import setting
from icml26.methods.filtering.classifiers import roc_auc


@dataclass(frozen=True)
class AnalyzeConfig:
    top_fractions: tuple[float, ...] = setting(
        (0.5, 0.3, 0.2, 0.1, 0.05, 0.02),
        "CQF top fractions k of the pool: one implicit-filtering row each",
        unit="fraction",
    )
    n_deciles: int = setting(10, "quantile bins of the HQ scores (source mix and length per bin)", sized=10**4)
    max_docs: int = setting(0, "read at most this many documents per file (0 = all)", sized=10**9)

    def __post_init__(self):
        if not self.top_fractions or any(not 0.0 < k <= 1.0 for k in self.top_fractions):
            raise ValueError(f"top_fractions must be in (0, 1], got {list(self.top_fractions)}")
        if self.n_deciles < 2:
            raise ValueError(f"n_deciles must be >= 2, got {self.n_deciles}")
        if self.max_docs < 0:
            raise ValueError(f"max_docs must be >= 0, got {self.max_docs}")


def _read(path: str, limit: int) -> list[dict]:
    from icml26.methods.filtering.jsonl import iter_documents

    out = []
    for _, d in iter_documents(path):
        out.append(d)
        if limit and len(out) >= limit:
            break
    return out


def _label(d: dict) -> str:
    md = d.get("metadata") or {}
    deg = md.get("degradation")
    return deg if deg not in (None, "none") else str(md.get("source", "unknown"))


def implicit_filtering(hq_scores: np.ndarray, pool_scores: np.ndarray, top_fractions) -> list[dict]:
    """Rows of step 2 without metadata: ``tau_k`` and the HQ fraction CQF would drop."""
    rows = []
    for k in top_fractions:
        tau = float(np.quantile(pool_scores, 1.0 - k, method="higher")) if k < 1 else float(pool_scores.min())
        rows.append(
            {"top_fraction": float(k), "score_threshold": tau, "hq_filtered_fraction": float(np.mean(hq_scores < tau))}
        )
    return rows


def cqf_distribution(p_hq: np.ndarray, p_lq: np.ndarray, top_fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """Exact CQF on a finite space with the Bayes-optimal classifier (Sec. 4).

    p_hq, p_lq: (V,) probability vectors (p_lq > 0). Keeps the highest-ratio atoms
    ``r = p_hq / p_lq`` until their LQ mass reaches ``top_fraction`` (ties broken by index;
    the boundary atom is kept whole). Returns ``(p_cqf, w)``: ``p_cqf = 1[r >= tau] p_lq / Z``
    and the weights ``w = 1[r >= tau] / (r Z)`` of the identity ``p_cqf = w * p_hq``."""
    p_hq = np.asarray(p_hq, dtype=np.float64)
    p_lq = np.asarray(p_lq, dtype=np.float64)
    if p_hq.shape != p_lq.shape or np.any(p_lq <= 0):
        raise ValueError("p_hq and p_lq must have the same shape and p_lq > 0")
    r = p_hq / p_lq
    order = np.argsort(-r, kind="stable")
    m = int(np.searchsorted(np.cumsum(p_lq[order]), top_fraction - 1e-12) + 1)
    keep = np.zeros(len(r), dtype=bool)
    keep[order[:m]] = True
    Z = float(p_lq[keep].sum())
    p_cqf = np.where(keep, p_lq, 0.0) / Z
    w = np.where(keep & (r > 0), 1.0 / np.where(r > 0, r, 1.0), 0.0) / Z
    return p_cqf, w


def run(cfg: AnalyzeConfig, *, model_path: str, hq: str, pool: str) -> Iterator[dict]:
    from scipy.stats import spearmanr

    from icml26.methods.filtering.classifiers import load_model
    from icml26.methods.filtering.corpus import is_gold

    model = load_model(model_path)
    # 1. score
    hq_docs, pool_docs = _read(hq, cfg.max_docs), _read(pool, cfg.max_docs)
    s_hq = model.score([d["text"] for d in hq_docs])
    s_pool = model.score([d["text"] for d in pool_docs])
    has_meta = any("degradation" in (d.get("metadata") or {}) for d in pool_docs)
    gold = np.array([is_gold(d) for d in pool_docs])
    labels = np.array([_label(d) for d in pool_docs])
    # 2. thresholds
    for row in implicit_filtering(s_hq, s_pool, cfg.top_fractions):
        keep = s_pool >= row["score_threshold"]
        rec = {"kind": "result", "analysis": "threshold", **row, "pool_kept_fraction": float(keep.mean())}
        if has_meta:
            rec["gold_precision"] = float(gold[keep].mean()) if keep.any() else None
            rec["gold_recall"] = float(keep[gold].mean()) if gold.any() else None
            rec["kept_rate"] = {str(lab): float(keep[labels == lab].mean()) for lab in sorted(set(labels.tolist()))}
        yield rec
    # 3. HQ deciles (0 = lowest scores)
    order = np.argsort(s_hq, kind="stable")
    lens = np.array([len(d["text"]) for d in hq_docs])
    for q, idx in enumerate(np.array_split(order, cfg.n_deciles)):
        if len(idx) == 0:
            continue
        srcs: dict[str, int] = {}
        for i in idx:
            lab = _label(hq_docs[int(i)])
            srcs[lab] = srcs.get(lab, 0) + 1
        yield {
            "kind": "decile",
            "decile": q,
            "n_docs": int(len(idx)),
            "score_mean": float(s_hq[idx].mean()),
            "length_mean": float(lens[idx].mean()),
            "sources": srcs,
        }
    # 4. length bias + summary
    plen = np.array([len(d["text"]) for d in pool_docs])
    summary = {
        "kind": "summary",
        "classifier": model.classifier,
        "n_hq": len(hq_docs),
        "n_pool": len(pool_docs),
        "auc_hq_vs_pool": roc_auc(np.r_[np.ones(len(s_hq)), np.zeros(len(s_pool))], np.r_[s_hq, s_pool]),
        "length_spearman_hq": float(spearmanr(s_hq, lens).statistic) if len(s_hq) > 2 else None,
        "length_spearman_pool": float(spearmanr(s_pool, plen).statistic) if len(s_pool) > 2 else None,
    }
    if has_meta and gold.any() and (~gold).any():
        summary["auc_gold_vs_rest_in_pool"] = roc_auc(gold, s_pool)
    yield summary
