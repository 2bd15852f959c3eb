"""filter-data benchmark: documents per second scored by each classifier, side by side.

    .venv/bin/python benchmarks/filter_data.py [--docs-per-source 600] [--n-docs 3000] [--n-embed 300]
                                               [--proxy-records DIR/records.jsonl ...]

1. Builds a corpus with `make-corpus` (real Debian text), trains the n-gram LR, DSIR and
   MiniLM-embedding scorers, and fastText (`fasttext-numpy2-wheel`, supervised, word
   bigrams, as DCLM's filter) when it is installed.
2. Scores the held-out pool end to end (parse JSONL -> score -> write JSONL, the `score`
   command's path) and reports docs/s, MB/s and the ratio to fastText; also each scorer's
   AUC for telling clean curated pool documents from the rest (the filter's actual job).
3. Prints the proxy-experiment table from `filter-data proxy --out DIR` records, if given.
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
from icml26.methods.filtering.jsonl import DocumentWriter, iter_documents  # noqa: E402


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
        self.model = fasttext.train_supervised(path, wordNgrams=2, epoch=25, lr=0.5, dim=64, seed=seed, thread=1, verbose=0)
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs-per-source", type=int, default=600)
    ap.add_argument("--n-docs", type=int, default=3000, help="documents scored per n-gram/DSIR/fastText timing")
    ap.add_argument("--n-embed", type=int, default=300, help="documents scored for the (slow) embedding timing; 0 skips it")
    ap.add_argument("--proxy-records", nargs="*", default=[], help="records.jsonl files of `filter-data proxy --out`")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()

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
        rows.append({"scorer": name, "docs": n, "docs_per_s": n / dt, "docs_per_cpu_s": n / dc, "mb_per_s": mb[path] / dt,
                     "train_s": train_s[name], "auc_clean_vs_rest": auc})
    ref = next((r["docs_per_cpu_s"] for r in rows if r["scorer"] == "fasttext"), None)
    print(f"scoring throughput, end to end (JSONL in -> score -> JSONL out), 1 process, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}")
    print("docs/CPU-s is robust to a shared machine; the ratio to fastText uses it")
    print(f"{'scorer':<10}{'docs':>7}{'docs/s':>10}{'docs/CPU-s':>12}{'MB/s':>8}{'vs fastText':>13}{'train s':>9}{'AUC clean/rest':>16}")
    for r in rows:
        ratio = f"{r['docs_per_cpu_s'] / ref:.2f}x" if ref else "-"
        print(f"{r['scorer']:<10}{r['docs']:>7}{r['docs_per_s']:>10.1f}{r['docs_per_cpu_s']:>12.1f}{r['mb_per_s']:>8.2f}{ratio:>13}{r['train_s']:>9.1f}{r['auc_clean_vs_rest']:>16.3f}")
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
            print("".join(f"{r.get(c):>17.4f}" if isinstance(r.get(c), float) else f"{str(r.get(c)):>17}" for c in cols))


if __name__ == "__main__":
    main()
