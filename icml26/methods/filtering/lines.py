"""Line-level quality filtering: score every line of a document, drop the lines below a threshold.

A document-level score lets bad lines ride along inside kept documents (boilerplate, link
spam) or drags good text out with them (the request of datatrove#151). Here each line is
scored by the same classifier as whole documents, and ``select --level line`` drops the lines
below a threshold, keeping the document when enough of it remains.

One rule splits a text into lines, shared by ``score`` and ``select``:
  ``split_lines(text) == text.split("\\n")``. Only ``"\\n"`` separates lines (a ``"\\r"`` stays
  part of its line; ``\\x85``, ``\\u2028`` are not line breaks), so
  ``"\\n".join(split_lines(text)) == text`` for every string. A line that is empty or only
  whitespace is *blank*: a separator. It gets no score (``null`` in ``line_scores``), is never
  dropped and does not count towards a document's size.

Sizes are in words (``len(line.split())``), the token unit of ``len-weighted`` and
``--min-kept``.

Document scores derived from the line scores (``--doc-score``), over the non-blank lines
``i`` with score ``s_i`` and ``w_i`` words:
  ``document``      the classifier's score of the whole text (as at document level)
  ``mean``          ``mean_i s_i``
  ``min``           ``min_i s_i``
  ``len-weighted``  ``sum_i w_i s_i / sum_i w_i``
A document without a non-blank line has no line scores; every rule then gives the whole-text
score.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

from icml26.core.errors import InputError
from icml26.methods.filtering.jsonl import ReadStats
from icml26.methods.filtering.scored import scored_documents

LEVELS = ("document", "line")
DOC_SCORES = ("document", "mean", "min", "len-weighted")


def check_score_options(
    level: str, doc_score: str, field: str = "quality_score", line_field: str = "line_scores"
) -> None:
    """InputError (one line) for ``score`` options that do not go together."""
    if level not in LEVELS:
        raise InputError(f"--level must be one of {', '.join(LEVELS)}, got {level!r}")
    if doc_score not in DOC_SCORES:
        raise InputError(f"--doc-score must be one of {', '.join(DOC_SCORES)}, got {doc_score!r}")
    if level == "document" and doc_score != "document":
        raise InputError(f"--doc-score {doc_score} derives the document score from line scores: add --level line")
    if level == "line" and line_field in (field, field + "_range", field + "_from", field + "_before", "lines_dropped"):
        raise InputError(
            f"--line-field {line_field!r} collides with a key `score`/`select` write for --field {field!r}: "
            "choose another name"
        )


def check_select_options(
    level: str, *, top: float | None, threshold: float | None, min_kept: float | None, model: str | None
) -> None:
    """InputError (one line) for ``select`` options that do not go together."""
    if level not in LEVELS:
        raise InputError(f"--level must be one of {', '.join(LEVELS)}, got {level!r}")
    if level == "document":
        for flag, v in (("--min-kept", min_kept), ("--model", model)):
            if v is not None:
                raise InputError(f"{flag} applies to --level line only (document-level select keeps whole documents)")
        return
    if top is not None:
        raise InputError("--level line takes --threshold T (lines scoring below T are dropped), not --top")
    if threshold is None:
        raise InputError("--level line needs --threshold T: lines scoring below T are dropped")
    if math.isnan(threshold):
        raise InputError("--threshold is nan: give a number (lines scoring >= it are kept)")
    if min_kept is not None and (isinstance(min_kept, bool) or not 0.0 <= min_kept <= 1.0):
        raise InputError(f"--min-kept must be a fraction in [0, 1] of a document's words, got {min_kept}")


def split_lines(text: str) -> list[str]:
    """The lines of ``text``: ``text.split("\\n")`` (see the module doc). Never empty: ``""`` is one blank line."""
    return text.split("\n")


def join_lines(lines: Sequence[str]) -> str:
    """Inverse of :func:`split_lines`: ``join_lines(split_lines(t)) == t``."""
    return "\n".join(lines)


def is_blank(line: str) -> bool:
    """A separator line: empty or whitespace only (it has no words)."""
    return not line.strip()


def n_words(line: str) -> int:
    """Words of a line (whitespace-separated tokens); 0 exactly for a blank line."""
    return len(line.split())


def doc_score_from_lines(
    line_scores: Sequence[float | None], lines: Sequence[str], rule: str, whole: float | None = None
) -> float | None:
    """The document score of ``rule`` (one of DOC_SCORES) from the line scores.

    line_scores: one per line, None for the blank lines; lines: the lines they score.
    whole: the classifier's score of the whole text; returned for ``document`` and when no
    line has a score. Raises ValueError on an unknown rule."""
    if rule not in DOC_SCORES:
        raise ValueError(f"doc-score rule must be one of {', '.join(DOC_SCORES)}, got {rule!r}")
    pairs = [(s, n_words(ln)) for s, ln in zip(line_scores, lines) if s is not None]
    if rule == "document" or not pairs:
        return whole
    if rule == "mean":
        return math.fsum(s for s, _ in pairs) / len(pairs)
    if rule == "min":
        return min(s for s, _ in pairs)
    w = sum(n for _, n in pairs)
    return math.fsum(s * n for s, n in pairs) / w


def score_lines(model, texts: Sequence[str]) -> list[list[float | None]]:
    """Line scores of each text: one list per text, aligned with ``split_lines(text)``, None for
    blank lines. All non-blank lines of the batch go through ``model.score`` in one call."""
    split = [split_lines(t) for t in texts]
    flat = [ln for lines in split for ln in lines if not is_blank(ln)]
    scores = iter(model.score(flat).tolist()) if flat else iter(())
    return [[None if is_blank(ln) else float(next(scores)) for ln in lines] for lines in split]


def check_line_scores(doc: dict, line_field: str, where: str) -> list[float | None] | str:
    """``metadata[line_field]`` of a document scored by ``score --level line``, checked to be
    aligned with its text's lines (a number for every non-blank line, null for every blank
    one); an error message otherwise."""
    v = (doc.get("metadata") or {}).get(line_field)
    if v is None:
        return f"{where}: no metadata.{line_field} (run `icml26 filter-data score --level line` first)"
    lines = split_lines(doc["text"])
    if not isinstance(v, list) or len(v) != len(lines):
        n = len(v) if isinstance(v, list) else type(v).__name__
        return (
            f"{where}: metadata.{line_field} must be a list with one entry per line of the text "
            f"({len(lines)} lines), got {n}; rescore with `score --level line`"
        )
    for i, (s, ln) in enumerate(zip(v, lines)):
        if is_blank(ln):
            if s is not None:
                return f"{where}: metadata.{line_field}[{i}] scores a blank line; blank lines have null"
        elif isinstance(s, bool) or not isinstance(s, (int, float)) or not math.isfinite(s):
            return f"{where}: metadata.{line_field}[{i}] is {s!r}, not a finite number for line {i + 1} of the text"
    return [None if s is None else float(s) for s in v]


@dataclass
class LineSelection:
    """What ``select_lines`` keeps of one document."""

    kept: list[int]  # indices of the kept lines (blank lines included), in order
    dropped: list[int]  # indices of the dropped lines, in order
    words_total: int  # words of the non-blank lines
    words_kept: int
    keep_document: bool
    kept_fraction: float | None = field(default=None)  # words_kept / words_total (None: no words)


def select_lines(
    lines: Sequence[str],
    line_scores: Sequence[float | None],
    threshold: float,
    min_kept: float,
    doc_score: float | None = None,
) -> LineSelection:
    """Drop the non-blank lines scoring below ``threshold``; keep the document when the kept
    lines hold at least ``min_kept`` of its words and at least one non-blank line remains.

    A document with no non-blank line is kept iff ``doc_score >= threshold`` (as at document
    level). Blank lines are never dropped."""
    kept, dropped = [], []
    total = kept_w = 0
    for i, (ln, s) in enumerate(zip(lines, line_scores)):
        if s is None:
            kept.append(i)
            continue
        w = n_words(ln)
        total += w
        if s >= threshold:
            kept.append(i)
            kept_w += w
        else:
            dropped.append(i)
    if total == 0:
        keep = doc_score is not None and doc_score >= threshold
        return LineSelection(kept, dropped, 0, 0, keep, None)
    frac = kept_w / total
    return LineSelection(kept, dropped, total, kept_w, kept_w > 0 and frac >= min_kept, frac)


@dataclass
class LineStats:
    read: int = 0
    written: int = 0
    bad: int = 0
    first_bad: str | None = None
    dropped_min_kept: int = (
        0  # documents dropped: too little of them kept (or, with no words, their score below the threshold)
    )
    lines_total: int = 0  # non-blank lines read
    lines_dropped: int = 0  # non-blank lines dropped (in the documents written)
    words_total: int = 0
    words_kept: int = 0  # words written
    threshold: float | None = None
    score_range: list | None = None
    score_min: float | None = None
    score_max: float | None = None


def select_line_stream(
    path: str,
    writer,
    *,
    threshold: float | None,
    min_kept: float = 0.5,
    field: str = "quality_score",
    line_field: str = "line_scores",
    model=None,
    skip_bad: bool = False,
    top: float | None = None,
) -> LineStats:
    """``select --level line``: write each document whose kept lines hold at least ``min_kept``
    of its words, with

    - ``text``: the kept lines (blank separators included), joined by ``"\\n"``;
    - ``metadata[line_field]``: their scores (still aligned with the new text);
    - ``metadata.lines_dropped``: the number of lines dropped;
    - ``metadata[field + "_before"]``: the score the document came in with;
    - ``metadata[field]``: the score of the kept text, by the rule it was scored with
      (``metadata[field + "_from"]``: ``mean``/``min``/``len-weighted`` from the kept line
      scores, exactly what ``score --level line`` gives the kept text; ``document``: the
      classifier ``model`` rescoring the kept text, so ``model`` is then required).

    InputError (before anything is written, since the writer is atomic): ``top``, a missing
    or bad threshold or ``min_kept`` (:func:`check_select_options`), line scores not aligned with the text, a threshold
    outside
    the scores' range, rule ``document`` without a model."""

    check_select_options("line", top=top, threshold=threshold, min_kept=min_kept, model=None)
    name = "<stdin>" if path == "-" else path
    st = LineStats(threshold=float(threshold))
    rs = ReadStats()
    pending: list[tuple[dict, str | None]] = []  # (document, kept text to rescore or None), in input order

    def finish():
        texts = [t for _, t in pending if t is not None]
        after = iter(model.score(texts).tolist()) if texts else iter(())
        for d, t in pending:
            if t is not None:
                d["metadata"][field] = float(next(after))
            writer.write(d)
        pending.clear()

    for lineno, d, s in scored_documents(path, field, skip_bad, rs, st, threshold, with_lineno=True):
        where = f"{name}:{lineno}"
        ls = check_line_scores(d, line_field, where)
        rule = d["metadata"].get(field + "_from", "document")
        if not isinstance(ls, str) and rule not in DOC_SCORES:
            ls = f"{where}: metadata.{field}_from is {rule!r}, not one of {', '.join(DOC_SCORES)}"
        if isinstance(ls, str):
            if not skip_bad:
                raise InputError(ls + " (pass --skip-bad to skip such documents)")
            rs.bad += 1
            rs.read -= 1
            rs.first_bad = rs.first_bad or ls
            continue
        if rule == "document" and model is None:
            raise InputError(
                f"{where}: metadata.{field} is the whole-document score (scored with --doc-score document): "
                "give --model M to rescore the kept text, or score with --doc-score mean|min|len-weighted"
            )
        lines = split_lines(d["text"])
        sel = select_lines(lines, ls, threshold, min_kept, doc_score=s)
        st.lines_total += sum(1 for x in ls if x is not None)
        st.words_total += sel.words_total
        if not sel.keep_document:
            st.dropped_min_kept += 1
            continue
        st.lines_dropped += len(sel.dropped)
        st.words_kept += sel.words_kept
        st.written += 1
        kept_lines = [lines[i] for i in sel.kept]
        kept_scores = [ls[i] for i in sel.kept]
        md = d["metadata"]
        d["text"] = join_lines(kept_lines)
        md[line_field] = kept_scores
        md["lines_dropped"] = len(sel.dropped)
        md[field + "_before"] = s
        if rule == "document":  # the classifier rescoring the kept text (unchanged when nothing was dropped)
            pending.append((d, d["text"] if sel.dropped else None))
        else:
            md[field] = doc_score_from_lines(kept_scores, kept_lines, rule, whole=s)
            pending.append((d, None))
        if len(pending) >= 256:
            finish()
    finish()
    st.read, st.bad, st.first_bad = rs.read, rs.bad, rs.first_bad
    return st
