"""``icml26 traffic``: every subcommand through the CLI, the record contract, the stages
(prepare -> pretrain -> finetune -> eval) agreeing with ``run``, and bad input -> exit 2."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from icml26.cli import app
from tests.methods.traffic_synth import lanes_frame, travel_times_frame, write_csv

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "recipes" / "traffic" / "tiny.yaml"
FIELDS = {
    "kind",
    "model",
    "pretrained",
    "horizon_steps",
    "lane_fraction",
    "mae",
    "rmse",
    "mape",
    "params",
    "train_s",
    "infer_ms_per_batch",
    "seeds",
    "mae_ci",
}
SMALL = [
    "--set",
    "pretrain_days=4",
    "--set",
    "finetune_days=2",
    "--set",
    "val_days=1",
    "--set",
    "test_days=2",
    "--set",
    "input_steps=8",
    "--set",
    "epochs=2",
    "--set",
    "pretrain_epochs=1",
    "--set",
    "d_model=16",
    "--set",
    "d_ff=32",
    "--set",
    "n_layers=1",
    "--set",
    "pretrain_stride=4",
    "--set",
    "graph_warmup_epochs=0",
    "--set",
    "lane_fractions=[0.5]",
]


def invoke(args):
    r = CliRunner().invoke(app, ["traffic", *args])
    return r, [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    d = tmp_path_factory.mktemp("tcli")
    lanes = lanes_frame(days=9, n=4, gap_day=5)
    roads = lanes[["timestamp"]].copy()
    roads["road_a"] = lanes[["lane_0", "lane_1"]].mean(1)
    roads["road_b"] = lanes[["lane_2", "lane_3"]].mean(1)
    return write_csv(lanes, d / "lanes.csv"), write_csv(roads, d / "roads.csv")


@pytest.mark.parametrize("sub", ["run", "prepare", "pretrain", "finetune", "eval"])
def test_help(sub):
    r = CliRunner().invoke(app, ["traffic", sub, "--help"])
    assert r.exit_code == 0 and "Usage" in r.output


def test_tiny_recipe_contract(tmp_path):
    pytest.importorskip("traffic_anomaly")
    r, recs = invoke(["run", "--recipe", str(TINY), "-q", "--out", str(tmp_path / "run")])
    assert r.exit_code == 0, (r.output, r.exception)
    assert recs[0]["kind"] == "config" and recs[-1]["kind"] == "summary"
    res = [x for x in recs if x["kind"] == "result"]
    assert len(res) == 3 * 2 * 1  # (model, horizon, lane_fraction)
    for x in res:
        assert FIELDS <= set(x)
    mini = [x for x in res if x["model"] == "minitraffic"]
    assert all(x["pretrained"] for x in mini) and all(x["params"] < 150_000 for x in mini)
    assert (tmp_path / "run" / "records.jsonl").read_text().count("\n") == len(recs)


def test_bad_recipe_key_exits_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(TINY.read_text().replace("config:", "config:\n  no_such_key_xyz: 1", 1))
    r, _ = invoke(["run", "--recipe", str(bad), "-q"])
    assert r.exit_code == 2 and "no_such_key_xyz" in r.stderr and "valid keys" in r.stderr


def test_user_data_without_road_data_pretrains_on_pseudo_roads(synth):
    """--data without --road-data: MiniTraffic pre-trains on pseudo-roads made of the user's lanes
    over the pre-training days; with pretrain_days=0 the pre-trained rows are skipped (a record
    and a warning), never reported as MiniTraffic without pre-training."""
    base = ["run", "--data", str(synth[0]), "--horizon", "1,4", "--lane-fraction", "0.5", "--seeds", "1", "-q"]
    r, recs = invoke([*base, "--model", "persistence,minitraffic", *SMALL])
    assert r.exit_code == 0, r.output
    res = [x for x in recs if x["kind"] == "result"]
    assert [(x["model"], x["horizon_steps"], x["pretrained"]) for x in res] == [
        ("persistence", 1, False),
        ("persistence", 4, False),
        ("minitraffic", 1, True),
        ("minitraffic", 4, True),
    ]
    assert recs[-1]["road_pretraining"] is True and recs[-1]["road_source"].startswith("pseudo-roads")
    r, recs = invoke([*base, "--model", "minitraffic,minitraffic-nopretrain", *SMALL, "--set", "pretrain_days=0"])
    assert r.exit_code == 0, r.output
    assert [x["model"] for x in recs if x["kind"] == "skipped"] == ["minitraffic"]
    assert {x["model"] for x in recs if x["kind"] == "result"} == {"minitraffic-nopretrain"}
    assert "warning: skipped: minitraffic pre-trains on road data" in r.stderr


def test_a_few_weeks_of_a_user_csv_with_the_defaults(tmp_path):
    """35 days of 15-minute travel times with overnight gaps, the docs' command with the default
    splits and lane fractions: 5% of the fine-tuning days does not hold one window, so it is
    skipped with a warning and a record and 10% / 20% run; every day of the file is in a split;
    MiniTraffic pre-trains on pseudo-roads of the user's lanes."""
    p = write_csv(travel_times_frame(days=35, n=8), tmp_path / "travel_times.csv")
    fast = ["--set", "epochs=1", "--set", "pretrain_epochs=1", "--set", "pretrain_stride=8"]
    fast += ["--set", "d_model=16", "--set", "d_ff=32", "--set", "n_layers=1", "--set", "graph_warmup_epochs=0"]
    r, recs = invoke(["run", "--data", str(p), "--model", "persistence,ridge,minitraffic", "--seeds", "1", *fast])
    assert r.exit_code == 0, (r.output, r.exception)
    skipped = [x for x in recs if x["kind"] == "skipped"]
    assert [x["lane_fraction"] for x in skipped] == [0.05] and "lane_fraction 0.05" in r.stderr
    res = [x for x in recs if x["kind"] == "result"]
    assert {(x["model"], x["lane_fraction"]) for x in res} == {
        (m, f) for m in ("persistence", "ridge", "minitraffic") for f in (0.1, 0.2)
    }
    assert all(x["pretrained"] for x in res if x["model"] == "minitraffic")
    assert all(x["mae"] > 0 and x["null_value"] is None for x in res)
    summ = recs[-1]
    assert summ["days"] == 35 and summ["split_days"] == {"pretrain": 14, "finetune": 5, "val": 2, "test": 14}
    # one seed of a trained model has no interval: it is never named best over the others
    assert all(x["mae_ci"] is None and x["mae_ci_method"] is None for x in res if x["model"] == "minitraffic")
    # deterministic models (seeds: 1): a block-bootstrap interval over the test windows, never zero width
    for x in (x for x in res if x["model"] in ("persistence", "ridge")):
        lo, hi = x["mae_ci"]
        assert x["seeds"] == 1 and lo < x["mae"] < hi and x["mae_ci_method"].startswith("block bootstrap"), x
    assert all(x["diverged"] is False for x in res)
    assert set(summ["verdict_by_setting"]) == {f"h{h}@{f}" for h in (1, 4, 8) for f in ("0.1", "0.2")}
    for v in summ["verdict_by_setting"].values():
        assert v["best_mae"] != "minitraffic" and v["tied_with_best_mae"]


