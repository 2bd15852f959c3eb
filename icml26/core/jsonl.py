"""JSON lines: one record per line, NaN and infinities as null, numpy/torch scalars as numbers."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any


def _clean(v: Any) -> Any:
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {str(k): _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    if isinstance(v, Path):
        return str(v)
    if hasattr(v, "item") and callable(v.item) and getattr(v, "ndim", 1) == 0:  # numpy / torch scalar
        return _clean(v.item())
    if hasattr(v, "tolist") and callable(v.tolist):
        return _clean(v.tolist())
    return v


def to_json(record: dict) -> str:
    """One JSON line; NaN and infinities become null."""
    return json.dumps(_clean(record), allow_nan=False, ensure_ascii=False)


def complete_lines(path: Path) -> tuple[list[str], list[int], int]:
    """The complete lines of a JSON-lines file (no newline), the byte offset where each starts, and
    the byte length of the complete lines (a last line cut short by a kill is left out)."""
    data = Path(path).read_bytes()
    end = data.rfind(b"\n") + 1  # 0 when there is no complete line
    lines, offsets, pos = [], [], 0
    for raw in data[:end].split(b"\n")[:-1]:
        lines.append(raw.decode("utf-8", errors="replace"))
        offsets.append(pos)
        pos += len(raw) + 1
    return lines, offsets, end


def read_records(path: Path) -> list[dict]:
    """The records of a JSON-lines file written one flushed line per record (``records.jsonl``, a
    benchmark's step log): every complete line parsed, a last line cut short by a kill left out.

    Raises ValueError (json.JSONDecodeError) on a complete line that is not JSON."""
    return [json.loads(line) for line in complete_lines(path)[0] if line.strip()]
