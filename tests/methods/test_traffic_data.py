"""Traffic readers (csv / h5 / npz / long parquet), gap-aware windows, chronological splits and
real-unit metrics (icml26.core.data.sensor_series, icml26.methods.traffic.data)."""

import math

import numpy as np
import pandas as pd
import pytest

from icml26.core.data import sensor_series as td
from icml26.core.errors import InputError
from icml26.methods.traffic import data as D
from tests.methods.traffic_synth import lanes_frame, write_csv


def test_metrics_constant_forecast_hand_computed():
    true = np.array([[0.0, 2.0], [6.0, 10.0]])
    m = D.metrics(np.full_like(true, 4.0), true, mape_min=5.0)
    assert m["mae"] == pytest.approx(3.5)  # |4-0|, |4-2|, |4-6|, |4-10|
    assert m["rmse"] == pytest.approx(math.sqrt((16 + 4 + 4 + 36) / 4))
    assert m["mape"] == pytest.approx((2 / 6 + 6 / 10) / 2 * 100)  # only truths > 5 vehicles
    assert D.metrics(np.zeros(3), np.array([0.0, 1.0, 5.0]), 5.0)["mape"] is None


def test_metrics_are_in_real_units_through_the_harness():
    """A constant forecast scored by the harness: the MAE is in vehicles, not standardized."""
    from icml26.methods.traffic import harness as H

    rng = np.random.default_rng(0)
    y = rng.uniform(0, 200, (30, 4, 3))
    test = {"x": rng.uniform(0, 200, (30, 8, 3)), "y": y, "tod": np.zeros(30, int), "dow": np.zeros(30, int)}
    cfg = H.Config(horizons=(1, 4), input_steps=8)
    ev = H.evaluate(lambda x, tod, dow: np.full((x.shape[0], 4, 3), 100.0), test, cfg)
    for h in (1, 4):
        assert ev["by_h"][h]["mae"] == pytest.approx(np.abs(y[:, h - 1] - 100).mean())
        assert ev["by_h"][h]["rmse"] == pytest.approx(np.sqrt(((y[:, h - 1] - 100) ** 2).mean()))
    # persistence through a scaler: identical real-unit error whatever the scaler
    sc = D.Scaler(mean=57.0, std=13.0)
    f = H.Fitted("persistence", __import__("icml26.methods.traffic.baselines", fromlist=["x"]).Persistence(), sc, 4)
    ev = H.evaluate(f, test, cfg)
    assert ev["by_h"][4]["mae"] == pytest.approx(np.abs(y[:, 3] - test["x"][:, -1]).mean())


def test_csv_reader_and_gap_segments(tmp_path):
    df = lanes_frame(days=3, gap_day=1)
    s = td.read_series(write_csv(df, tmp_path / "l.csv"))
    assert s.shape == (len(df), 6) and s.sensors[0] == "lane_0" and s.step_s == 900
    np.testing.assert_allclose(s.values, df.drop(columns="timestamp").to_numpy())
    segs = s.segments()
    assert len(segs) == 2  # the overnight gap of day 2 splits the series
    starts = D.window_starts(segs, (0, len(df)), 12)
    ts = s.timestamps.astype(np.int64)
    spans = ts[starts + 11] - ts[starts]
    assert (spans == 11 * 900 * 10**9).all()  # no window spans the gap
    assert len(starts) == sum(b - a - 11 for a, b in segs)


def test_csv_missing_value_breaks_a_run(tmp_path):
    df = lanes_frame(days=1)
    df.loc[10, "lane_2"] = np.nan
    s = td.read_series(write_csv(df, tmp_path / "l.csv"))
    assert s.segments() == [(0, 10), (11, len(df))]


def _write_pandas_h5(path, values, index_ns, columns, key="df"):
    """The layout pandas.to_hdf (fixed format) writes, as METR-LA / PEMS-BAY ship it."""
    import h5py

    with h5py.File(path, "w") as f:
        g = f.create_group(key)
        g["axis0"] = np.array([c.encode() for c in columns])
        g["axis1"] = np.asarray(index_ns, dtype=np.int64)
        g["block0_items"] = np.array([c.encode() for c in columns])
        g["block0_values"] = values


