"""Small synthetic lane/road series written as files, for the traffic tests."""

import numpy as np
import pandas as pd


def lanes_frame(days=10, step_min=15, n=6, seed=0, gap_day=None):
    """Daily-cycle counts of n lanes (vehicles / step) with noise; optional overnight gap
    (00:00-06:00 removed) on ``gap_day``."""
    rng = np.random.default_rng(seed)
    steps = days * 24 * 60 // step_min
    ts = pd.date_range("2024-03-04", periods=steps, freq=f"{step_min}min")
    tod = (ts.hour * 60 + ts.minute).to_numpy() / 1440.0
    base = 20 + 15 * np.sin(2 * np.pi * (tod - 0.3))
    scale = np.linspace(0.5, 1.5, n)
    vals = np.maximum(0, base[:, None] * scale[None] + rng.normal(0, 2, (steps, n)))
    df = pd.DataFrame(np.round(vals, 1), columns=[f"lane_{i}" for i in range(n)])
    df.insert(0, "timestamp", ts)
    if gap_day is not None:
        day = ts.normalize() == ts.normalize().unique()[gap_day]
        df = df[~(day & (ts.hour < 6))]
    return df.reset_index(drop=True)


def travel_times_frame(days=35, n=8, seed=0, night=(22, 6)):
    """Wide CSV of 15-minute travel times (seconds) of n road segments, one row per step, no rows
    overnight (night[0]:00 to night[1]:00): the layout of a user's export from a travel-time feed."""
    rng = np.random.default_rng(seed)
    ts = pd.date_range("2024-02-05", periods=days * 96, freq="15min")
    keep = (ts.hour >= night[1]) & (ts.hour < night[0])
    ts = ts[keep]
    tod = (ts.hour * 60 + ts.minute).to_numpy() / 1440.0
    peak = np.exp(-(((tod - 0.33) / 0.05) ** 2)) + 0.8 * np.exp(-(((tod - 0.72) / 0.06) ** 2))
    free = rng.uniform(60, 240, n)
    weekday = np.asarray(ts.dayofweek < 5)[:, None]
    vals = free[None] * (1 + (0.3 + 0.5 * weekday) * peak[:, None]) + rng.normal(0, 5, (ts.size, n))
    df = pd.DataFrame(np.round(vals, 1), columns=[f"segment_{i}" for i in range(n)])
    df.insert(0, "timestamp", ts)
    return df


def write_csv(df, path):
    df.to_csv(path, index=False)
    return path


SMALL = dict(
    pretrain_days=4,
    finetune_days=2,
    val_days=1,
    test_days=2,
    input_steps=8,
    horizons=(1, 4),
    epochs=2,
    pretrain_epochs=2,
    graph_warmup_epochs=1,
    d_model=16,
    d_ff=32,
    n_layers=1,
    seeds=1,
    lane_fractions=(0.5,),
    pretrain_stride=4,
    patience=2,
)
