"""Sensor time series (``SensorSeries``: traffic counts, speeds, travel times) read from the
files the field ships: CSV, METR-LA / PEMS-BAY .h5, PeMSD .npz, long parquet; and the real
traffic counts of PyPI ``traffic-anomaly`` (MIT; ships parquet sample data).

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


# ---------------------------------------------------------------------------------------------
# Sensor series for forecasting (``icml26 traffic``): a (T, N) array with timestamps and a
# sensor table, read from the formats traffic users have.
# ---------------------------------------------------------------------------------------------

SERIES_FORMATS = (
    ".csv (a time column + one column per sensor), .h5/.hdf5 (METR-LA / PEMS-BAY), .npz (PeMSD4/8), "
    ".parquet (long: timestamp, detector, total)"
)
TIME_COLUMNS = ("timestamp", "time", "date", "datetime", "Time", "Date", "")  # "" = pandas' unnamed index column


class SensorSeries:
    """A multivariate sensor series.

    values: (T, N) float64, real units (NaN = missing); timestamps: (T,) numpy datetime64[ns],
    strictly increasing; sensors: N sensor ids (str); groups: optional N group labels (e.g. the
    road of each lane); step_s: the base sampling interval in seconds (the median difference of
    consecutive timestamps). Raises InputError on shapes that do not match, unsorted or repeated
    timestamps, or fewer than 2 steps."""

    def __init__(self, values, timestamps, sensors, *, groups=None, source: str = "series", unit: str = ""):
        import numpy as np

        v = np.asarray(values, dtype=np.float64)
        ts = np.asarray(timestamps).astype("datetime64[ns]")
        if v.ndim != 2:
            raise InputError(f"{source}: expected a (time, sensor) table, got shape {v.shape}")
        if v.shape[0] != ts.shape[0]:
            raise InputError(f"{source}: {v.shape[0]} rows of values but {ts.shape[0]} timestamps")
        if v.shape[0] < 2 or v.shape[1] < 1:
            raise InputError(f"{source}: needs at least 2 time steps and 1 sensor, got shape {v.shape}")
        d = np.diff(ts.astype(np.int64))
        if (d <= 0).any():
            i = int(np.argmax(d <= 0))
            raise InputError(f"{source}: timestamps not strictly increasing at row {i + 1} ({ts[i]} then {ts[i + 1]})")
        if np.isinf(v).any():
            raise InputError(f"{source}: infinite values")
        sensors = [str(s) for s in sensors]
        if len(sensors) != v.shape[1] or len(set(sensors)) != len(sensors):
            raise InputError(f"{source}: {v.shape[1]} columns need {v.shape[1]} distinct sensor ids")
        if groups is not None and len(groups) != v.shape[1]:
            raise InputError(f"{source}: {len(groups)} group labels for {v.shape[1]} sensors")
        self.values, self.timestamps, self.sensors = v, ts, sensors
        self.groups = None if groups is None else [str(g) for g in groups]
        self.source, self.unit = source, unit
        self.step_s = float(np.median(d)) / 1e9

    @property
    def shape(self) -> tuple[int, int]:
        return self.values.shape

    def sensor_table(self):
        """pandas DataFrame: sensor, group (None when unknown), mean, zero_fraction."""
        import numpy as np
        import pandas as pd

        return pd.DataFrame(
            {
                "sensor": self.sensors,
                "group": self.groups or [None] * len(self.sensors),
                "mean": np.nanmean(self.values, 0),
                "zero_fraction": (self.values == 0).mean(0),
            }
        )

    def segments(self) -> list[tuple[int, int]]:
        """Contiguous runs [start, end) of rows: a new run starts wherever consecutive timestamps
        differ by anything other than ``step_s`` (a gap, e.g. overnight) and around rows with a
        missing value. Forecast windows are cut inside one run only (never across a gap)."""
        import numpy as np

        ok = ~np.isnan(self.values).any(1)
        d = np.diff(self.timestamps.astype(np.int64)) / 1e9
        out, start = [], None
        for t in range(len(ok)):
            if start is not None and (not ok[t] or abs(d[t - 1] - self.step_s) > 1e-6):
                out.append((start, t))
                start = None
            if ok[t] and start is None:
                start = t
        if start is not None:
            out.append((start, len(ok)))
        return out

    def select(self, rows) -> "SensorSeries":
        """Rows (a boolean mask or index array) as a new series (same sensors)."""
        return SensorSeries(
            self.values[rows],
            self.timestamps[rows],
            self.sensors,
            groups=self.groups,
            source=self.source,
            unit=self.unit,
        )


def _time_column(df, source: str):
    for c in df.columns:
        if str(c) in TIME_COLUMNS or str(c).startswith("Unnamed: 0"):
            return c
    raise InputError(f"{source}: no time column (expected one named {', '.join(repr(c) for c in TIME_COLUMNS[:5])})")


def _parse_times(col, source: str):
    import pandas as pd

    try:
        ts = pd.to_datetime(col, errors="raise")
    except (ValueError, TypeError, OverflowError):
        raise InputError(
            f"{source}: the time column is not parseable as dates (first value {str(col.iloc[0])[:30]!r})"
        ) from None
    if getattr(ts.dt, "tz", None) is not None:
        ts = ts.dt.tz_convert("UTC").dt.tz_localize(None)
    return ts.to_numpy(dtype="datetime64[ns]")


def read_series_csv(path: str | Path, source: str | None = None) -> SensorSeries:
    """CSV with a time column (``timestamp``, ``time``, ``date``... or an unnamed first column,
    the layout of the LaneLevel-Traffic-Benchmark / Mini-Traffic PeMS lane CSVs) and one numeric
    column per sensor. Empty cells are missing values. Raises InputError on a file that is not
    such a table."""
    import pandas as pd

    src = source or f"series file {str(path)!r}"
    try:
        df = pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise InputError(f"{src}: not a readable CSV ({str(e).splitlines()[0][:80]})") from None
    tcol = _time_column(df, src)
    ts = _parse_times(df[tcol], src)
    data = df.drop(columns=[tcol])
    if data.shape[1] == 0:
        raise InputError(f"{src}: no sensor columns beside the time column {str(tcol)!r}")
    bad = [c for c in data.columns if not pd.api.types.is_numeric_dtype(data[c])]
    if bad:
        raise InputError(f"{src}: column {str(bad[0])!r} is not numeric")
    order = ts.argsort(kind="stable")
    return SensorSeries(data.to_numpy(dtype=float)[order], ts[order], list(data.columns), source=src)


def read_series_h5(path: str | Path, key: str | None = None, source: str | None = None) -> SensorSeries:
    """METR-LA / PEMS-BAY ``.h5`` (a pandas ``to_hdf`` fixed-format frame: group ``df`` (or
    ``speed``, or the only group) with ``axis0`` = sensor ids, ``axis1`` = int64 ns timestamps,
    ``block0_values`` (T, N)), read with h5py (no PyTables needed). Zeros in METR-LA speed are
    missing readings by that set's convention: they are kept as values here; ``traffic``'s
    ``null_value`` (auto: 0 for .h5) leaves them out of the metrics and of every model's fit."""
    src = source or f"series file {str(path)!r}"
    try:
        import h5py
    except ImportError:
        raise InputError(f"{src}: reading .h5 needs h5py: pip install 'icml26[traffic]'") from None
    import numpy as np

    try:
        f = h5py.File(path, "r")
    except OSError:
        raise InputError(f"{src}: not an HDF5 file") from None
    with f:
        names = [k for k in f.keys() if isinstance(f[k], h5py.Group)]
        k = key or next((n for n in ("df", "speed", "flow") if n in names), names[0] if len(names) == 1 else None)
        if k is None or k not in f:
            raise InputError(f"{src}: no frame group (found {', '.join(names) or 'none'}; expected 'df')")
        g = f[k]
        need = ("axis0", "axis1", "block0_values")
        missing = [n for n in need if n not in g]
        if missing:
            raise InputError(f"{src}: group {k!r} lacks {', '.join(missing)} (expected a pandas fixed-format frame)")
        cols = [c.decode() if isinstance(c, bytes) else str(c) for c in g["axis0"][()]]
        idx = g["axis1"][()]
        vals = g["block0_values"][()]
        if "block1_values" in g:
            raise InputError(f"{src}: frame has mixed column types; save it with numeric columns only")
    if vals.shape != (len(idx), len(cols)):
        raise InputError(
            f"{src}: block0_values shape {vals.shape} does not match {len(idx)} times x {len(cols)} sensors"
        )
    ts = np.asarray(idx).astype("int64").astype("datetime64[ns]")
    return SensorSeries(np.asarray(vals, dtype=float), ts, cols, source=src)