def test_stages_agree_with_run(synth, tmp_path):
    data = ["--data", str(synth[0])]
    r, pre = invoke(
        [
            "pretrain",
            *data,
            "--road-data",
            str(synth[1]),
            "--model",
            "minitraffic",
            "--seeds",
            "1",
            "--out",
            str(tmp_path / "pre"),
            "-q",
            *SMALL,
        ]
    )
    assert r.exit_code == 0, r.output
    assert (tmp_path / "pre" / "pretrain-minitraffic-seed0.safetensors").is_file()
    r, ft = invoke(
        [
            "finetune",
            *data,
            "--checkpoint",
            str(tmp_path / "pre"),
            "--model",
            "minitraffic,ridge",
            "--lane-fraction",
            "0.5",
            "--seeds",
            "1",
            "--out",
            str(tmp_path / "ft"),
            "-q",
            *SMALL,
        ]
    )
    assert r.exit_code == 0, r.output
    assert [x["pretrained"] for x in ft if x["kind"] == "result"] == [True, False]
    r, ev = invoke(["eval", "--checkpoint", str(tmp_path / "ft"), "-q"])
    assert r.exit_code == 0, r.output
    ev = {(x["model"], x["horizon_steps"]): x for x in ev if x["kind"] == "result"}
    assert ev[("minitraffic", 4)]["pretrained"] is True
    r, run = invoke(
        [
            "run",
            *data,
            "--road-data",
            str(synth[1]),
            "--model",
            "ridge,minitraffic",
            "--lane-fraction",
            "0.5",
            "--seeds",
            "1",
            "-q",
            *SMALL,
        ]
    )
    assert r.exit_code == 0, r.output
    for x in run:
        if x["kind"] == "result" and x["model"] == "ridge":  # deterministic: the same numbers both ways
            assert ev[("ridge", x["horizon_steps"])]["mae"] == pytest.approx(x["mae"], rel=1e-12)