def test_h5_reader_metr_la_layout(tmp_path):
    pytest.importorskip("h5py")
    idx = pd.date_range("2012-03-01", periods=50, freq="5min")
    vals = np.arange(150, dtype=float).reshape(50, 3)
    _write_pandas_h5(tmp_path / "metr-la.h5", vals, idx.asi8, ["773869", "767541", "767542"])
    s = td.read_series(tmp_path / "metr-la.h5")
    assert s.sensors == ["773869", "767541", "767542"] and s.step_s == 300
    np.testing.assert_array_equal(s.values, vals)
    assert s.timestamps[0] == np.datetime64("2012-03-01T00:00:00")


def test_npz_reader_pemsd_layout(tmp_path):
    data = np.random.default_rng(0).uniform(0, 300, (40, 5, 3))
    np.savez(tmp_path / "PEMS08.npz", data=data)
    s = td.read_series(tmp_path / "PEMS08.npz", feature=2, start="2016-07-01")
    np.testing.assert_array_equal(s.values, data[:, :, 2])
    assert s.step_s == 300 and str(s.timestamps[1]) == "2016-07-01T00:05:00.000000000"


def test_long_parquet_reader(tmp_path):
    ts = pd.date_range("2024-01-01", periods=4, freq="15min")
    df = pd.DataFrame({"timestamp": list(ts) * 2, "detector": [1] * 4 + [2] * 4, "total": list(range(8))})
    df.to_parquet(tmp_path / "c.parquet")
    s = td.read_series(tmp_path / "c.parquet")
    assert s.sensors == ["det_01", "det_02"]
    np.testing.assert_array_equal(s.values[:, 1], [4, 5, 6, 7])


@pytest.mark.parametrize(
    "content,msg",
    [
        ("a,b\n1,2\n", "no time column"),
        ("timestamp,x\nnot-a-date,1\n", "not parseable"),
        ("timestamp,x\n2024-01-01 00:00,a\n2024-01-01 00:15,b\n", "not numeric"),
        ("timestamp,x\n2024-01-01 00:00,1\n", "at least 2 time steps"),
        ("timestamp,x\n2024-01-01 00:00,1\n2024-01-01 00:00,2\n", "strictly increasing"),
    ],
)
def test_bad_csv_is_input_error(tmp_path, content, msg):
    p = tmp_path / "bad.csv"
    p.write_text(content)
    with pytest.raises(InputError, match=msg):
        td.read_series(p)


def test_bad_h5_npz_and_suffix(tmp_path):
    (tmp_path / "x.h5").write_bytes(b"not hdf5")
    with pytest.raises(InputError, match="not an HDF5"):
        td.read_series(tmp_path / "x.h5")
    np.savez(tmp_path / "x.npz", other=np.zeros(3))
    with pytest.raises(InputError, match="no array 'data'"):
        td.read_series(tmp_path / "x.npz")
    (tmp_path / "x.txt").write_text("1")
    with pytest.raises(InputError, match="unknown format"):
        td.read_series(tmp_path / "x.txt")


def test_day_split_is_chronological_and_disjoint():
    ts = pd.date_range("2024-01-01", periods=10 * 96, freq="15min").to_numpy()
    sp = D.day_split(ts, 4, 2, 1, 2)
    ranges = [sp.pretrain, sp.finetune, sp.val, sp.test]
    assert ranges == [(0, 384), (384, 576), (576, 672), (672, 864)]
    assert D.fraction_rows(sp.finetune, 0.25) == (528, 576)  # the most recent quarter
    assert D.day_split(ts, 4, 2, 1, 0).test == (672, 960)
    with pytest.raises(InputError, match="covers 10 day"):
        D.day_split(ts, 8, 2, 1, 2)


def test_group_by_correlation_finds_the_planted_roads():
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(500, 1)), rng.normal(size=(500, 1))
    v = np.concatenate([a + 0.1 * rng.normal(size=(500, 3)), b + 0.1 * rng.normal(size=(500, 2))], 1)
    lab = td.group_by_correlation(v, 2)
    assert lab.tolist() == [0, 0, 0, 1, 1]
    roads = td.road_series(
        td.SensorSeries(v, pd.date_range("2024", periods=500, freq="h").to_numpy(), list("abcde")), lab
    )
    np.testing.assert_allclose(roads.values[:, 1], v[:, 3:].mean(1))