def read_series_npz(
    path: str | Path, *, feature: int = 0, start: str = "2018-01-01", step_s: float = 300.0, source: str | None = None
) -> SensorSeries:
    """PeMSD4 / PeMSD8 ``.npz``: array ``data`` of shape (T, N, F) (F = 3: flow, occupancy,
    speed; ``feature`` picks one) or (T, N), 5-minute steps with no timestamps in the file: they
    are ``start`` + k * ``step_s`` (PeMSD4 starts 2018-01-01, PeMSD8 2016-07-01). An array
    ``timestamps`` (datetime64 or int64 ns) and ``sensors`` in the file take precedence."""
    import numpy as np

    src = source or f"series file {str(path)!r}"
    try:
        z = np.load(path, allow_pickle=False)
    except (ValueError, OSError):
        raise InputError(f"{src}: not a readable .npz file (object arrays are refused)") from None
    with z:
        if "data" not in z.files:
            raise InputError(f"{src}: no array 'data' (found {', '.join(z.files) or 'none'})")
        a = z["data"]
        ts = z["timestamps"] if "timestamps" in z.files else None
        sensors = [str(s) for s in z["sensors"]] if "sensors" in z.files else None
    if a.ndim == 3:
        if not 0 <= feature < a.shape[2]:
            raise InputError(f"{src}: feature {feature} out of range (data has {a.shape[2]} features)")
        a = a[:, :, feature]
    elif a.ndim != 2:
        raise InputError(f"{src}: 'data' must be (T, N) or (T, N, F), got shape {a.shape}")
    if ts is None:
        t0 = np.datetime64(start, "ns")
        ts = t0 + (np.arange(a.shape[0]) * int(step_s * 1e9)).astype("timedelta64[ns]")
    ts = np.asarray(ts).astype("datetime64[ns]")
    return SensorSeries(a.astype(float), ts, sensors or [str(i) for i in range(a.shape[1])], source=src)


