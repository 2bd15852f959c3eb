"""Chronological day splits, gap-aware forecast windows, scaling and real-unit metrics.

Protocol (``icml26 traffic``, docs/traffic.md "Protocol"): the lane-level series is
cut by calendar day into [pre-training | fine-tuning | validation | test] days. Road-level
pre-training sees only road series before the validation days; lane models see the last
``lane_fraction`` of the fine-tuning period; validation (early stopping) and test days are
fixed. A window is ``input_steps`` inputs followed by ``horizon`` targets; it lies inside one
contiguous run of the series (``SensorSeries.segments``: a change of the sampling step, e.g. an
overnight gap, or a missing value ends a run) and inside one split, so no window spans a gap
and none mixes two splits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from icml26.core.errors import InputError


@dataclass(frozen=True)
class Split:
    """Row ranges [start, end) of one series, per period."""

    pretrain: tuple[int, int]
    finetune: tuple[int, int]
    val: tuple[int, int]
    test: tuple[int, int]
    days: tuple[str, ...]  # the calendar days of the series, in order


def day_split(timestamps, pretrain_days: int, finetune_days: int, val_days: int, test_days: int) -> Split:
    """Cut rows by calendar day (timestamps (T,) datetime64). test_days 0 = every day after the
    validation days. Raises InputError when the series has too few days."""
    days = timestamps.astype("datetime64[D]")
    uniq = np.unique(days)
    need = pretrain_days + finetune_days + val_days + max(test_days, 1)
    if len(uniq) < need:
        raise InputError(
            f"the series covers {len(uniq)} day(s); the split needs {need} "
            f"(pretrain_days {pretrain_days} + finetune_days {finetune_days} + val_days {val_days} + test_days "
            f"{max(test_days, 1)})"
        )

    def rows(d0: int, d1: int) -> tuple[int, int]:
        if d1 <= d0:
            return (0, 0)
        lo = int(np.searchsorted(days, uniq[d0], "left"))
        hi = int(np.searchsorted(days, uniq[d1 - 1], "right"))
        return (lo, hi)

    a = pretrain_days
    b = a + finetune_days
    c = b + val_days
    e = len(uniq) if test_days == 0 else c + test_days
    return Split(rows(0, a), rows(a, b), rows(b, c), rows(c, e), tuple(str(d) for d in uniq))


def fraction_rows(rows: tuple[int, int], fraction: float) -> tuple[int, int]:
    """The last ``fraction`` of a row range (the most recent lane data before validation)."""
    lo, hi = rows
    n = int(math.ceil(fraction * (hi - lo) - 1e-9))
    return (hi - n, hi)


def window_starts(segments, rows: tuple[int, int], length: int) -> np.ndarray:
    """Start rows s of every window [s, s + length) inside ``rows`` and inside one segment."""
    lo, hi = rows
    out = []
    for a, b in segments:
        a, b = max(a, lo), min(b, hi)
        if b - a >= length:
            out.append(np.arange(a, b - length + 1))
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


def make_windows(values: np.ndarray, starts: np.ndarray, input_steps: int, horizon: int):
    """values (T, N) -> x (W, input_steps, N), y (W, horizon, N) for windows at ``starts``."""
    idx_x = starts[:, None] + np.arange(input_steps)[None]
    idx_y = starts[:, None] + input_steps + np.arange(horizon)[None]
    return values[idx_x], values[idx_y]


def time_features(timestamps, starts: np.ndarray, input_steps: int, step_s: float):
    """Time-of-day slot and day of week of the last input step of each window: (W,), (W,) int64."""
    t = timestamps[starts + input_steps - 1]
    sec = (t - t.astype("datetime64[D]")).astype("timedelta64[s]").astype(np.int64)
    slots = max(1, int(round(86400 / step_s)))
    tod = np.clip((sec / step_s).astype(np.int64), 0, slots - 1)
    dow = ((t.astype("datetime64[D]").astype(np.int64) + 3) % 7).astype(
        np.int64
    )  # 1970-01-01 was a Thursday: Monday = 0
    return tod, dow


@dataclass(frozen=True)
class Scaler:
    """One mean and standard deviation over all training values (every sensor)."""

    mean: float
    std: float

    @classmethod
    def fit(cls, values: np.ndarray) -> "Scaler":
        v = values[np.isfinite(values)]
        if v.size == 0:
            raise InputError("no finite training values to fit the scaler on")
        sd = float(v.std())
        return cls(float(v.mean()), sd if sd > 1e-8 else 1.0)

    def transform(self, v):
        return (v - self.mean) / self.std

    def inverse(self, v):
        return v * self.std + self.mean


NULL_ATOL = 5e-5  # a reading within this of the null value is null (BasicTS masked metrics)


def valid_mask(true: np.ndarray, null_value: float | None = None) -> np.ndarray:
    """Scored entries: finite truth values, and with a null value those not within NULL_ATOL of it."""
    t = np.asarray(true, dtype=np.float64)
    ok = np.isfinite(t)
    if null_value is not None:
        ok &= np.abs(t - null_value) > NULL_ATOL
    return ok


def metrics(pred: np.ndarray, true: np.ndarray, mape_min: float, null_value: float | None = None) -> dict:
    """MAE, RMSE and MAPE in the series' real units.

    pred, true: same shape, real units (e.g. vehicles per 15 minutes). MAE and RMSE average
    over every finite truth value (a zero count is a real observation and is scored), except,
    with ``null_value``, the truths equal to it (missing readings, e.g. the zeros of METR-LA /
    PEMS-BAY): the masked MAE / RMSE / MAPE of BasicTS and LargeST (mean over the unmasked
    entries; RMSE = sqrt of the masked MSE). MAPE (in percent) averages |pred - true| / true over
    the unmasked truth values > ``mape_min`` only; None when there is none."""
    p = np.asarray(pred, dtype=np.float64)
    t = np.asarray(true, dtype=np.float64)
    if p.shape != t.shape:
        raise ValueError(f"pred shape {p.shape} != true shape {t.shape}")
    ok = valid_mask(t, null_value)
    if not ok.any():
        return {"mae": None, "rmse": None, "mape": None}
    err = p[ok] - t[ok]
    m = ok & (t > mape_min)
    mape = float(np.mean(np.abs(p[m] - t[m]) / t[m]) * 100.0) if m.any() else None
    return {"mae": float(np.mean(np.abs(err))), "rmse": float(np.sqrt(np.mean(err**2))), "mape": mape}


def window_errors(pred: np.ndarray, true: np.ndarray, null_value: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per test window: the sum of |pred - true| over the scored entries, and their count (MAE =
    sum / count over all windows, as ``metrics``). pred, true: (W, N)."""
    p = np.asarray(pred, dtype=np.float64).reshape(len(pred), -1)
    t = np.asarray(true, dtype=np.float64).reshape(len(true), -1)
    ok = valid_mask(t, null_value)
    return np.where(ok, np.abs(p - t), 0.0).sum(1), ok.sum(1).astype(np.float64)


