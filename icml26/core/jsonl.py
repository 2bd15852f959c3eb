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