def read_series_long(path: str | Path, source: str | None = None) -> SensorSeries:
    """The traffic-anomaly long table (timestamp, detector, total) -> a wide series in vehicles
    per interval; an interval with no row for a detector is missing (NaN)."""
    df = load_counts(path)
    wide = df.pivot_table(index="timestamp", columns="detector", values="total", aggfunc="sum").sort_index()
    return SensorSeries(
        wide.to_numpy(dtype=float),
        wide.index.to_numpy(dtype="datetime64[ns]"),
        [f"det_{int(c):02d}" if str(c).isdigit() else str(c) for c in wide.columns],
        source=source or f"counts file {str(path)!r}",
        unit="vehicles / interval",
    )


def read_series(path: str | Path, **kw) -> SensorSeries:
    """Read a user's series by its suffix: see ``SERIES_FORMATS``. Raises InputError for a
    missing file or an unknown suffix."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"series file {str(path)!r} does not exist or is not a file")
    suf = p.suffix.lower()
    if suf == ".csv":
        return read_series_csv(p)
    if suf in (".h5", ".hdf5"):
        return read_series_h5(p, key=kw.get("key"))
    if suf == ".npz":
        return read_series_npz(p, **{k: v for k, v in kw.items() if k in ("feature", "start", "step_s")})
    if suf == ".parquet":
        return read_series_long(p)
    raise InputError(f"series file {str(path)!r}: unknown format {suf or '(no suffix)'}; use {SERIES_FORMATS}")


def lane_counts(path: str | Path | None = None) -> SensorSeries:
    """The built-in lane-level series: vehicles per 15 minutes of the 22 detectors (lanes) of
    traffic-anomaly's ``sample_counts`` (2,492 intervals, 2024-04-18 .. 2024-05-13), or a user's
    long counts table with the same columns."""
    p = Path(path) if path is not None else package_data_dir() / "sample_counts.parquet"
    s = read_series_long(p, source="traffic-anomaly sample_counts" if path is None else None)
    s.unit = "vehicles / 15 min"
    return s


def group_by_correlation(values, n_groups: int):
    """Group sensors into ``n_groups`` pseudo-roads: average-linkage clustering of the distance
    1 - Pearson correlation of their series (values (T, N); constant sensors correlate 0 with
    every other). Returns N integer labels 0..n_groups-1, ordered by first appearance.
    Raises ValueError if n_groups is not in [1, N]."""
    import numpy as np
    from scipy.cluster.hierarchy import fcluster, linkage
    from scipy.spatial.distance import squareform

    v = np.asarray(values, dtype=float)
    n = v.shape[1]
    if not 1 <= n_groups <= n:
        raise ValueError(f"n_groups must be in [1, {n}], got {n_groups}")
    if n_groups == 1:
        return np.zeros(n, dtype=int)
    with np.errstate(invalid="ignore", divide="ignore"):
        c = np.corrcoef(np.nan_to_num(v, nan=np.nanmean(v)).T)
    c = np.nan_to_num(c, nan=0.0)
    np.fill_diagonal(c, 1.0)
    dist = np.clip(1.0 - c, 0.0, 2.0)
    lab = fcluster(linkage(squareform(dist, checks=False), method="average"), n_groups, criterion="maxclust")
    _, first = np.unique(lab, return_index=True)
    order = {lab[i]: k for k, i in enumerate(sorted(first))}
    return np.array([order[x] for x in lab], dtype=int)


def road_series(lanes: SensorSeries, labels) -> SensorSeries:
    """Road-level series: each road is the mean of its lanes (the convention of the PeMS lane/road
    CSVs of docs/traffic.md). labels: N road labels (ints)."""
    import numpy as np

    labels = np.asarray(labels)
    roads = sorted(set(labels.tolist()))
    vals = np.stack([lanes.values[:, labels == r].mean(1) for r in roads], 1)
    return SensorSeries(vals, lanes.timestamps, [f"road_{r}" for r in roads], source="pseudo-roads", unit=lanes.unit)