def test_builtin_lane_counts():
    pytest.importorskip("traffic_anomaly")
    s = td.lane_counts()
    assert s.shape == (2492, 22) and s.step_s == 900
    assert len(s.segments()) == 3  # two missing intervals in the recording
    assert abs(np.nanmean(s.values) - 19.2) < 0.5  # vehicles per 15 minutes


def test_masked_metrics_hand_computed():
    """null_value 0 (METR-LA / PEMS-BAY): zeros are missing readings, left out of MAE, RMSE and
    MAPE (the masked metrics of BasicTS / LargeST); computed here by hand."""
    true = np.array([[0.0, 60.0], [50.0, 0.0], [40.0, 70.0]])
    pred = np.array([[30.0, 55.0], [52.0, 10.0], [44.0, 63.0]])
    m = D.metrics(pred, true, 0.0, null_value=0.0)
    # scored: (55, 60), (52, 50), (44, 40), (63, 70): errors -5, 2, 4, -7
    assert m["mae"] == pytest.approx((5 + 2 + 4 + 7) / 4)
    assert m["rmse"] == pytest.approx(math.sqrt((25 + 4 + 16 + 49) / 4))
    assert m["mape"] == pytest.approx((5 / 60 + 2 / 50 + 4 / 40 + 7 / 70) / 4 * 100)
    plain = D.metrics(pred, true, 0.0)  # counts: a zero is an observation
    assert plain["mae"] == pytest.approx((30 + 5 + 2 + 10 + 4 + 7) / 6)
    assert D.metrics(pred, np.zeros_like(true), 0.0, null_value=0.0)["mae"] is None


def test_null_value_defaults(tmp_path):
    from icml26.methods.traffic import harness as H

    assert H.Config(data="metr-la.h5").null() == 0.0 and H.Config(data="pems-bay.h5").mape_floor() == 0.0
    assert H.Config(data="lanes.csv").null() is None and H.Config().null() is None
    assert H.Config().mape_floor() == 5.0
    assert H.Config(data="metr-la.h5", null_value="none").null() is None
    assert H.Config(data="x.csv", null_value=-1.0).null() == -1.0
    with pytest.raises(ValueError, match="null_value"):
        H.Config(null_value="zero")


def test_masked_scores_through_the_harness(tmp_path):
    """METR-LA-layout .h5 with zeros (dropped readings): the persistence record equals the masked
    MAE computed by hand on the same windows, and differs from the unmasked one."""
    pytest.importorskip("h5py")
    from icml26.methods.traffic import harness as H
    from tests.methods.traffic_synth import SMALL

    df = lanes_frame(days=9, n=3, step_min=5)
    vals = df.iloc[:, 1:].to_numpy()
    vals[np.random.default_rng(1).uniform(size=vals.shape) < 0.05] = 0.0
    idx = pd.DatetimeIndex(df["timestamp"])
    _write_pandas_h5(tmp_path / "metr-la.h5", vals, idx.asi8, ["a", "b", "c"])
    cfg = H.Config(data=str(tmp_path / "metr-la.h5"), **{**SMALL, "models": ("persistence",)})
    rec = [r for r in H.run(cfg) if r["kind"] == "result" and r["horizon_steps"] == 4][0]
    inp = H.load_inputs(cfg)
    test = H._windows(inp.lanes, inp.split.test, cfg)
    y, last = test["y"][:, 3], np.repeat(test["x"][:, -1:], 1, axis=1)[:, 0]
    ok = y != 0
    assert rec["null_value"] == 0.0
    assert rec["mae"] == pytest.approx(np.abs(last - y)[ok].mean())
    assert rec["mae"] != pytest.approx(np.abs(last - y).mean())


