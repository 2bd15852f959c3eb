"""Classifier-based quality filtering (CQF) over streams of documents.

Paper (arXiv 2510.00866, Sec. 2): score every pool document with the classifier,
estimate the CDF ``C`` of the scores on the pool, and keep
``D_CQF = {x : C(s(x)) >= 1 - k}``, the top fraction ``k``.

``score_stream``   reads documents in batches (constant memory), adds
                   ``metadata.<field>`` (default ``quality_score``) and writes each one.
``select_stream``  keeps the top fraction exactly (two passes over the input: the first
                   keeps only the scores, 8 bytes per document; stdin is spooled to a
                   temporary file first) or every document whose score is >= a threshold
                   (one pass).
"""

from __future__ import annotations

import math
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from icml26.core.errors import InputError
from icml26.methods.filtering import lines as L
from icml26.methods.filtering.jsonl import DocumentWriter, ReadStats, iter_documents
from icml26.methods.filtering.scored import get_range, get_score, range_text, scored_documents  # noqa: F401


@dataclass
class StreamStats:
    read: int = 0
    written: int = 0
    bad: int = 0
    first_bad: str | None = None
    threshold: float | None = None
    score_mean: float | None = None
    score_min: float | None = None
    score_max: float | None = None
    score_range: list | None = None  # [low, high] the classifier's scores can take (None = unbounded), as scored


def _batches(it: Iterator[tuple[int, dict]], size: int) -> Iterator[list[dict]]:
    batch: list[dict] = []
    for _, d in it:
        batch.append(d)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def score_stream(
    model,
    path: str,
    writer: DocumentWriter,
    *,
    batch_size: int = 256,
    skip_bad: bool = False,
    field: str = "quality_score",
    bar=None,
    level: str = "document",
    doc_score: str = "document",
    line_field: str = "line_scores",
) -> StreamStats:
    """Write every document of ``path`` unchanged plus ``metadata[field] = score`` (float) and
    ``metadata[field + "_range"] = [low, high]``, the values the classifier's scores can take
    (``model.score_range``: [0, 1] for probabilities, [None, None] for DSIR's unbounded log
    ratios), which ``select`` checks a ``--threshold`` against.

    ``level="line"`` also writes ``metadata[line_field]``, the score of every line of the text
    (``lines.split_lines``; null for blank lines), and ``metadata[field + "_from"] = doc_score``;
    ``metadata[field]`` is then the ``doc_score`` rule of ``lines.DOC_SCORES`` (``document``:
    the whole-text score, as at document level; ``mean``/``min``/``len-weighted``: derived from
    the line scores). InputError on an unknown level or rule, or a rule other than ``document``
    at document level.

    Documents are scored ``batch_size`` at a time; nothing else is held in memory."""
    if batch_size < 1:
        raise InputError(f"--batch-size must be >= 1, got {batch_size}")
    L.check_score_options(level, doc_score, field, line_field)
    rs = ReadStats()
    st = StreamStats(score_range=list(model.score_range))
    total = 0.0
    for batch in _batches(iter_documents(path, skip_bad=skip_bad, stats=rs), batch_size):
        texts = [d["text"] for d in batch]
        whole = model.score(texts) if level == "document" or doc_score == "document" else [None] * len(batch)
        per_line = L.score_lines(model, texts) if level == "line" else None
        for j, d in enumerate(batch):
            md = d.get("metadata")
            if md is None:
                md = d["metadata"] = {}
            if per_line is None:
                s = float(whole[j])
            else:
                w = None if whole[j] is None else float(whole[j])
                s = L.doc_score_from_lines(per_line[j], L.split_lines(texts[j]), doc_score, whole=w)
                if s is None:  # no non-blank line, derived rule: the score of the (blank) text
                    s = float(model.score([texts[j]])[0])
            md[field] = float(s)
            md[field + "_range"] = list(st.score_range)
            if per_line is not None:
                md[line_field] = per_line[j]
                md[field + "_from"] = doc_score
            writer.write(d)
            total += float(s)
        writer.flush()
        st.written += len(batch)
        if bar is not None:
            bar.advance(len(batch))
    st.read, st.bad, st.first_bad = rs.read, rs.bad, rs.first_bad
    st.score_mean = total / st.written if st.written else None
    return st


def n_keep(n: int, top: float) -> int:
    """Documents kept by ``--top``: ``floor(top * n + 0.5)`` (round half up), at least 1 when n > 0."""
    if n == 0:
        return 0
    return min(n, max(1, int(math.floor(top * n + 0.5 + 1e-9))))


def select_stream(
    path: str,
    writer: DocumentWriter,
    *,
    top: float | None = None,
    threshold: float | None = None,
    field: str = "quality_score",
    skip_bad: bool = False,
) -> StreamStats:
    """Keep the top ``top`` fraction by ``metadata[field]`` (exact, ties broken by input
    order) or every document with score >= ``threshold``; documents are written unchanged,
    in input order. ``st.threshold`` is the threshold used (with ``--top``: the k-th largest
    score, the effective threshold); ``st.score_range`` the range recorded by ``score``.

    InputError: a threshold outside the recorded score range (it would keep nothing or
    everything), documents scored by classifiers with different ranges, unscored documents."""
    if (top is None) == (threshold is None):
        raise InputError("give exactly one of --top and --threshold")
    if top is not None and not 0.0 < top <= 1.0:
        raise InputError(f"--top must be in (0, 1], got {top}")
    if threshold is not None and math.isnan(threshold):
        raise InputError("--threshold is nan: give a number (scores >= it are kept)")
    st = StreamStats()
    if threshold is not None:
        rs = ReadStats()
        for d, s in scored_documents(path, field, skip_bad, rs, st, threshold):
            if s >= threshold:
                writer.write(d)
                st.written += 1
        st.read, st.bad, st.first_bad, st.threshold = rs.read, rs.bad, rs.first_bad, float(threshold)
        return st

    tmp = None
    if path == "-":  # two passes need a file: spool stdin to disk (constant memory)
        fd, tmp = tempfile.mkstemp(prefix="icml26-select-", suffix=".jsonl")
        with os.fdopen(fd, "wb") as f:
            shutil.copyfileobj(sys.stdin.buffer, f, 1 << 20)
        path = tmp
    try:
        # pass 1: scores only
        rs = ReadStats()
        scores = np.fromiter((s for _, s in scored_documents(path, field, skip_bad, rs, st)), dtype=np.float64)
        n = len(scores)
        k = n_keep(n, top)
        if k == 0:
            st.read, st.bad, st.first_bad = rs.read, rs.bad, rs.first_bad
            return st
        t = float(np.partition(scores, n - k)[n - k])  # k-th largest score
        n_above = int((scores > t).sum())
        ties_left = k - n_above  # documents scoring exactly t that are kept, first come first kept
        # pass 2: write the kept documents in input order
        rs2 = ReadStats()
        for d, s in scored_documents(path, field, True, rs2):
            if s > t or (s == t and ties_left > 0):
                if s == t:
                    ties_left -= 1
                writer.write(d)
                st.written += 1
        st.read, st.bad, st.first_bad, st.threshold = rs.read, rs.bad, rs.first_bad, t
        return st
    finally:
        if tmp is not None:
            os.unlink(tmp)
