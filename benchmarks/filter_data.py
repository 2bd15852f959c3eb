"""filter-data benchmarks: scoring throughput per classifier, and line-level vs document-level filtering.

    .venv/bin/python benchmarks/filter_data.py [--docs-per-source 600] [--n-docs 3000] [--n-embed 300]
                                               [--proxy-records DIR/records.jsonl ...]
    .venv/bin/python benchmarks/filter_data.py --experiment lines [--line-docs-per-source 2000] [--print-only]
    .venv/bin/python benchmarks/filter_data.py --experiment proxy-tables --proxy-records DIR/records.jsonl ...

``--experiment throughput`` (the default):

1. Builds a corpus with `make-corpus` (real Debian text), trains the n-gram LR, DSIR and
   MiniLM-embedding scorers, and fastText (`fasttext-numpy2-wheel`, supervised, word
   bigrams, as DCLM's filter) when it is installed.
2. Scores the held-out pool end to end (parse JSONL -> score -> write JSONL, the `score`
   command's path) and reports docs/s, MB/s and the ratio to fastText; also each scorer's
   AUC for telling clean curated pool documents from the rest (the filter's actual job).
3. Prints the proxy-experiment table from `filter-data proxy --out DIR` records, if given.

``--experiment proxy-tables`` prints the docs' markdown tables from ``filter-data proxy`` records
(``benchmarks/filter_data_proxy.sh`` makes them).

``--experiment lines`` (``score --level line`` / ``select --level line``; see docs/filter-data.md):
1. Builds the corpus (``--line-docs-per-source`` per source, seed ``--seed``) and trains the
   n-gram classifier on hq vs pool, as ``make-corpus`` + ``train`` do.
2. Corrupts the held-out HQ documents (real text the classifier never saw) at line level with
   ``corpus.insert_bad_lines`` (seed ``--seed + 1``, ``--templates``: ``eval`` lines, keywords and
   domains disjoint from those that build the training pool, and ``train`` ones): per document, with probability 0.20 no
   bad line, 0.55 a light dose (a fraction U(0.05, 0.3) of its non-blank line count, at least
   1), 0.25 a heavy dose (U(1, 3) times its line count, at least 2). Each inserted line is
   boilerplate, spam, an informal line (a fortune not in the training pool) or such a line
   with its words shuffled, uniformly.
3. Scores every line and every whole document with the classifier; the documents are split
   in half (dev / test, seeded). On dev the line threshold T is chosen from a grid by the F1
   of the dropped lines; on test, for every T of the grid and ``--min-kept`` 0.5:
   precision / recall of the dropped lines (the line decisions alone, and in the end, with
   the lines of documents dropped by ``--min-kept``), clean and bad words kept; document-level
   filtering (documents ranked by their whole-text score, a top prefix kept) at the same
   kept-word budget and at equal or lower bad words kept (the prefix is interpolated inside
   its last document, in document-level's favour).
   Target: line level keeps more clean words than document level at equal or lower bad words kept.
4. Resumable: the model and the scores are cached under ``runs/filter_data_lines/``; the results
   go to ``benchmarks/results/filter_data_lines.json`` (``--print-only`` reprints them).
   ``--seeds 0 1 2`` (the default): one corpus, corruption and dev/test split per seed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from icml26.methods.filtering import classifiers as C  # noqa: E402
from icml26.methods.filtering import corpus as K  # noqa: E402
from icml26.methods.filtering.cqf import score_stream  # noqa: E402
from icml26.methods.filtering.jsonl import DocumentWriter  # noqa: E402


class FastTextScorer:
    """fastText supervised classifier (DCLM's quality filter: word bigrams) behind the same
    interface; epoch 25 / lr 0.5 as fastText's text-classification tutorial tunes it."""

    def __init__(self, hq, pool, seed=0):
        import fasttext

        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
            for t in hq:
                f.write("__label__hq " + " ".join(t.split()) + "\n")
            for t in pool:
                f.write("__label__lq " + " ".join(t.split()) + "\n")
            path = f.name
        self.model = fasttext.train_supervised(
            path, wordNgrams=2, epoch=25, lr=0.5, dim=64, seed=seed, thread=1, verbose=0
        )
        os.unlink(path)
        self.classifier = "fasttext"

    def score(self, texts):
        labels, probs = self.model.predict([" ".join(t.split()) for t in texts], k=2)
        return np.array([dict(zip(lab, p)).get("__label__hq", 0.0) for lab, p in zip(labels, probs)])


def _timed_stream(model, path, n):
    """(wall seconds, CPU seconds of this process) to score ``path`` end to end."""
    t0, c0 = time.perf_counter(), time.process_time()
    with DocumentWriter(os.devnull) as w:
        st = score_stream(model, path, w, batch_size=256)
    dt, dc = time.perf_counter() - t0, time.process_time() - c0
    assert st.written == n
    return dt, dc


# ---------------------------------------------------------------- line-level experiment
ROOT = Path(__file__).resolve().parents[1]
LINE_RESULTS = ROOT / "benchmarks/results/filter_data_lines.json"
LINE_CACHE = ROOT / "runs/filter_data_lines"
T_GRID = (0.02, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5)
DOSES = (("clean", 0.20, None), ("light", 0.55, (0.05, 0.3)), ("heavy", 0.25, (1.0, 3.0)))


def _line_data(a) -> dict:
    """Stage 1-2 (cached): corrupted held-out documents with their line labels, line scores and whole-text scores."""
    from icml26.methods.filtering import lines as L

    LINE_CACHE.mkdir(parents=True, exist_ok=True)
    tag = f"dps{a.line_docs_per_source}_seed{a.seed}"
    data_file = LINE_CACHE / f"scores_{tag}_{a.templates}.json"
    if data_file.exists():
        print(f"resuming: scores from {data_file.relative_to(ROOT)}", file=sys.stderr)
        return json.loads(data_file.read_text())
    parts = K.build(K.CorpusConfig(docs_per_source=a.line_docs_per_source), a.seed)
    model_file = LINE_CACHE / f"ngram_{tag}.safetensors"
    if model_file.exists():
        m = C.load_model(model_file)
        train_s = None
    else:
        t0 = time.perf_counter()
        m = C.train_model(
            [d["text"] for d in parts["hq"]], [d["text"] for d in parts["pool"]], classifier="ngram", seed=a.seed
        )
        train_s = time.perf_counter() - t0
        m.save(model_file)
    used = {d["id"] for k in ("pool", "pool_heldout") for d in parts[k] if d["metadata"]["source"] == K.INFORMAL_SOURCE}
    informal = [
        ln.strip()
        for i, t in enumerate(K.source_documents(K.INFORMAL_SOURCE))
        if f"{K.INFORMAL_SOURCE}-{i}" not in used
        for ln in t.split("\n")
        if len(ln.split()) >= 3
    ]
    rng = np.random.default_rng(a.seed + 1)
    docs = []
    for d in parts["hq_heldout"]:
        text = d["text"]
        n_lines = sum(1 for ln in L.split_lines(text) if not L.is_blank(ln))
        dose = DOSES[int(rng.choice(len(DOSES), p=[p for _, p, _ in DOSES]))]
        n_bad = (
            0 if dose[2] is None else max(1 if dose[0] == "light" else 2, int(round(rng.uniform(*dose[2]) * n_lines)))
        )
        text, labels = K.insert_bad_lines(text, n_bad, rng, informal, templates=a.templates)
        docs.append({"id": d["id"], "source": d["metadata"]["source"], "dose": dose[0], "text": text, "labels": labels})
    t0 = time.perf_counter()
    texts = [d["text"] for d in docs]
    whole = m.score(texts).tolist()
    per_line = L.score_lines(m, texts)
    score_s = time.perf_counter() - t0
    for d, w, ls in zip(docs, whole, per_line):
        d["doc_score"], d["line_scores"] = w, ls
    out = {
        "docs": docs,
        "val_auc": m.metrics.get("val_auc"),
        "n_hq": len(parts["hq"]),
        "n_pool": len(parts["pool"]),
        "n_informal_lines": len(informal),
        "train_s": train_s,
        "score_s": score_s,
    }
    from icml26.core.output import atomic_write_text

    atomic_write_text(data_file, json.dumps(out))
    return out


def _prefix(order, clean, bad, *, budget=None, max_bad=None):
    """(clean, bad) words kept by document-level filtering: the top documents of ``order``
    until the kept words reach ``budget`` (or the bad words reach ``max_bad``), the last
    document counted fractionally (in document-level's favour)."""
    c = b = 0.0
    for i in order:
        tot = clean[i] + bad[i]
        if budget is not None and c + b + tot > budget:
            f = (budget - c - b) / tot
            return c + f * clean[i], b + f * bad[i]
        if max_bad is not None and b + bad[i] > max_bad:
            f = (max_bad - b) / bad[i]
            return c + f * clean[i], b + f * bad[i]
        c, b = c + clean[i], b + bad[i]
    return c, b


def _line_eval(docs, t, min_kept=0.5) -> dict:
    """Line-level selection at threshold ``t`` against document-level filtering at equal budgets."""
    from icml26.methods.filtering import lines as L

    tp = fp = tp_end = fp_end = n_bad_lines = n_clean_lines = 0
    kind_bad, kind_dropped = {}, {}
    clean_kept = bad_kept = 0
    clean_w, bad_w = [], []
    for d in docs:
        lines = L.split_lines(d["text"])
        sel = L.select_lines(lines, d["line_scores"], t, min_kept, doc_score=d["doc_score"])
        dropped = set(sel.dropped)
        cw = bw = 0
        for i, (ln, lab, s) in enumerate(zip(lines, d["labels"], d["line_scores"])):
            if s is None:
                continue
            w = L.n_words(ln)
            if lab is None:
                n_clean_lines += 1
                cw += w
            else:
                n_bad_lines += 1
                bw += w
                kind_bad[lab] = kind_bad.get(lab, 0) + 1
            gone = i in dropped
            removed = gone or not sel.keep_document
            if lab is None:
                fp += gone
                fp_end += removed
                clean_kept += 0 if removed else w
            else:
                tp += gone
                tp_end += removed
                kind_dropped[lab] = kind_dropped.get(lab, 0) + gone
                bad_kept += 0 if removed else w
        clean_w.append(cw)
        bad_w.append(bw)
    clean_total, bad_total = sum(clean_w), sum(bad_w)
    budget = clean_kept + bad_kept
    res = {
        "threshold": t,
        "min_kept": min_kept,
        "line_precision": tp / (tp + fp) if tp + fp else None,
        "line_recall": tp / n_bad_lines if n_bad_lines else None,
        "final_precision": tp_end / (tp_end + fp_end) if tp_end + fp_end else None,
        "final_recall": tp_end / n_bad_lines if n_bad_lines else None,
        "recall_by_kind": {k: kind_dropped.get(k, 0) / v for k, v in sorted(kind_bad.items())},
        "clean_lines_dropped_fraction": fp / n_clean_lines,
        "budget_words": budget,
        "clean_words_total": clean_total,
        "bad_words_total": bad_total,
        "line_clean_kept": clean_kept,
        "line_bad_kept": bad_kept,
        "line_clean_kept_fraction": clean_kept / clean_total,
        "line_bad_kept_fraction": bad_kept / bad_total,
    }
    for rule in L.DOC_SCORES:
        if rule == "document":
            key = [d["doc_score"] for d in docs]
        else:
            key = [
                L.doc_score_from_lines(d["line_scores"], L.split_lines(d["text"]), rule, whole=d["doc_score"])
                for d in docs
            ]
        order = sorted(range(len(docs)), key=lambda i: -key[i])  # stable: ties in input order
        c, b = _prefix(order, clean_w, bad_w, budget=budget)
        c2, b2 = _prefix(order, clean_w, bad_w, max_bad=bad_kept)
        res[f"doc_{rule}_at_budget"] = {"clean_kept": c, "bad_kept": b}
        res[f"doc_{rule}_at_equal_bad"] = {"clean_kept": c2, "bad_kept": b2}
    db, de = res["doc_document_at_budget"], res["doc_document_at_equal_bad"]
    res["target_met"] = bool(
        clean_kept > db["clean_kept"] and bad_kept <= db["bad_kept"] and clean_kept > de["clean_kept"]
    )
    return res


def _print_lines(r: dict) -> None:
    s = r["setup"]
    print(
        f"seed {s['seed']}: line-level vs document-level filtering: {s['n_docs']} held-out HQ documents "
        f"({s['n_test']} test), {s['n_bad_lines']} inserted bad lines ({s['bad_words_fraction']:.1%} of words), "
        f"n-gram classifier val_auc {s['val_auc']:.3f}; --min-kept {s['min_kept']}"
    )
    print(f"T chosen on dev (F1 of dropped lines): {r['t_dev']}")
    print(
        "T: line threshold; P / R: precision / recall of the dropped lines (line: the threshold's decisions; final: "
        "with "
        "--min-kept); clean / bad kept: fractions of the words; doc @B: document level at the same kept-word budget, "
        "@=bad: at equal or lower bad words kept"
    )
    hdr = [
        "T",
        "line P",
        "line R",
        "final P",
        "final R",
        "clean kept",
        "bad kept",
        "doc clean@B",
        "doc bad@B",
        "doc clean@=bad",
        "met",
    ]
    print("".join(f"{h:>15}" for h in hdr))
    for x in r["test"]:
        db, de = x["doc_document_at_budget"], x["doc_document_at_equal_bad"]
        row = [
            x["threshold"],
            x["line_precision"],
            x["line_recall"],
            x["final_precision"],
            x["final_recall"],
            x["line_clean_kept_fraction"],
            x["line_bad_kept_fraction"],
            db["clean_kept"] / x["clean_words_total"],
            db["bad_kept"] / x["bad_words_total"],
            de["clean_kept"] / x["clean_words_total"],
            x["target_met"],
        ]
        print("".join(f"{v:>15.3f}" if isinstance(v, float) else f"{str(v):>15}" for v in row))
    x = next(x for x in r["test"] if x["threshold"] == r["t_dev"])
    print(
        f"at T = {r['t_dev']} (test): recall by kind "
        f"{json.dumps({k: round(v, 3) for k, v in x['recall_by_kind'].items()})}"
    )
    for rule in ("mean", "min", "len-weighted"):
        d = x[f"doc_{rule}_at_budget"]
        print(
            f"  document level ranked by --doc-score {rule} at the same budget: clean kept "
            f"{d['clean_kept'] / x['clean_words_total']:.3f}, bad kept {d['bad_kept'] / x['bad_words_total']:.3f}"
        )
    print(
        f"target (line level keeps more clean words than document level at equal or lower bad words kept), "
        f"at the dev-chosen T: {'met' if x['target_met'] else 'NOT met'}; at "
        f"{sum(y['target_met'] for y in r['test'])} of {len(r['test'])} thresholds of the grid"
    )


def _run_lines_seed(a, seed: int) -> dict:
    a = argparse.Namespace(**{**vars(a), "seed": seed})
    data = _line_data(a)
    docs = data["docs"]
    perm = np.random.default_rng(a.seed + 2).permutation(len(docs))
    dev, test = [docs[i] for i in perm[: len(docs) // 2]], [docs[i] for i in perm[len(docs) // 2 :]]

    def f1(x):
        p, r = x["line_precision"] or 0.0, x["line_recall"] or 0.0
        return 2 * p * r / (p + r) if p + r else 0.0

    dev_res = [_line_eval(dev, t, a.min_kept) for t in T_GRID]
    t_dev = max(dev_res, key=f1)["threshold"]
    n_bad = sum(1 for d in docs for lab in d["labels"] if lab is not None)
    words = sum(len(d["text"].split()) for d in docs)
    bad_words = sum(
        len(ln.split()) for d in docs for ln, lab in zip(d["text"].split("\n"), d["labels"]) if lab is not None
    )
    return {
        "setup": {
            "line_docs_per_source": a.line_docs_per_source,
            "seed": a.seed,
            "templates": a.templates,
            "n_docs": len(docs),
            "n_test": len(test),
            "n_bad_lines": n_bad,
            "bad_words_fraction": bad_words / words,
            "val_auc": data["val_auc"],
            "n_hq": data["n_hq"],
            "n_pool": data["n_pool"],
            "min_kept": a.min_kept,
            "t_grid": list(T_GRID),
            "doses": [list(x) if x[2] is None else [x[0], x[1], list(x[2])] for x in DOSES],
            "doses_count": {k: sum(d["dose"] == k for d in docs) for k, _, _ in DOSES},
            "train_s": data["train_s"],
            "score_s": data["score_s"],
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        },
        "t_dev": t_dev,
        "dev_f1": {str(x["threshold"]): f1(x) for x in dev_res},
        "test": [_line_eval(test, t, a.min_kept) for t in T_GRID],
    }


def _lines_summary(runs: list[dict]) -> dict:
    at = [next(x for x in r["test"] if x["threshold"] == r["t_dev"]) for r in runs]
    f = lambda key, sub=None: [
        (x[key][sub] if sub else x[key]) / x["clean_words_total" if "clean" in (sub or key) else "bad_words_total"]
        for x in at
    ]
    return {
        "seeds": [r["setup"]["seed"] for r in runs],
        "t_dev": [r["t_dev"] for r in runs],
        "line_clean_kept": f("line_clean_kept"),
        "line_bad_kept": f("line_bad_kept"),
        "doc_clean_at_budget": f("doc_document_at_budget", "clean_kept"),
        "doc_bad_at_budget": f("doc_document_at_budget", "bad_kept"),
        "doc_clean_at_equal_bad": f("doc_document_at_equal_bad", "clean_kept"),
        "target_met_at_t_dev": [x["target_met"] for x in at],
        "grid_points_met": sum(y["target_met"] for r in runs for y in r["test"]),
        "grid_points": sum(len(r["test"]) for r in runs),
        "target_met": all(x["target_met"] for x in at),
    }


def run_lines(a) -> None:
    from icml26.core.output import atomic_write_text

    if a.print_only:
        if not LINE_RESULTS.exists():
            sys.exit(f"no results yet: {LINE_RESULTS.relative_to(ROOT)} (run without --print-only)")
        out = json.loads(LINE_RESULTS.read_text())
    else:
        out = {"kind": "summary", "experiment": "lines", "templates": {}}
        for t in a.templates.split(","):  # each seed's model and scores are cached: rerunning resumes
            runs = [_run_lines_seed(argparse.Namespace(**{**vars(a), "templates": t}), s) for s in a.seeds]
            out["templates"][t] = {"runs": runs, "summary": _lines_summary(runs)}
        atomic_write_text(LINE_RESULTS, json.dumps(out, indent=1) + "\n")
    for t, res in out["templates"].items():
        print(f"===== inserted bad lines from the {t!r} templates =====")
        _print_lines_set(res)
    if not a.print_only:
        print(f"results: {LINE_RESULTS.relative_to(ROOT)}")


def _print_lines_set(out: dict) -> None:
    for r in out["runs"]:
        _print_lines(r)
        print()
    sm = out["summary"]
    fmt = lambda v: " ".join(f"{x:.3f}" for x in v)
    print(
        f"over seeds {sm['seeds']} at the dev-chosen T {sm['t_dev']} (fractions of the test set's clean / bad words):"
    )
    print(f"  line level:              clean kept {fmt(sm['line_clean_kept'])}, bad kept {fmt(sm['line_bad_kept'])}")
    print(
        f"  document level, budget:  clean kept {fmt(sm['doc_clean_at_budget'])}, bad kept "
        f"{fmt(sm['doc_bad_at_budget'])}"
    )
    print(f"  document level, =bad:    clean kept {fmt(sm['doc_clean_at_equal_bad'])}")
    print(
        f"target: {'met' if sm['target_met'] else 'NOT met'} at the dev-chosen T on every seed; "
        f"met at {sm['grid_points_met']} of {sm['grid_points']} (seed, T) points of the grid"
    )


def _pm(r: dict, k: str, fmt: str) -> str:
    """``mean ± std`` of a record field (std when the run had several seeds)."""
    v, sd = r.get(k), r.get(f"{k}_std")
    if v is None:
        return "-"
    return f"{v:{fmt}} ± {sd:.3f}" if sd is not None else f"{v:{fmt}}"


def proxy_tables(files: list[str]) -> None:
    """The docs' markdown tables from ``filter-data proxy --out DIR`` records: one selection table
    (train docs, clean share, bits per byte, task accuracies) or one delta matrix per budget."""
    for f in files:
        recs = [json.loads(x) for x in Path(f).read_text().splitlines() if x.strip()]
        cfg = next(r for r in recs if r.get("kind") == "config")
        split = next((r for r in recs if r.get("kind") == "pool_split"), None)
        res = [r for r in recs if r.get("kind") == "result"]
        per = f"seeds {cfg.get('seeds')} per condition" if cfg.get("experiment") == "selection" else "one seed per cell"
        print(f"\n{f}: {per}, seed {cfg.get('seed')}")
        if split:
            print(
                f"pool_split: {split['pool_documents']} pool documents, classifier fitted on "
                f"{split['classifier_fitted_on']}, selected from {split['selected_from']}"
            )
        if cfg.get("experiment") == "selection":
            print(f"{cfg['tokens']} training bytes:\n")
            print(
                "| condition | train docs | clean share | HQ bpb | pool bpb | clean-pool bpb | word_order_acc | "
                "continuation_acc |"
            )
            print("|---|---|---|---|---|---|---|---|")
            for r in res:
                print(
                    f"| {r['condition']} | {r['train_docs']} | {r['gold_fraction']:.2f} | {_pm(r, 'hq_bpb', '.3f')} | "
                    f"{_pm(r, 'pool_bpb', '.3f')} | {_pm(r, 'gold_bpb', '.3f')} | {_pm(r, 'word_order_acc', '.3f')} | "
                    f"{_pm(r, 'continuation_acc', '.3f')} |"
                )
            summ = next((r for r in recs if r.get("kind") == "summary"), {})
            keys = [k for k in summ if k.startswith(("cqf_minus", "best_", "finding"))]
            print(
                "\n"
                + ", ".join(f"{k} = {summ[k]:.3f}" if isinstance(summ[k], float) else f"{k} = {summ[k]}" for k in keys)
            )
            continue
        for budget in sorted({r["tokens"] for r in res}):
            cell = {(r["train_k"], r["eval_k"]): r["delta_bpb"] for r in res if r["tokens"] == budget}
            ks = sorted({k for k, _ in cell}, reverse=True)
            print(
                f"\n{cfg['family']} family, {budget} training bytes: "
                "delta_bpb = L(θ_train; D_eval) − L(θ_eval; D_eval) (negative: train ≻ eval)\n"
            )
            print("| train k \\ eval k | " + " | ".join(f"{k:g}" for k in ks) + " |")
            print("|---|" + "---|" * len(ks))
            for i in ks:
                print(f"| {i:g} | " + " | ".join(f"{cell[(i, j)]:+.3f}" for j in ks) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--experiment", choices=("throughput", "lines", "proxy-tables"), default="throughput")
    ap.add_argument("--line-docs-per-source", type=int, default=2000, help="--experiment lines: corpus size")
    ap.add_argument("--min-kept", type=float, default=0.5, help="--experiment lines: select --min-kept")
    ap.add_argument("--print-only", action="store_true", help="--experiment lines: reprint the saved results")
    ap.add_argument(
        "--templates",
        default="eval,train",
        help="--experiment lines: template sets of the inserted bad lines (eval: disjoint from the training pool's)",
    )
    ap.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        default=[0, 1, 2],
        help="--experiment lines: one corpus, corruption and split per seed",
    )
    ap.add_argument("--docs-per-source", type=int, default=600)
    ap.add_argument("--n-docs", type=int, default=3000, help="documents scored per n-gram/DSIR/fastText timing")
    ap.add_argument(
        "--n-embed", type=int, default=300, help="documents scored for the (slow) embedding timing; 0 skips it"
    )
    ap.add_argument("--proxy-records", nargs="*", default=[], help="records.jsonl files of `filter-data proxy --out`")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if a.experiment == "proxy-tables":
        proxy_tables(a.proxy_records)
        return
    if a.experiment == "lines":
        run_lines(a)
        return

    parts = K.build(K.CorpusConfig(docs_per_source=a.docs_per_source), a.seed)
    hq, pool = [d["text"] for d in parts["hq"]], [d["text"] for d in parts["pool"]]
    held = parts["pool_heldout"]
    gold = np.array([K.is_gold(d) for d in held])
    tmp = Path(tempfile.mkdtemp(prefix="icml26-bench-"))

    def docfile(n):
        p = tmp / f"docs{n}.jsonl"
        with DocumentWriter(str(p)) as w:
            for i in range(n):
                w.write(held[i % len(held)])
        return str(p)

    scorers = {}
    t0 = time.perf_counter()
    scorers["ngram"] = C.train_model(hq, pool, classifier="ngram", seed=a.seed)
    train_s = {"ngram": time.perf_counter() - t0}
    t0 = time.perf_counter()
    scorers["dsir"] = C.train_model(hq, pool, classifier="dsir", seed=a.seed)
    train_s["dsir"] = time.perf_counter() - t0
    try:
        t0 = time.perf_counter()
        scorers["fasttext"] = FastTextScorer(hq, pool, a.seed)
        train_s["fasttext"] = time.perf_counter() - t0
    except ImportError:
        print("fasttext not installed (pip install --no-deps fasttext-numpy2-wheel): skipped", file=sys.stderr)
    if a.n_embed:
        t0 = time.perf_counter()
        scorers["embed"] = C.train_model(hq[:300], pool[:300], classifier="embed", seed=a.seed)
        train_s["embed"] = time.perf_counter() - t0

    big = docfile(a.n_docs)
    small = docfile(a.n_embed) if a.n_embed else None
    mb = {big: os.path.getsize(big) / 1e6}
    if small:
        mb[small] = os.path.getsize(small) / 1e6
    rows = []
    for name, m in scorers.items():
        path, n = (small, a.n_embed) if name == "embed" else (big, a.n_docs)
        m.score([held[0]["text"]])  # warm-up (imports, encoder load)
        dt, dc = _timed_stream(m, path, n)
        auc = C.roc_auc(gold, m.score([d["text"] for d in held]))
        rows.append(
            {
                "scorer": name,
                "docs": n,
                "docs_per_s": n / dt,
                "docs_per_cpu_s": n / dc,
                "mb_per_s": mb[path] / dt,
                "train_s": train_s[name],
                "auc_clean_vs_rest": auc,
            }
        )
    ref = next((r["docs_per_cpu_s"] for r in rows if r["scorer"] == "fasttext"), None)
    print(
        "scoring throughput, end to end (JSONL in -> score -> JSONL out), 1 process, "
        f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}"
    )
    print("docs/CPU-s is robust to a shared machine; the ratio to fastText uses it")
    print(
        f"{'scorer':<10}{'docs':>7}{'docs/s':>10}{'docs/CPU-s':>12}{'MB/s':>8}"
        f"{'vs fastText':>13}{'train s':>9}{'AUC clean/rest':>16}"
    )
    for r in rows:
        ratio = f"{r['docs_per_cpu_s'] / ref:.2f}x" if ref else "-"
        print(
            f"{r['scorer']:<10}{r['docs']:>7}{r['docs_per_s']:>10.1f}{r['docs_per_cpu_s']:>12.1f}{r['mb_per_s']:>8.2f}{ratio:>13}{r['train_s']:>9.1f}{r['auc_clean_vs_rest']:>16.3f}"
        )
    print(json.dumps({"kind": "summary", "rows": rows}))

    for f in a.proxy_records:
        recs = [json.loads(x) for x in Path(f).read_text().splitlines()]
        res = [r for r in recs if r.get("kind") == "result" and "condition" in r]
        if not res:
            continue
        print(f"\nproxy experiment ({f}): byte-level GPTs, equal token budgets, lower bpb / higher acc = better")
        cols = ["condition", "gold_fraction", "hq_bpb", "pool_bpb", "gold_bpb", "word_order_acc", "continuation_acc"]
        print("".join(f"{c:>17}" for c in cols))
        for r in res:
            print(
                "".join(f"{r.get(c):>17.4f}" if isinstance(r.get(c), float) else f"{str(r.get(c)):>17}" for c in cols)
            )


if __name__ == "__main__":
    main()