def test_prepare_writes_the_grouping(tmp_path):
    pytest.importorskip("traffic_anomaly")
    r, recs = invoke(["prepare", "--out", str(tmp_path / "ds"), "-q"])
    assert r.exit_code == 0, r.output
    import pandas as pd

    sensors = pd.read_csv(tmp_path / "ds" / "sensors.csv")
    roads = pd.read_csv(tmp_path / "ds" / "roads.csv")
    lanes = pd.read_csv(tmp_path / "ds" / "lanes.csv")
    assert len(sensors) == 22 and sensors["road"].nunique() == 6 and roads.shape[1] == 7
    road0 = sensors.loc[sensors["road"] == "road_0", "sensor"].tolist()
    assert roads["road_0"].to_numpy() == pytest.approx(lanes[road0].mean(1).to_numpy(), rel=1e-3, abs=1e-3)


@pytest.mark.parametrize(
    "content,msg",
    [
        ("not,a\ntable", "no time column"),
        ("timestamp,x\n2024-01-01 00:00,1\n2024-01-01 00:15,2\n", "covers 1 day"),
        ("timestamp,x\n2024-01-01 00:00,a\n2024-01-02 00:15,b\n", "not numeric"),
    ],
)
def test_bad_input_exit_2_one_line_nothing_written(tmp_path, content, msg):
    p = tmp_path / "in.csv"
    p.write_text(content)
    r, recs = invoke(["run", "--data", str(p), "--out", str(tmp_path / "o" / "run"), "-q"])
    assert r.exit_code == 2 and not recs
    assert msg in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


def test_bad_flags_exit_2(tmp_path, synth):
    for args, msg in (
        [["--model", "lstm"], "lstm"],
        [["--horizon", "x"], "--horizon"],
        [["--lane-fraction", "1.5"], "lane_fractions"],
        [["--data", str(tmp_path / "missing.csv")], "does not exist"],
        [["--road-data", str(synth[1])], "--road-data needs --data"],
        [["--data", str(synth[0]), "--lane-fraction", "0.01", *SMALL], "lane_fraction 0.01"],
    ):
        r, _ = invoke(["run", *args, "-q"])
        assert r.exit_code == 2 and msg in r.stderr, (args, r.output)
    r, _ = invoke(["eval", "--checkpoint", str(tmp_path)])
    assert r.exit_code == 2 and "no fitted model files" in r.stderr
    r, _ = invoke(
        ["pretrain", "--data", str(synth[0]), "--out", str(tmp_path / "p"), *SMALL, "--set", "pretrain_days=0"]
    )
    assert r.exit_code == 2 and "pre-trains on road data" in r.stderr
