"""Reading scored documents back: the score (``metadata.<field>``) and the score range that
``filter-data score`` wrote, checked document by document. Shared by document-level
(``cqf.select_stream``) and line-level (``lines.select_line_stream``) selection.
"""

from __future__ import annotations

import math
from typing import Iterator

from icml26.core.errors import InputError
from icml26.methods.filtering.jsonl import ReadStats, iter_documents


def get_score(doc: dict, field: str, where: str) -> float | str:
    """The score of a scored document, or an error message."""
    md = doc.get("metadata") or {}
    v = md.get(field)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return f"{where}: no numeric metadata.{field} (run `icml26 filter-data score` first)"
    return float(v)


def get_range(doc: dict, field: str, where: str) -> list | None | str:
    """``metadata[field + "_range"]`` written by ``score`` ([low, high], None = unbounded), None
    when the document has none (scored elsewhere), or an error message when it is malformed."""
    r = (doc.get("metadata") or {}).get(field + "_range")
    if r is None:
        return None
    ok = (
        isinstance(r, list)
        and len(r) == 2
        and all(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)) for v in r)
    )
    if not ok or (None not in r and r[0] > r[1]):
        return f"{where}: metadata.{field}_range must be [low, high] (null = unbounded), got {r!r}"
    return [None if v is None else float(v) for v in r]


def range_text(r: list | None) -> str:
    if r is None:
        return "unknown (no metadata range)"
    lo, hi = ("-inf" if r[0] is None else f"{r[0]:g}"), ("inf" if r[1] is None else f"{r[1]:g}")
    return f"[{lo}, {hi}]"


def scored_documents(
    path: str,
    field: str,
    skip_bad: bool,
    rs: ReadStats,
    st=None,
    threshold: float | None = None,
    with_lineno: bool = False,
) -> Iterator[tuple]:
    """(document, score) of each scored document (``with_lineno``: (line number, document, score)).
    With ``st``, the score range recorded by ``score`` is checked to be the same on every document (InputError
    otherwise) and kept in
    ``st.score_range``; a ``threshold`` outside it is an InputError at the first document,
    before anything is written."""
    name = "<stdin>" if path == "-" else path
    first = True
    for lineno, d in iter_documents(path, skip_bad=skip_bad, stats=rs):
        s = get_score(d, field, f"{name}:{lineno}")
        if isinstance(s, str):
            if not skip_bad:
                raise InputError(s + " (pass --skip-bad to skip such lines)")
            rs.bad += 1
            rs.read -= 1
            rs.first_bad = rs.first_bad or s
            continue
        if st is not None:
            r = get_range(d, field, f"{name}:{lineno}")
            if isinstance(r, str):
                raise InputError(r)
            if first:
                st.score_range, first = r, False
                if (
                    threshold is not None
                    and r is not None
                    and ((r[0] is not None and threshold < r[0]) or (r[1] is not None and threshold > r[1]))
                ):
                    raise InputError(
                        f"--threshold {threshold:g} is outside {range_text(r)}, the range of the scores "
                        f"in metadata.{field} (its classifier's {field}_range): it would keep "
                        f"{'nothing' if r[1] is not None and threshold > r[1] else 'everything'}; "
                        "choose a threshold inside it, or --top K for a fraction"
                    )
            elif r != st.score_range:
                raise InputError(
                    f"{name}:{lineno}: metadata.{field}_range {range_text(r)} differs from the first document's "
                    f"{range_text(st.score_range)}: the documents were scored by different classifiers; "
                    "select from one classifier's scores"
                )
            st.score_min = s if st.score_min is None else min(st.score_min, s)
            st.score_max = s if st.score_max is None else max(st.score_max, s)
        yield (lineno, d, s) if with_lineno else (d, s)