def test_ha_and_ridge_leave_null_targets_out_of_the_fit(tmp_path):
    """With a null value the deterministic baselines are fitted on the scored targets only, as the
    trained models' loss is: on a METR-LA-layout .h5 whose fine-tuning days have zeros (dropped
    readings), HA's table is the mean of the non-null targets of each (slot, sensor), computed by
    hand, and ridge equals a closed-form ridge on the rows whose target is not null."""
    pytest.importorskip("h5py")
    from icml26.methods.traffic import baselines as B
    from icml26.methods.traffic import harness as H
    from tests.methods.traffic_synth import SMALL

    df = lanes_frame(days=11, n=3, step_min=15)
    vals = df.iloc[:, 1:].to_numpy()
    vals[np.random.default_rng(2).uniform(size=vals.shape) < 0.15] = 0.0
    _write_pandas_h5(tmp_path / "metr-la.h5", vals, pd.DatetimeIndex(df["timestamp"]).asi8, ["a", "b", "c"])
    small = {**SMALL, "models": ("ha", "ridge"), "finetune_days": 4, "lane_fractions": (1.0,)}
    cfg = H.Config(data=str(tmp_path / "metr-la.h5"), **small)
    inp = H.load_inputs(cfg)
    f = cfg.lane_fractions[0]
    rows = D.fraction_rows(inp.split.finetune, f)
    tr = H._windows(inp.lanes, rows, cfg)
    ok = tr["y"] != 0
    assert 0 < (~ok).sum() < ok.size
    ha, _ = H.train_lane_model("ha", cfg, inp, f, seed=0, device="cpu")
    sc = ha.scaler
    ys = sc.transform(tr["y"])
    slots = H.slots_per_day(inp.lanes)
    num, den, nulls = np.zeros((slots, 3)), np.zeros((slots, 3)), np.zeros((slots, 3))
    for w in range(ys.shape[0]):
        for h in range(ys.shape[1]):
            for n in range(3):
                s = (tr["tod"][w] + 1 + h) % slots
                if ok[w, h, n]:
                    num[s, n], den[s, n] = num[s, n] + ys[w, h, n], den[s, n] + 1
                else:
                    nulls[s, n] += 1
    seen = den > 0
    assert (seen & (nulls > 0)).sum() >= 3  # slots where a null would have pulled the mean
    assert np.allclose(ha.model.table[seen], num[seen] / den[seen])
    rg, _ = H.train_lane_model("ridge", cfg, inp, f, seed=0, device="cpu")
    xs = sc.transform(tr["x"])
    L = xs.shape[1]
    for h in (0, ys.shape[1] - 1):
        X = np.concatenate([xs.transpose(0, 2, 1).reshape(-1, L), np.ones((xs.shape[0] * 3, 1))], 1)
        y = ys[:, h].reshape(-1)
        keep = ok[:, h].reshape(-1)
        reg = cfg.ridge_alpha * np.eye(L + 1)
        reg[-1, -1] = 0
        w = np.linalg.solve(X[keep].T @ X[keep] + reg, X[keep].T @ y[keep])
        assert np.allclose(rg.model.w[:, h], w)
    # unmasked fit (no null value) differs: the zeros pull it
    assert not np.allclose(B.RidgeLags(cfg.ridge_alpha).fit(xs, ys).w, rg.model.w)


def test_block_bootstrap_mae_interval_over_test_windows():
    """The MAE interval of a deterministic model: recomputed by hand as a moving-block bootstrap of
    the per-window error sums; null with one seed's worth of data (a single block) and from mean_ci
    with one value (never a zero-width interval)."""
    rng = np.random.default_rng(3)
    pred, true = rng.normal(size=(96, 5)), rng.normal(size=(96, 5))
    true[0, 0] = np.nan  # not scored
    s, n = D.window_errors(pred, true)
    assert n[0] == 4 and n[1:].min() == 5
    assert np.nansum(np.abs(pred - true)) / n.sum() == pytest.approx(s.sum() / n.sum())
    ci = D.block_bootstrap_mae_ci(s, n, block=24, n_boot=500, seed=0)
    # by hand: 4 blocks of 24 consecutive windows per draw, from the same generator
    starts = np.random.default_rng(0).integers(0, 96 - 24 + 1, size=(500, 4))
    maes = [sum(s[a : a + 24].sum() for a in row) / sum(n[a : a + 24].sum() for a in row) for row in starts]
    assert ci == pytest.approx(list(np.quantile(maes, [0.025, 0.975])))
    assert ci[0] < s.sum() / n.sum() < ci[1]
    assert D.block_bootstrap_mae_ci(s[:24], n[:24], block=24) is None
    assert D.mean_ci([0.3]) is None and D.mean_ci([0.3, 0.5])[0] < 0.3