def block_bootstrap_mae_ci(
    abs_sum: np.ndarray, count: np.ndarray, block: int, n_boot: int = 2000, seed: int = 0, level: float = 0.95
) -> list[float] | None:
    """Moving-block bootstrap (Kuensch 1989) percentile interval of the MAE over test windows:
    blocks of ``block`` consecutive windows (one day: neighbouring windows overlap and errors
    persist within a day) drawn with replacement until the test length is covered. The interval
    of a deterministic model's score on this test set; None with fewer than two blocks."""
    w = len(abs_sum)
    block = max(1, min(int(block), w))
    n_blocks = -(-w // block)
    if w - block + 1 < 2 or n_blocks < 2:
        return None
    cs = np.concatenate([[0.0], np.cumsum(abs_sum)])
    cn = np.concatenate([[0.0], np.cumsum(count)])
    starts = np.random.default_rng(seed).integers(0, w - block + 1, size=(n_boot, n_blocks))
    num = (cs[starts + block] - cs[starts]).sum(1)
    den = (cn[starts + block] - cn[starts]).sum(1)
    mae = num[den > 0] / den[den > 0]
    if mae.size < 2:
        return None
    lo, hi = np.quantile(mae, [(1 - level) / 2, (1 + level) / 2])
    return [float(lo), float(hi)]


def mean_ci(values, level: float = 0.95) -> list[float] | None:
    """Student-t interval of the mean of ``values`` over seeds; None for one value (one seed has
    no interval, never a zero-width one)."""
    v = np.asarray(values, dtype=float)
    if v.size < 2:
        return None
    from scipy.stats import t as student

    half = float(student.ppf(0.5 + level / 2, v.size - 1) * v.std(ddof=1) / math.sqrt(v.size))
    return [float(v.mean() - half), float(v.mean() + half)]
