"""filter-data at line level: ``score --level line`` / ``select --level line``.

The line rule (split on "\\n", blank lines kept as separators) loses and reorders nothing; a
spam line inside clean text is the one line dropped; ``--min-kept`` drops a mostly-spam
document; the derived document scores and the score after selection equal their
recomputation from the classifier; bad options exit 2 with one line before anything is written.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from typer.testing import CliRunner

from icml26.core.errors import InputError
from icml26.methods.filtering import classifiers as C
from icml26.methods.filtering import lines as L
from icml26.methods.filtering.jsonl import DocumentWriter

from tests.fuzz._fuzz import fuzz_pair, st
from tests.methods.test_filter_data import _A, _B, toy_docs, write_jsonl


def _cli(args, input=None):
    from icml26.cli import app

    return CliRunner().invoke(app, ["filter-data", *args], input=input)


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    d = tmp_path_factory.mktemp("lm")
    m = C.train_model(toy_docs(200, _A, 0), toy_docs(200, _B, 1), classifier="ngram", seed=0, n_features=1 << 12)
    return m.save(d / C.MODEL_FILE)


CLEAN = toy_docs(6, _A, 11)  # lines of the "HQ" vocabulary
SPAM = toy_docs(4, _B, 12)  # lines of the "pool" vocabulary
DOC = "\n".join(CLEAN[:2] + ["", SPAM[0], "  "] + CLEAN[2:5])  # one spam line among clean ones
MOSTLY_SPAM = "\n".join([CLEAN[5], *SPAM[1:4]])


# ---------------------------------------------------------------- the line rule
_TEXT = st.one_of(
    st.text(alphabet=st.sampled_from(list("ab ,.\n\r\t") + ["\x85", "\u2028", "\x0b", "\u00e9", "\x1c"]), max_size=80),
    st.lists(st.sampled_from(["word", "two words", "", " ", "\t", "\r", "x\r"]), max_size=12).map("\n".join),
    st.text(max_size=40),
)


def _round_trip(text):
    lines = L.split_lines(text)
    assert L.join_lines(lines) == text  # nothing lost, nothing reordered
    assert len(lines) == text.count("\n") + 1 and all("\n" not in ln for ln in lines)
    assert all(L.is_blank(ln) == (L.n_words(ln) == 0) for ln in lines)
    assert sum(L.n_words(ln) for ln in lines) == len(text.split())  # "\n" only splits words that whitespace splits


test_split_lines_round_trip, test_split_lines_round_trip_slow = fuzz_pair(_TEXT)(_round_trip)


def _select_property(args):
    text, seed, threshold, min_kept = args
    lines = L.split_lines(text)
    rng = np.random.default_rng(seed)
    scores = [None if L.is_blank(ln) else float(np.round(rng.random(), 1)) for ln in lines]
    sel = L.select_lines(lines, scores, threshold, min_kept, doc_score=0.5)
    assert sorted(sel.kept + sel.dropped) == list(range(len(lines))) and not set(sel.kept) & set(sel.dropped)
    assert sel.kept == sorted(sel.kept) and sel.dropped == sorted(sel.dropped)
    assert sel.dropped == [
        i for i, s in enumerate(scores) if s is not None and s < threshold
    ]  # exactly the lines below T
    kept = [lines[i] for i in sel.kept]
    if kept:
        assert L.split_lines(L.join_lines(kept)) == kept  # the kept text splits back into the kept lines
    else:
        assert not sel.keep_document  # every line dropped: nothing of the document remains
    merged = dict([(i, lines[i]) for i in sel.kept] + [(i, lines[i]) for i in sel.dropped])
    assert L.join_lines([merged[i] for i in range(len(lines))]) == text  # kept + dropped, interleaved, is the text
    assert sel.words_kept == sum(L.n_words(ln) for ln in kept)
    if sel.words_total:
        assert sel.keep_document == (sel.words_kept > 0 and sel.words_kept / sel.words_total >= min_kept)
    else:
        assert sel.keep_document == (0.5 >= threshold)


test_select_lines_keeps_order, test_select_lines_keeps_order_slow = fuzz_pair(
    st.tuples(
        _TEXT, st.integers(0, 2**16), st.sampled_from([0.0, 0.25, 0.5, 0.55, 1.0]), st.sampled_from([0.0, 0.3, 1.0])
    )
)(_select_property)


@pytest.mark.parametrize(
    "rule,want",
    [
        ("mean", (0.2 + 0.6 + 1.0) / 3),
        ("min", 0.2),
        ("len-weighted", (0.2 * 1 + 0.6 * 2 + 1.0 * 3) / 6),
        ("document", 0.9),
    ],
)
def test_doc_score_rules(rule, want):
    lines = ["a", "", "b c", "d e f", " "]
    assert L.doc_score_from_lines([0.2, None, 0.6, 1.0, None], lines, rule, whole=0.9) == pytest.approx(want, abs=1e-15)
    assert L.doc_score_from_lines([None], [""], rule, whole=0.4) == 0.4  # no scored line: the whole-text score
    with pytest.raises(ValueError, match="median"):
        L.doc_score_from_lines([0.1], ["a"], "median")


# ---------------------------------------------------------------- score --level line
def _score(tmp_path, model_path, docs, *extra, name="scored"):
    src = write_jsonl(tmp_path / f"{name}_in.jsonl", docs)
    out = tmp_path / f"{name}.jsonl"
    r = _cli(["score", "--model", str(model_path), str(src), "--output", str(out), "-q", *extra])
    assert r.exit_code == 0, r.output
    return [json.loads(x) for x in out.read_text().splitlines()]


def test_score_line_level_scores_every_line_and_derives_the_document_score(tmp_path, model_path):
    m = C.load_model(model_path)
    docs = [
        {"text": DOC, "id": "a", "metadata": {"src": "t"}},
        {"text": MOSTLY_SPAM, "id": "b"},
        {"text": "", "id": "c"},
    ]
    plain = _score(tmp_path, model_path, docs, name="plain")
    by_rule = {r: _score(tmp_path, model_path, docs, "--level", "line", "--doc-score", r, name=r) for r in L.DOC_SCORES}
    for j, d in enumerate(docs):
        lines = L.split_lines(d["text"])
        want = [None if L.is_blank(ln) else float(m.score([ln])[0]) for ln in lines]  # oracle: one line at a time
        for rule, out in by_rule.items():
            md = out[j]["metadata"]
            assert out[j]["text"] == d["text"] and md["quality_score_from"] == rule
            assert len(md["line_scores"]) == len(lines)
            assert [s is None for s in md["line_scores"]] == [w is None for w in want]
            np.testing.assert_allclose(
                [s for s in md["line_scores"] if s is not None], [w for w in want if w is not None], rtol=0, atol=1e-12
            )
            whole = float(m.score([d["text"]])[0])
            assert md["quality_score"] == pytest.approx(
                L.doc_score_from_lines(want, lines, rule, whole=whole), abs=1e-12
            )
        # the default rule is the document-level score, bit for bit
        assert by_rule["document"][j]["metadata"]["quality_score"] == plain[j]["metadata"]["quality_score"]
    # document level (the default) writes exactly what it wrote before: no line keys
    assert all(set(d["metadata"]) - {"src"} == {"quality_score", "quality_score_range"} for d in plain)
    md = by_rule["min"][0]["metadata"]
    assert (
        md["quality_score"]
        == min(s for s in md["line_scores"] if s is not None)
        < by_rule["document"][0]["metadata"]["quality_score"]
    )


# ---------------------------------------------------------------- select --level line
def _select(tmp_path, docs_or_path, *args, name="kept"):
    src = (
        docs_or_path if not isinstance(docs_or_path, list) else write_jsonl(tmp_path / f"{name}_in.jsonl", docs_or_path)
    )
    out, log = tmp_path / f"{name}.jsonl", tmp_path / f"{name}.log"
    r = _cli(["select", "--level", "line", str(src), "--output", str(out), "--log", str(log), "-q", *args])
    assert r.exit_code == 0, r.output
    return [json.loads(x) for x in out.read_text().splitlines()], json.loads(log.read_text().splitlines()[1])


@pytest.mark.parametrize("rule", L.DOC_SCORES)
def test_one_spam_line_is_the_one_line_dropped(tmp_path, model_path, rule):
    m = C.load_model(model_path)
    scored = _score(tmp_path, model_path, [{"text": DOC, "id": "a"}], "--level", "line", "--doc-score", rule)[0]
    ls = scored["metadata"]["line_scores"]
    lines = L.split_lines(DOC)
    spam_i = lines.index(SPAM[0])
    clean = [s for i, s in enumerate(ls) if s is not None and i != spam_i]
    assert ls[spam_i] < min(clean)  # the classifier tells the spam line from the clean ones
    t = (ls[spam_i] + min(clean)) / 2  # a threshold between their scores
    extra = ["--model", str(model_path)] if rule == "document" else []
    kept, log = _select(tmp_path, [scored], "--threshold", f"{t!r}", *extra)
    assert len(kept) == 1
    d = kept[0]
    want_lines = lines[:spam_i] + lines[spam_i + 1 :]
    assert d["text"] == "\n".join(want_lines)  # exactly that line lost; blank separators and order kept
    md = d["metadata"]
    assert md["lines_dropped"] == 1 and md["line_scores"] == ls[:spam_i] + ls[spam_i + 1 :]
    assert md["quality_score_before"] == scored["metadata"]["quality_score"]
    # the score after: what `score --level line --doc-score rule` gives the kept text
    again = _score(
        tmp_path, model_path, [{"text": d["text"], "id": "a"}], "--level", "line", "--doc-score", rule, name="again"
    )[0]
    assert md["quality_score"] == pytest.approx(again["metadata"]["quality_score"], abs=1e-12)
    if rule == "document":
        assert md["quality_score"] == pytest.approx(float(m.score([d["text"]])[0]), abs=1e-12)
    assert md["quality_score"] > md["quality_score_before"]  # the spam dragged the document down
    assert log["lines_dropped"] == 1 and log["n_kept"] == 1 and log["lines_total"] == 6
    assert log["words_kept"] == log["words_total"] - len(SPAM[0].split())


def test_min_kept_drops_a_mostly_spam_document(tmp_path, model_path):
    docs = _score(
        tmp_path,
        model_path,
        [{"text": DOC, "id": "a"}, {"text": MOSTLY_SPAM, "id": "b"}],
        "--level",
        "line",
        "--doc-score",
        "len-weighted",
    )
    ls = docs[1]["metadata"]["line_scores"]
    t = (ls[0] + max(ls[1:])) / 2  # keeps the one clean line of b, drops its three spam lines
    assert max(ls[1:]) < t < ls[0]
    frac = len(CLEAN[5].split()) / len(MOSTLY_SPAM.split())
    assert frac < 0.5
    kept, log = _select(tmp_path, docs, "--threshold", f"{t!r}")  # default --min-kept 0.5
    assert [d["id"] for d in kept] == ["a"] and log["n_dropped"] == 1 and log["n_kept"] == 1
    kept, log = _select(tmp_path, docs, "--threshold", f"{t!r}", "--min-kept", f"{frac - 1e-9!r}", name="lenient")
    assert (
        [d["id"] for d in kept] == ["a", "b"]
        and kept[1]["text"] == CLEAN[5]
        and kept[1]["metadata"]["lines_dropped"] == 3
    )
    kept, _ = _select(tmp_path, docs, "--threshold", f"{t!r}", "--min-kept", f"{frac + 1e-9!r}", name="strict")
    assert [d["id"] for d in kept] == ["a"]


def test_document_level_select_of_line_scored_documents_is_unchanged(tmp_path, model_path):
    docs = _score(tmp_path, model_path, [{"text": DOC, "id": "a"}, {"text": MOSTLY_SPAM, "id": "b"}], "--level", "line")
    src = write_jsonl(tmp_path / "s.jsonl", docs)
    r = _cli(["select", "--top", "0.5", str(src), "-q"])
    assert r.exit_code == 0 and [json.loads(x) for x in r.stdout.splitlines()] == [docs[0]]


# ---------------------------------------------------------------- bad options and bad line scores
_SCORE_BAD = [
    (["--level", "para"], "--level must be one of document, line, got 'para'"),
    (
        ["--level", "line", "--doc-score", "median"],
        "--doc-score must be one of document, mean, min, len-weighted, got 'median'",
    ),
    (["--doc-score", "mean"], "--doc-score mean derives the document score from line scores: add --level line"),
    (["--level", "line", "--line-field", "quality_score"], "--line-field 'quality_score' collides"),
]


@pytest.mark.parametrize("args,msg", _SCORE_BAD)
def test_score_bad_options_exit_2_one_line_nothing_written(tmp_path, args, msg):
    src = write_jsonl(tmp_path / "in.jsonl", [{"text": DOC}])
    out = tmp_path / "out.jsonl"
    r = _cli(["score", "--model", str(tmp_path / "no-model"), str(src), "--output", str(out), *args])
    assert r.exit_code == 2, r.output
    assert r.stdout == "" and len(r.stderr.strip().splitlines()) == 1 and msg in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl"]  # checked before the model is even read


_SELECT_BAD = [
    (["--level", "line", "--top", "0.5"], "--level line takes --threshold T"),
    (["--level", "line"], "--level line needs --threshold T"),
    (["--level", "line", "--threshold", "nan"], "--threshold is nan"),
    (["--level", "line", "--threshold", "0.5", "--min-kept", "1.5"], "--min-kept must be a fraction in [0, 1]"),
    (["--level", "line", "--threshold", "0.5", "--min-kept", "nan"], "--min-kept must be a fraction in [0, 1]"),
    (["--level", "lines", "--threshold", "0.5"], "--level must be one of document, line"),
    (["--threshold", "0.5", "--min-kept", "0.3"], "--min-kept applies to --level line only"),
    (["--level", "line", "--threshold", "1.5"], "--threshold 1.5 is outside [0, 1]"),
]


@pytest.mark.parametrize("args,msg", _SELECT_BAD)
def test_select_bad_options_exit_2_one_line_nothing_written(tmp_path, model_path, args, msg):
    docs = _score(tmp_path, model_path, [{"text": DOC, "id": "a"}], "--level", "line", "--doc-score", "mean")
    src = write_jsonl(tmp_path / "s.jsonl", docs)
    before = sorted(p.name for p in tmp_path.iterdir())
    r = _cli(["select", str(src), "--output", str(tmp_path / "kept.jsonl"), *args])
    assert r.exit_code == 2, r.output
    assert r.stdout == "" and len(r.stderr.strip().splitlines()) == 1 and msg in r.stderr, r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def _with(md_update, text=DOC):
    lines = L.split_lines(text)
    md = {
        "quality_score": 0.5,
        "quality_score_range": [0.0, 1.0],
        "quality_score_from": "mean",
        "line_scores": [None if L.is_blank(x) else 0.5 for x in lines],
    }
    md.update(md_update)
    return {"text": text, "metadata": md}


@pytest.mark.parametrize(
    "md,msg",
    [
        (
            {"line_scores": None},
            "s.jsonl:2: no metadata.line_scores (run `icml26 filter-data score --level line` first)",
        ),
        (
            {"line_scores": [0.5, 0.5]},
            "s.jsonl:2: metadata.line_scores must be a list with one entry per line of the text (8 lines), got 2",
        ),
        (
            {"line_scores": [0.5, 0.5, 0.5, 0.5, None, 0.5, 0.5, 0.5]},
            "s.jsonl:2: metadata.line_scores[2] scores a blank line",
        ),
        ({"line_scores": [0.5, "x", None, 0.5, None, 0.5, 0.5, 0.5]}, "s.jsonl:2: metadata.line_scores[1] is 'x'"),
        ({"quality_score_from": "median"}, "s.jsonl:2: metadata.quality_score_from is 'median'"),
        ({"quality_score_from": "document"}, "s.jsonl:2: metadata.quality_score is the whole-document score"),
    ],
)
def test_select_bad_line_scores_name_the_line(tmp_path, md, msg):
    src = write_jsonl(tmp_path / "s.jsonl", [_with({}), _with(md)])
    r = _cli(["select", "--level", "line", "--threshold", "0.4", str(src), "--output", str(tmp_path / "k.jsonl")])
    assert r.exit_code == 2, r.output
    assert len(r.stderr.strip().splitlines()) == 1 and msg in r.stderr, r.stderr
    assert not (tmp_path / "k.jsonl").exists()
    if "whole-document" not in msg:  # a malformed document can be skipped and counted instead
        r = _cli(
            ["select", "--level", "line", "--threshold", "0.4", str(src), "--skip-bad", "--log", str(tmp_path / "log")]
        )
        assert r.exit_code == 0 and len(r.stdout.splitlines()) == 1
        assert json.loads((tmp_path / "log").read_text().splitlines()[1])["n_bad"] == 1


def test_select_line_stream_library_errors(tmp_path):
    src = write_jsonl(tmp_path / "s.jsonl", [_with({})])
    with pytest.raises(InputError, match="not --top"):
        L.select_line_stream(str(src), DocumentWriter(None), threshold=None, top=0.5)
    with DocumentWriter(str(tmp_path / "k.jsonl")) as w:
        st = L.select_line_stream(str(src), w, threshold=0.5, min_kept=1.0)
    assert st.written == 1 and st.lines_dropped == 0 and math.isclose(st.words_kept, st.words_total)


# ---------------------------------------------------------------- seeded line corruption, real text
def test_insert_bad_lines_keeps_the_document_and_labels_every_inserted_line():
    from icml26.methods.filtering import corpus as K

    text = "first line\n\n  indented second\nthird"
    informal = ["so it goes, said the man", "what a day it has been"]
    for seed in range(20):
        new, labels = K.insert_bad_lines(text, 5, np.random.default_rng(seed), informal)
        lines = L.split_lines(new)
        assert len(labels) == len(lines) and sum(lab is not None for lab in labels) == 5
        assert L.join_lines([ln for ln, lab in zip(lines, labels) if lab is None]) == text  # own lines, in order
        for ln, lab in zip(lines, labels):
            if lab in ("informal", "shuffled"):
                assert sorted(ln.split()) in [sorted(x.split()) for x in informal]
            if lab == "informal":
                assert ln in informal
            if lab == "spam":
                assert "http://" in ln
    a = K.insert_bad_lines(text, 5, np.random.default_rng(3), informal)
    assert a == K.insert_bad_lines(text, 5, np.random.default_rng(3), informal)  # seeded
    with pytest.raises(ValueError, match="kind"):
        K.insert_bad_lines(text, 1, np.random.default_rng(0), informal, kinds=("typo",))


def test_line_level_beats_document_level_on_real_corrupted_text():
    """Real held-out HQ documents (tiny corpus) with 20% inserted bad lines: at T = 0.1 the line
    filter drops most boilerplate and spam lines and keeps more clean words, and fewer bad ones,
    than document-level filtering at the same kept-word budget (the benchmark's measure)."""
    from conftest import need_debian

    from icml26.methods.filtering import corpus as K

    for pkg in ("python3.11-doc", "dict-gcide", "wordnet-base", "bible-kjv", "fortunes"):
        need_debian(pkg)
    parts = K.build(K.CorpusConfig(docs_per_source=120), 0)
    m = C.train_model(
        [d["text"] for d in parts["hq"]],
        [d["text"] for d in parts["pool"]],
        classifier="ngram",
        seed=0,
        n_features=1 << 16,
    )
    informal = [
        ln.strip() for t in K.source_documents("fortunes")[:3000] for ln in t.split("\n") if len(ln.split()) >= 3
    ]
    rng = np.random.default_rng(1)
    docs = []
    for d in parts["hq_heldout"]:
        n = sum(not L.is_blank(ln) for ln in L.split_lines(d["text"]))
        docs.append(K.insert_bad_lines(d["text"], max(1, n // 5), rng, informal))
    texts = [t for t, _ in docs]
    whole, per_line = m.score(texts), L.score_lines(m, texts)
    t = 0.1
    clean_w, bad_w = np.zeros(len(docs)), np.zeros(len(docs))
    kept_clean = kept_bad = 0
    hit, n_kind = {}, {}
    for j, ((text, labels), ls) in enumerate(zip(docs, per_line)):
        lines = L.split_lines(text)
        sel = L.select_lines(lines, ls, t, 0.5, doc_score=float(whole[j]))
        for i, (ln, lab) in enumerate(zip(lines, labels)):
            w = L.n_words(ln)
            (clean_w if lab is None else bad_w)[j] += w
            if sel.keep_document and i in sel.kept:
                kept_clean += w if lab is None else 0
                kept_bad += w if lab is not None else 0
            if lab is not None:
                n_kind[lab] = n_kind.get(lab, 0) + 1
                hit[lab] = hit.get(lab, 0) + (i in sel.dropped)
    # (this tiny classifier sees 192 HQ documents: boilerplate recall was 35/51 and spam 64/64 as written)
    assert hit["spam"] / n_kind["spam"] >= 0.9 and hit["boilerplate"] / n_kind["boilerplate"] >= 0.6
    # document level: the top documents by whole-text score up to the same kept-word budget (last one in part)
    budget, c, b = kept_clean + kept_bad, 0.0, 0.0
    for j in np.argsort(-whole, kind="stable"):
        tot = clean_w[j] + bad_w[j]
        f = min(1.0, (budget - c - b) / tot)
        c, b = c + f * clean_w[j], b + f * bad_w[j]
        if f < 1.0:
            break
    assert (
        kept_clean > c and kept_bad < b - 0.1 * bad_w.sum()
    )  # as written: 14628 > 14135 clean, 711 < 1204 bad of 1744


def test_select_warns_when_the_threshold_drops_no_line(tmp_path):
    src = write_jsonl(tmp_path / "s.jsonl", [_with({})])
    r = _cli(["select", "--level", "line", "--threshold", "0.0", str(src)])
    assert r.exit_code == 0 and len(r.stdout.splitlines()) == 1
    assert "warning: --threshold 0 dropped none of the 6 lines" in r.stderr
    r = _cli(
        ["select", "--level", "line", "--threshold", "0.6", str(src), "-q"]
    )  # every line below: nothing kept, no warning
    assert r.exit_code == 0 and r.stdout == "" and r.stderr == ""
