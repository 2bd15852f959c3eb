"""Needle-in-a-haystack samples (real text, a needle sentence, the question, the real
continuation) and the per-head budget summaries, figures and files of the records."""

from __future__ import annotations

import math
import re

from icml26.methods.kvcache.config import Config, _too_short, haystack_text

_KEYS = (
    "blue door",
    "old lighthouse",
    "north gate",
    "red boat",
    "iron chest",
    "glass tower",
    "silver key",
    "green lamp",
)


def _source_text(cfg: Config) -> str:
    from icml26.core.data.text import load_corpus

    if cfg.haystack:
        return haystack_text(cfg.haystack)
    return "\n\n".join(load_corpus(cfg.corpus))


def make_samples(cfg: Config, tok, seed: int) -> list[dict]:
    """Needle samples: context ids (haystack with the needle sentence), question ids, answer,
    and the real continuation ids that follow the haystack in the source text."""
    import random

    text = _source_text(cfg)
    rng = random.Random(seed)
    out = []
    for length in cfg.context_tokens:
        need = length + cfg.continuation_tokens + 16
        for depth in cfg.needle_depths:
            for s in range(cfg.samples):
                key = _KEYS[rng.randrange(len(_KEYS))]
                code = str(rng.randrange(10000, 100000))
                needle = f" The secret code of the {key} is {code}. "
                question = (
                    f"\n\nQuestion: What is the secret code of the {key}?\nAnswer: The secret code of the {key} is"
                )
                needle_ids = tok(needle, add_special_tokens=False).input_ids
                ids = _token_window(text, tok, need, rng)
                n_hay = length - len(needle_ids)
                hay = ids[:n_hay]
                cont = ids[n_hay : n_hay + cfg.continuation_tokens]
                cut = int(round(depth * n_hay))
                ctx = hay[:cut] + needle_ids + hay[cut:]
                out.append(
                    {
                        "length": length,
                        "depth": depth,
                        "sample": s,
                        "context": ctx,
                        "continuation": cont,
                        "plain": ids[:length],
                        "plain_continuation": ids[length : length + cfg.continuation_tokens],
                        "question": tok(question, add_special_tokens=False).input_ids,
                        "answer": code,
                    }
                )
    return out


def _token_window(text: str, tok, need: int, rng) -> list[int]:
    """``need`` consecutive tokens of ``text`` from a random paragraph start (tokenizes a slice only)."""
    span = need * 6
    for _ in range(8):
        if len(text) <= span:
            start = 0
        else:
            start = rng.randrange(0, len(text) - span)
            nl = text.find("\n\n", start, start + span // 4)
            start = nl + 2 if nl >= 0 else start
        ids = tok(text[start : start + span], add_special_tokens=False).input_ids
        if len(ids) >= need:
            return ids[:need]
        span *= 2
    _too_short(need, len(tok(text, add_special_tokens=False).input_ids) if len(text) <= span else None)


def _number_closed(text: str) -> bool:
    """True once ``text`` has a digit run followed by a non-digit (its first number is final)."""
    return re.search(r"\d\D", text) is not None


def needle_correct(answer_text: str, code: str) -> bool:
    m = re.search(r"\d+", answer_text)
    return bool(m) and m.group(0) == code


def head_budget_summary(recs: list[dict]) -> dict:
    """Summary of the per-head budgets (``kept_per_head``, layers x KV heads) of sample records:
    ``kept_per_head_min`` / ``_max`` (over every layer, head and sample) and ``kept_per_head_gini``
    (the Gini coefficient of a sample's layers x heads counts, averaged over the samples; 0 for
    uniform budgets). Empty when the records carry none (e.g. saved by an older version)."""
    from icml26.methods.kvcache.press import gini

    mats = [r["kept_per_head"] for r in recs if r.get("kept_per_head")]
    if not mats:
        return {}
    flat = [[c for row in m for c in row] for m in mats]
    return {
        "kept_per_head_min": min(min(f) for f in flat),
        "kept_per_head_max": max(max(f) for f in flat),
        "kept_per_head_gini": sum(gini(f) for f in flat) / len(flat),
    }


def mean_kept_per_head(recs: list[dict]) -> list[list[float]]:
    """The (layers x KV heads) mean over sample records of their ``kept_per_head``."""
    mats = [r["kept_per_head"] for r in recs if r.get("kept_per_head")]
    if not mats:
        return []
    return [[sum(m[i][j] for m in mats) / len(mats) for j in range(len(mats[0][0]))] for i in range(len(mats[0]))]


def write_head_budgets(records: list[dict], out_dir) -> None:
    """``kept_per_head.json`` (per method and ratio: the mean layers x KV heads counts over the
    samples, and each sample's) and ``kept_per_head.png`` (one heat map per method and ratio)
    under ``out_dir``, from a run's records (the ``plot`` hook of ``icml26 evict-kv --out``)."""
    import json
    from pathlib import Path

    from icml26.core.output import atomic_path, atomic_write_text

    groups: dict = {}
    for r in records:
        if r.get("kind") == "sample" and r.get("kept_per_head"):
            groups.setdefault((r["method"], r.get("compression_ratio", r.get("decoding_budget_tokens"))), []).append(r)
    if not groups:
        return
    out = Path(out_dir)
    doc = {
        "layout": "kept_per_head[layer][kv_head]: cache entries kept (batch element 0)",
        "runs": [
            {
                "method": m,
                "compression_ratio" if isinstance(k, float) else "decoding_budget_tokens": k,
                **head_budget_summary(rs),
                "mean": mean_kept_per_head(rs),
                "samples": [
                    {
                        "context_tokens": r.get("context_tokens"),
                        "needle_depth": r.get("needle_depth"),
                        "sample": r.get("sample"),
                        "kept_per_head": r["kept_per_head"],
                    }
                    for r in rs
                ],
            }
            for (m, k), rs in groups.items()
        ],
    }
    atomic_write_text(out / "kept_per_head.json", json.dumps(doc))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(groups)
    cols = min(n, 4)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 3.6 * rows), squeeze=False)
    for ax, ((m, k), rs) in zip(axes.flat, groups.items()):
        mat = mean_kept_per_head(rs)
        im = ax.imshow(mat, aspect="auto", cmap="viridis", interpolation="nearest")
        hs = head_budget_summary(rs)
        ax.set_title(f"{m} @ {k}\ngini {hs['kept_per_head_gini']:.3f}", fontsize=8)
        ax.set_xlabel("KV head", fontsize=7)
        ax.set_ylabel("layer", fontsize=7)
        ax.tick_params(labelsize=6)
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04).ax.tick_params(labelsize=6)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.suptitle("entries kept per (layer, KV head), mean over samples", fontsize=9)
    fig.tight_layout()
    with atomic_path(out / "kept_per_head.png") as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)


def _mean(xs) -> float:
    xs = list(xs)
    return sum(xs) / len(xs) if xs else float("nan")


MIN_HAYSTACKS = 5  # fewer haystacks than this: no bootstrap interval (1-4 values are not an interval)


def haystack_interval(values: list[float], *, seed: int = 0) -> list[float] | None:
    """95% percentile-bootstrap interval of the mean over haystacks, ``[low, high]``; None with
    fewer than ``MIN_HAYSTACKS`` values (never a zero-width interval from one haystack)."""
    if len(values) < MIN_HAYSTACKS:
        return None
    from icml26.core.stats import bootstrap_mean_ci

    return [float(v) for v in bootstrap_mean_ci(list(values), seed=seed)]
