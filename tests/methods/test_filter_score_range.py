"""``filter-data score`` records the range its classifier's scores can take ([0, 1] for the
logistic-regression probabilities, unbounded for DSIR's log ratios) in the run log and in every
document; ``select --threshold`` outside it exits 2 before writing, a threshold that keeps none
or all of the documents warns on stderr, and ``select --top`` reports the threshold it chose."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from icml26.core.errors import InputError
from icml26.methods.filtering import classifiers as C
from icml26.methods.filtering.cqf import select_stream
from icml26.methods.filtering.jsonl import DocumentWriter

from tests.methods.test_filter_data import _A, _B, _docs, toy_docs, write_jsonl


def _cli(args, input=None):
    from icml26.cli import app

    return CliRunner().invoke(app, ["filter-data", *args], input=input)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("models")
    out = {}
    for clf in ("ngram", "dsir"):
        m = C.train_model(toy_docs(200, _A, 0), toy_docs(200, _B, 1), classifier=clf, seed=0, n_features=1 << 12)
        m.save(d / f"{clf}.safetensors")
        out[clf] = d / f"{clf}.safetensors"
    return out


@pytest.fixture(scope="module")
def scored(models, tmp_path_factory):
    """(documents as scored by `score` through the CLI, its --log records) per classifier."""
    d = tmp_path_factory.mktemp("scored")
    src = write_jsonl(d / "in.jsonl", _docs(40))
    out = {}
    for clf, path in models.items():
        r = _cli(
            [
                "score",
                "--model",
                str(path),
                str(src),
                "--output",
                str(d / f"{clf}.jsonl"),
                "--log",
                str(d / f"{clf}.log"),
            ]
        )
        assert r.exit_code == 0, r.output
        docs = [json.loads(x) for x in (d / f"{clf}.jsonl").read_text().splitlines()]
        log = [json.loads(x) for x in (d / f"{clf}.log").read_text().splitlines()]
        out[clf] = (d / f"{clf}.jsonl", docs, log, r.stderr)
    return out


def test_score_records_the_range_in_the_log_and_each_document(scored):
    for clf, lo_hi in (("ngram", [0.0, 1.0]), ("dsir", [None, None])):
        _, docs, log, err = scored[clf]
        assert log[0]["kind"] == "config" and log[0]["score_range"] == lo_hi and log[1]["score_range"] == lo_hi
        assert ("probability" in log[0]["score_kind"]) == (clf == "ngram")
        assert all(d["metadata"]["quality_score_range"] == lo_hi for d in docs)
        assert "score_range=" in err
    s = np.array([d["metadata"]["quality_score"] for d in scored["dsir"][1]])
    assert s.min() < 0.0 or s.max() > 1.0  # DSIR's log ratios do leave [0, 1]: a probability range would be wrong


@pytest.mark.parametrize("thr,word", [("1.5", "nothing"), ("-3", "everything")])
def test_threshold_outside_a_probability_range_exits_2_and_writes_nothing(scored, tmp_path, thr, word):
    path = scored["ngram"][0]
    out = tmp_path / "kept.jsonl"
    r = _cli(["select", "--threshold", thr, str(path), "--output", str(out)])
    assert r.exit_code == 2, r.output
    assert "outside [0, 1]" in r.stderr and word in r.stderr
    assert not out.exists() and r.stdout == ""


def test_threshold_on_unbounded_scores_is_accepted(scored):
    path, docs, _, _ = scored["dsir"]
    s = sorted(d["metadata"]["quality_score"] for d in docs)
    thr = (s[19] + s[20]) / 2  # between two documents: keeps exactly 20 of 40
    r = _cli(["select", "--threshold", repr(thr), str(path), "-q"])
    assert r.exit_code == 0 and len(r.stdout.splitlines()) == 20


@pytest.mark.parametrize("which", ["none", "all"])
def test_threshold_that_keeps_none_or_all_warns(scored, which):
    path, docs, _, _ = scored["ngram"]
    s = [d["metadata"]["quality_score"] for d in docs]
    thr = max(s) + (1.0 - max(s)) / 2 if which == "none" else min(s) / 2
    r = _cli(["select", "--threshold", repr(thr), str(path)])
    assert r.exit_code == 0
    assert f"kept {which} of the 40 documents" in r.stderr and "--top" in r.stderr
    assert len(r.stdout.splitlines()) == (0 if which == "none" else 40)
    mid = sorted(s)[20]
    r = _cli(["select", "--threshold", repr(mid), str(path)])
    assert r.exit_code == 0 and "warning" not in r.stderr


def test_top_reports_the_effective_threshold(scored, tmp_path):
    path, docs, _, _ = scored["ngram"]
    r = _cli(["select", "--top", "0.25", str(path), "--log", str(tmp_path / "log.jsonl")])
    assert r.exit_code == 0
    summ = [json.loads(x) for x in (tmp_path / "log.jsonl").read_text().splitlines()][1]
    s = sorted((d["metadata"]["quality_score"] for d in docs), reverse=True)
    assert summ["n_kept"] == 10 and summ["score_threshold"] == s[9]  # the 10th largest score
    assert summ["score_range"] == [0.0, 1.0] and "score_threshold=" in r.stderr


def test_documents_of_two_classifiers_are_refused(scored, tmp_path):
    mixed = write_jsonl(tmp_path / "mixed.jsonl", scored["ngram"][1][:3] + scored["dsir"][1][:3])
    with pytest.raises(InputError, match="different classifiers"):
        with DocumentWriter(str(tmp_path / "o.jsonl")) as w:
            select_stream(str(mixed), w, top=0.5)
    assert not (tmp_path / "o.jsonl").exists()


def test_documents_scored_elsewhere_have_no_range_check(tmp_path):
    docs = [{"text": f"d{i}", "metadata": {"quality_score": float(v)}} for i, v in enumerate([-2.0, 0.5, 7.0])]
    src = write_jsonl(tmp_path / "s.jsonl", docs)
    with DocumentWriter(str(tmp_path / "o.jsonl")) as w:
        st = select_stream(str(src), w, threshold=1.5)
    assert st.written == 1 and st.score_range is None
    bad = write_jsonl(
        tmp_path / "b.jsonl", [{"text": "x", "metadata": {"quality_score": 0.5, "quality_score_range": [1, 0]}}]
    )
    with pytest.raises(InputError, match="quality_score_range"):
        select_stream(str(bad), DocumentWriter(None), threshold=0.5)
