"""Syntactic and semantic centroids in LM hidden states, layer by layer.

Acevedo, Laio & Baroni, "Differential syntactic and semantic encoding in LLMs",
ICML 2026, arXiv 2601.04765 (official code: acevedo-s/syn-sem). What is reconstructed
from the official code rather than the paper body is said so below.

Per layer l, with X the (N, d) pooled hidden states:
  1. (optional) global centring: X <- X - mean_i X_i (official ``set_global_center``).
  2. Leave-one-out centroids (official ``utils.load_and_subtract_syn_group_averages``):
       C_syn[i] = mean of the *other* sentences with i's syntax (its POS template);
       C_sem[i] = mean of the *other* sentences with i's meaning (its paraphrases; the
       paper averages translations, here English paraphrases).
  3. Removal by subtraction: X - C_syn, X - C_sem. Shuffled-label control: X - C[pi] for a
     random permutation pi (official ``center_flag == -1``).
  4. Similarity: mean cosine (rank-equivalent to the official normalized L2) of each sentence
     to its syntax partners, semantic partners and unmatched sentences, before and after
     each removal.
  5. Information Imbalance Delta(A -> B) (Glielmo et al. 2022; official ``geometry.py``,
     k = 1, normalized L2): A = the sentences, B = their designated partner, each with the
     same removal applied; a delete-a-group jackknife over meaning groups gives the interval.
     ~0: the shared property is encoded; ~1: no information.

Reading (paper abstract): removing a centroid that carries a kind of information lowers that
kind's partner similarity and raises its Delta to ~1; docs/probe-syntax.md, "Specification"."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Literal

import numpy as np

from icml26.core.data.lm import load_causal_lm
from icml26.core.output import atomic_path, atomic_write_text
from icml26.core.progress import progress
from icml26.methods.probing import geometry as geo
from icml26.methods.probing import hidden
from icml26.methods.probing import sentences as S
from icml26.methods.probing.sentences import DEFAULT_STRUCTURES, STRUCTURES, designate_partners


@dataclass(frozen=True)
class Config:
    model: str = "smollm2-135m"  # built-in name, HF folder, or .gguf file
    sentences: str | None = None  # TSV (sentence, syntax_id, meaning_id); None = built-in WordNet set
    n_events: int = field(
        default=100, metadata={"sized": 10**5}
    )  # built-in set: meanings (each realised in every structure)
    structures: tuple[str, ...] = DEFAULT_STRUCTURES  # built-in set: syntax templates
    verify_parse: Literal["auto", "on", "off"] = "auto"  # built-in set: spaCy POS check of every structure
    pooling: Literal["last", "mean"] = "last"  # sentence vector: mean of the last tokens, or of all tokens
    last_tokens: int = 3  # pooling=last: mean of the last n tokens (official n = 3)
    batch_size: int = field(default=32, metadata={"sized": 65536})  # sentences per forward pass
    layer_stride: int = 1  # analyse every k-th layer (first and last always)
    center: bool = False  # subtract the global mean first (official global_centering)
    jackknife_blocks: int = 20  # delete-a-group jackknife blocks (meaning groups kept whole)
    ci_level: float = 0.95  # level of the jackknife intervals
    shuffle_control: bool = True  # also measure with shuffled labels (the chance level)

    def __post_init__(self):
        if self.n_events < 3:
            raise ValueError(f"n_events must be >= 3, got {self.n_events}")
        bad = [s for s in self.structures if s not in STRUCTURES]
        if bad:
            raise ValueError(f"structures: unknown {bad[0]!r}; valid: {', '.join(STRUCTURES)}")
        if len(set(self.structures)) < 2:
            raise ValueError("structures: at least 2 different structures are needed")
        if self.last_tokens < 1:
            raise ValueError(f"last_tokens must be >= 1, got {self.last_tokens}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.layer_stride < 1:
            raise ValueError(f"layer_stride must be >= 1, got {self.layer_stride}")
        if self.jackknife_blocks < 2:
            raise ValueError(f"jackknife_blocks must be >= 2, got {self.jackknife_blocks}")
        if not 0.0 < self.ci_level < 1.0:
            raise ValueError(f"ci_level must be in (0, 1), got {self.ci_level}")


def load_sentences(cfg: Config, seed: int):
    if cfg.sentences is not None:
        return S.load_tsv(cfg.sentences)
    return S.build_sentence_set(cfg.n_events, tuple(cfg.structures), seed=seed, verify=cfg.verify_parse)


def layer_metrics(
    x: np.ndarray,
    syn: np.ndarray,
    sem: np.ndarray,
    twin: np.ndarray,
    para: np.ndarray,
    blocks: np.ndarray,
    perm: np.ndarray | None,
    *,
    center: bool = False,
    level: float = 0.95,
) -> dict:
    """All similarities and Information Imbalances of one layer.

    x: (N, d); syn, sem, blocks: (N,) ints; twin, para: (N,) partner index or -1;
    perm: (N,) permutation for the shuffled control, or None. Returns a flat dict."""
    x = np.asarray(x, dtype=np.float64)
    if center:
        x = x - x.mean(axis=0, keepdims=True)
    c_syn = geo.loo_centroids(x, syn)  # (N, d)   step 2
    c_sem = geo.loo_centroids(x, sem)
    reps = {"": x, "_minus_syn_centroid": x - c_syn, "_minus_sem_centroid": x - c_sem}  # step 3
    if perm is not None:
        reps["_minus_shuffled_syn_centroid"] = x - c_syn[perm]
        reps["_minus_shuffled_sem_centroid"] = x - c_sem[perm]
    masks = geo.partner_masks(syn, sem)
    rows_syn, rows_sem = np.flatnonzero(twin >= 0), np.flatnonzero(para >= 0)
    out: dict = {}
    for suffix, z in reps.items():
        sim = geo.cosine_matrix(z)  # (N, N)   step 4
        dist = np.sqrt(np.maximum(2.0 - 2.0 * sim, 0.0))  # normalized L2
        kinds = ("syntax", "semantic", "unmatched")
        if "shuffled_syn" in suffix:
            kinds = ("syntax", "unmatched")
        elif "shuffled_sem" in suffix:
            kinds = ("semantic", "unmatched")
        for kind in kinds:
            out[f"sim_{kind}{suffix}"] = geo.mean_partner_similarity(sim, masks[kind])
        for kind, rows, partner in (("syntax", rows_syn, twin), ("semantic", rows_sem, para)):  # step 5
            if kind not in kinds or len(rows) < 4:
                continue
            d_a = dist[np.ix_(rows, rows)]
            d_b = dist[np.ix_(partner[rows], partner[rows])]
            theta, se, ci = geo.jackknife_ii(d_a, d_b, blocks[rows], level)
            out[f"ii_{kind}{suffix}"] = theta
            out[f"ii_{kind}{suffix}_ci"] = [ci[0], ci[1]]
    return out


def run(
    cfg: Config, *, seed: int = 0, device: str = "cpu", out_dir: str | Path | None = None, sentence_set=None
) -> Iterator[dict]:
    """Yield one ``result`` record per analysed layer, then a ``summary`` record.

    sentence_set: a ready :class:`~icml26.methods.probing.sentences.SentenceSet` (the
    command loads it first, to report bad input before any output); else it is loaded here."""
    t0 = time.perf_counter()
    ss = sentence_set if sentence_set is not None else load_sentences(cfg, seed)
    syn, sem = ss.codes()
    n = len(ss)
    if out_dir is not None:
        atomic_write_text(Path(out_dir) / "sentences.tsv", ss.to_tsv())
    rng = np.random.default_rng(seed)
    twin, para = designate_partners(ss, rng)
    blocks = geo.assign_blocks(sem, cfg.jackknife_blocks, rng)
    perm = rng.permutation(n) if cfg.shuffle_control else None
    t_data = time.perf_counter() - t0

    model, tok = load_causal_lm(cfg.model, device=device)
    t1 = time.perf_counter()
    with progress(n, "hidden states") as bar:
        h = hidden.extract(
            model,
            tok,
            ss.sentences,
            pooling=cfg.pooling,
            last_tokens=cfg.last_tokens,
            batch_size=cfg.batch_size,
            device=device,
            on_batch=bar.advance,
        )  # (L+1, N, d)
    t_hidden = time.perf_counter() - t1
    n_layers = h.shape[0]
    layers = sorted(set(range(0, n_layers, cfg.layer_stride)) | {n_layers - 1})

    t2 = time.perf_counter()
    results = []
    with progress(len(layers), "layers") as bar:
        for layer in layers:
            m = layer_metrics(h[layer], syn, sem, twin, para, blocks, perm, center=cfg.center, level=cfg.ci_level)
            rec = {"kind": "result", "layer": layer, **m}
            results.append(rec)
            bar.advance()
            yield rec
    t_metrics = time.perf_counter() - t2
    yield summarize(
        results,
        ss,
        cfg,
        n_layers=n_layers,
        seconds={"data": t_data, "hidden_states": t_hidden, "metrics": t_metrics, "total": time.perf_counter() - t0},
        twin_overlap=_twin_overlap(ss, twin),
    )


def _twin_overlap(ss, twin: np.ndarray) -> float:
    """Mean Jaccard word overlap between sentences and their designated syntax twins."""
    vals = []
    for i, j in enumerate(twin):
        if j < 0:
            continue
        a = set(ss.sentences[i].lower().rstrip(".").split())
        b = set(ss.sentences[j].lower().rstrip(".").split())
        vals.append(len(a & b) / len(a | b))
    return float(np.mean(vals)) if vals else float("nan")


def _ci_above(rec: dict, key: str, others: tuple[str, ...]) -> bool:
    """True when the CI of ``key`` lies above the CIs of every key in ``others``."""
    lo = (rec.get(f"{key}_ci") or [None])[0]
    if lo is None:
        return False
    for o in others:
        ci = rec.get(f"{o}_ci")
        if ci is None or ci[1] is None or not lo > ci[1]:
            return False
    return True


def summarize(results: list[dict], ss, cfg: Config, *, n_layers: int, seconds: dict, twin_overlap: float) -> dict:
    """The ``summary`` record: data, timing, and whether the paper's effect shows.

    mean_gap_<kind><removal>: layer mean of sim_<kind> - sim_unmatched (after the same
    removal): how much closer matched partners are than unmatched sentences; raw cosines
    of LM states share a large common direction, so the gap, not the raw value, is read.
    mean_ii_<kind><removal>: layer mean of the Information Imbalance.
    effect_syntax_layers: layers where removing the syntactic centroid raises ii_syntax
    with a CI above both the unremoved value and the shuffled-centroid control (and
    likewise effect_semantic_layers). peak_*_layer: where the partner similarity exceeds
    the unmatched baseline the most, and where the II is lowest."""
    layers = [r["layer"] for r in results]
    get = lambda k: np.array([np.nan if r.get(k) is None else r[k] for r in results], dtype=float)
    syn_gap = get("sim_syntax") - get("sim_unmatched")
    sem_gap = get("sim_semantic") - get("sim_unmatched")
    eff_syn = [
        r["layer"]
        for r in results
        if _ci_above(
            r,
            "ii_syntax_minus_syn_centroid",
            ("ii_syntax", "ii_syntax_minus_shuffled_syn_centroid") if cfg.shuffle_control else ("ii_syntax",),
        )
    ]
    eff_sem = [
        r["layer"]
        for r in results
        if _ci_above(
            r,
            "ii_semantic_minus_sem_centroid",
            ("ii_semantic", "ii_semantic_minus_shuffled_sem_centroid") if cfg.shuffle_control else ("ii_semantic",),
        )
    ]

    def argbest(v, fn):
        if np.all(np.isnan(v)):
            return None
        return int(layers[int(fn(v))])

    out = {
        "kind": "summary",
        "model": cfg.model,
        "sentences_source": ss.info.get("source"),
        "n_sentences": len(ss),
        "n_syntax_groups": len(set(ss.syntax)),
        "n_meaning_groups": len(set(ss.meaning)),
        "n_layers": n_layers,
        "layers_analysed": len(results),
        "pooling": cfg.pooling if cfg.pooling == "mean" else f"last{cfg.last_tokens}",
        "parse_verified": ss.info.get("parse_verified"),
        "parse_sentence_agreement": ss.info.get("parse_sentence_agreement"),
        "twin_word_overlap": twin_overlap,
        "peak_syntax_similarity_layer": argbest(syn_gap, np.nanargmax),
        "peak_semantic_similarity_layer": argbest(sem_gap, np.nanargmax),
        "min_ii_syntax_layer": argbest(get("ii_syntax"), np.nanargmin),
        "min_ii_semantic_layer": argbest(get("ii_semantic"), np.nanargmin),
        "syntax_semantic_profile_corr": float(np.corrcoef(syn_gap, sem_gap)[0, 1]) if len(results) > 2 else None,
        "effect_syntax_layers": len(eff_syn),
        "effect_semantic_layers": len(eff_sem),
        "seconds": round(seconds["total"], 2),
        "seconds_hidden_states": round(seconds["hidden_states"], 2),
        "seconds_metrics": round(seconds["metrics"], 2),
    }
    # layer means: similarity gap to unmatched sentences, and II, for each removal
    suffixes = ["", "_minus_syn_centroid", "_minus_sem_centroid"]
    if cfg.shuffle_control:
        suffixes += ["_minus_shuffled_syn_centroid", "_minus_shuffled_sem_centroid"]
    for kind in ("syntax", "semantic"):
        for suf in suffixes:
            if (kind == "syntax" and "shuffled_sem" in suf) or (kind == "semantic" and "shuffled_syn" in suf):
                continue
            gap = get(f"sim_{kind}{suf}") - get(f"sim_unmatched{suf}")
            out[f"mean_gap_{kind}{suf}"] = float(np.nanmean(gap))
            out[f"mean_ii_{kind}{suf}"] = float(np.nanmean(get(f"ii_{kind}{suf}")))
    return out


COLUMNS = (
    "layer",
    "sim_syntax",
    "sim_syntax_minus_syn_centroid",
    "sim_semantic",
    "sim_semantic_minus_sem_centroid",
    "sim_unmatched",
    "ii_syntax",
    "ii_syntax_minus_syn_centroid",
    "ii_semantic",
    "ii_semantic_minus_sem_centroid",
)


def plot(records: list[dict], out_dir: Path) -> None:
    """``layer_profile.png``: similarities (left) and Information Imbalances with CIs (right)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    res = [r for r in records if r.get("kind") == "result"]
    if not res:
        return
    L = np.array([r["layer"] for r in res])
    get = lambda k: np.array([np.nan if r.get(k) is None else r[k] for r in res], dtype=float)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), constrained_layout=True)
    ax = axes[0]
    for kind, color in (("syntax", "C0"), ("semantic", "C3")):
        own = "syn" if kind == "syntax" else "sem"
        other = "sem" if kind == "syntax" else "syn"
        for suf, style, label in (
            ("", "-", ""),
            (f"_minus_{own}_centroid", "--", f" - {own} centroid"),
            (f"_minus_{other}_centroid", "-.", f" - {other} centroid"),
            (f"_minus_shuffled_{own}_centroid", ":", f" - shuffled {own} centroid"),
        ):
            v = get(f"sim_{kind}{suf}") - get(f"sim_unmatched{suf}")
            if not np.all(np.isnan(v)):
                ax.plot(
                    L, v, color=color, ls=style, label=f"{'syntax twins' if kind == 'syntax' else 'paraphrases'}{label}"
                )
    ax.axhline(0.0, color="gray", lw=0.8)
    ax.set_xlabel("layer")
    ax.set_ylabel("cosine(matched) - cosine(unmatched)")
    ax.set_title("similarity gap to unmatched sentences")
    ax.legend(fontsize=7)
    ax = axes[1]
    for key, color, style, label in (
        ("ii_syntax", "C0", "-", "syntax"),
        ("ii_syntax_minus_syn_centroid", "C0", "--", "syntax - syn centroid"),
        ("ii_syntax_minus_sem_centroid", "C2", "-.", "syntax - sem centroid"),
        ("ii_syntax_minus_shuffled_syn_centroid", "C0", ":", "syntax - shuffled"),
        ("ii_semantic", "C3", "-", "semantic"),
        ("ii_semantic_minus_sem_centroid", "C3", "--", "semantic - sem centroid"),
        ("ii_semantic_minus_syn_centroid", "C1", "-.", "semantic - syn centroid"),
        ("ii_semantic_minus_shuffled_sem_centroid", "C3", ":", "semantic - shuffled"),
    ):
        v = get(key)
        if np.all(np.isnan(v)):
            continue
        ax.plot(L, v, color=color, ls=style, label=label)
        cis = [r.get(f"{key}_ci") or [np.nan, np.nan] for r in res]
        lo = np.array([np.nan if c[0] is None else c[0] for c in cis], dtype=float)
        hi = np.array([np.nan if c[1] is None else c[1] for c in cis], dtype=float)
        ax.fill_between(L, lo, hi, color=color, alpha=0.12, lw=0)
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set_xlabel("layer")
    ax.set_ylabel("Information Imbalance  sentence -> partner")
    ax.set_title("Information Imbalance (0 = shared, 1 = none)")
    ax.legend(fontsize=7)
    with atomic_path(out_dir / "layer_profile.png") as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)
