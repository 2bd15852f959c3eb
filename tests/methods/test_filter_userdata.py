"""filter-data for a datatrove / DCLM user: .jsonl.zst shards, uniform max_docs sampling,
evaluation templates disjoint from the training pool's, proxy selecting only documents the
classifier did not fit on, and a datatrove step that scores outside icml26."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from icml26.core.errors import InputError
from icml26.methods.filtering import classifiers as C
from icml26.methods.filtering import corpus as K
from icml26.methods.filtering.jsonl import iter_documents

_A = "the committee reviewed the annual report and approved the budget for research".split()
_B = "lol omg buy now cheap deal click free win cash prize hot".split()


def _docs(n, vocab, seed, prefix):
    rng = np.random.default_rng(seed)
    return [
        {"id": f"{prefix}-{i:05d}", "text": " ".join(rng.choice(vocab, size=int(rng.integers(8, 30))))}
        for i in range(n)
    ]


def _write(path: Path, docs) -> Path:
    path.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    return path


def test_zstd_jsonl_is_read(tmp_path):
    import zstandard

    docs = _docs(30, _A, 0, "z")
    raw = "".join(json.dumps(d) + "\n" for d in docs).encode()
    (tmp_path / "a.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(raw))
    got = [d for _, d in iter_documents(str(tmp_path / "a.jsonl.zst"))]
    assert [d["id"] for d in got] == [d["id"] for d in docs] and got[7]["text"] == docs[7]["text"]


def test_reservoir_sample_is_uniform():
    rng = np.random.default_rng(0)
    counts = np.zeros(100)
    for _ in range(3000):
        s = C.reservoir(iter(range(100)), 10, rng)
        assert len(s) == 10 and s == sorted(s)
        counts[s] += 1
    freq = counts / 3000  # each position kept with probability 0.1
    assert abs(freq.mean() - 0.1) < 1e-12 and np.abs(freq - 0.1).max() < 0.03
    assert abs(freq[:50].mean() - freq[50:].mean()) < 0.01  # no bias towards the start


def test_train_samples_max_docs_uniformly_from_sorted_files(tmp_path):
    hq = _write(tmp_path / "hq.jsonl", _docs(400, _A, 0, "hq"))
    pool = _write(tmp_path / "pool.jsonl", _docs(400, _B, 1, "pool"))
    cfg = C.TrainConfig(max_docs=60, n_features=1 << 12)
    recs = list(C.run_train(cfg, hq=str(hq), pool=str(pool), out=str(tmp_path / "m"), seed=0))
    assert recs[0]["n_hq"] == 60 and recs[0]["sampling"] == "uniform (reservoir)"
    m = C.load_model(tmp_path / "m")
    pos = sorted(int(i.split("-")[1]) for i in m.trained_ids["pool"])
    assert len(pos) == 60 and max(pos) > 300 and min(pos) < 100  # spread over the file, not its first 60
    assert np.mean(pos) == pytest.approx(200, abs=50)


def test_eval_templates_are_disjoint_from_the_training_pools():
    tr, ev = K.TEMPLATE_SETS["train"], K.TEMPLATE_SETS["eval"]
    for key in ("nav", "foot", "spam", "domains"):
        assert not set(tr[key]) & set(ev[key])
    train_lines = {ln.lower() for ln in tr["nav"] + tr["foot"]}
    rng = np.random.default_rng(0)
    for _ in range(300):
        bl = K.bad_line("boilerplate", rng, ["x y z"], templates="eval")
        sp = K.bad_line("spam", rng, ["x y z"], templates="eval")
        assert bl.lower() not in train_lines
        assert not any(k in sp.lower() for k in tr["spam"]) and not any(d in sp for d in tr["domains"])
    # the pool's own degradations draw from the training templates only
    text = "A plain sentence here. Another one follows!"
    for seed in range(50):
        degraded = K.boilerplate(text, np.random.default_rng(seed)) + K.spam(text, np.random.default_rng(seed))
        assert not any(e in degraded for e in ev["nav"] + ev["foot"] + ev["domains"])
        assert not any(k in degraded.lower() for k in ev["spam"])


def test_proxy_selects_only_documents_the_classifier_did_not_fit_on(tmp_path):
    from icml26.methods.filtering.proxy import unseen_pool

    hq = _write(tmp_path / "hq.jsonl", _docs(100, _A, 0, "hq"))
    pool_docs = _docs(300, _B, 1, "pool")
    pool = _write(tmp_path / "pool.jsonl", pool_docs)
    list(C.run_train(C.TrainConfig(n_features=1 << 12), hq=str(hq), pool=str(pool), out=str(tmp_path / "m")))
    m = C.load_model(tmp_path / "m")
    assert len(m.trained_ids["pool"]) == 100  # balanced n vs n
    rest = unseen_pool(pool_docs, m, "m")
    assert len(rest) == 200 and not {d["id"] for d in rest} & set(m.trained_ids["pool"])
    list(C.run_train(C.TrainConfig(n_features=1 << 12), hq=str(pool), pool=str(pool), out=str(tmp_path / "all")))
    with pytest.raises(InputError, match="did not see"):
        unseen_pool(pool_docs, C.load_model(tmp_path / "all"), "all")


@pytest.mark.parametrize("kind", ["ngram", "dsir"])
def test_datatrove_step_scores_outside_icml26(tmp_path, kind):
    hq = _write(tmp_path / "hq.jsonl", _docs(80, _A, 0, "hq"))
    pool = _write(tmp_path / "pool.jsonl", _docs(80, _A[:5] + _B, 1, "pool"))
    out = tmp_path / "m"
    recs = list(
        C.run_train(
            C.TrainConfig(classifier=kind, n_features=1 << 12, dsir_buckets=256),
            hq=str(hq),
            pool=str(pool),
            out=str(out),
        )
    )
    assert recs[-1]["datatrove_step"] == str(out / "datatrove_filter.py")
    texts = [d["text"] for d in _docs(20, _A + _B, 5, "t")]
    want = C.load_model(out).score(texts)
    script = (
        "import sys, json\n"
        "sys.modules['icml26'] = None  # icml26 cannot be imported here\n"
        f"sys.path.insert(0, {str(out)!r})\n"
        "from datatrove_filter import CQFQualityFilter\n"
        "f = CQFQualityFilter()\n"
        f"texts = json.loads({json.dumps(json.dumps(texts))})\n"
        "class Doc:\n    def __init__(s, t): s.text, s.metadata = t, {}\n"
        "d = Doc(texts[0]); keep = f.filter(d)\n"
        "print(json.dumps({'s': f.score(texts).tolist(), 'keep': keep, 'md': d.metadata['quality_score']}))\n"
    )
    p = subprocess.run([sys.executable, "-I", "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    assert np.allclose(got["s"], want, rtol=1e-6, atol=1e-9)
    assert got["md"] == pytest.approx(want[0]) and got["keep"] == bool(want[0] >= (0.5 if kind == "ngram" else 0.0))
