"""``icml26 sng``: bad input is one line and exit 2 before anything is written; a small run
writes the record contract, the plot and a resolved config."""

import json

import pytest
from typer.testing import CliRunner

from icml26.cli import app

runner = CliRunner()
SMALL = [
    "--set",
    "max_iterations=2",
    "--set",
    "width=4",
    "--set",
    "pool_interior=24",
    "--set",
    "pool_boundary=8",
    "--set",
    "eval_points=64",
    "-q",
]


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--problem", "burgers9d"], "burgers9d"),
        (["--set", "damping=nan"], "damping"),
        (["--set", "damping=inf"], "damping"),
        (["--set", "damping=-1"], "damping"),
        (["--optim", "sng,newton"], "newton"),
        (["--batch", "64,abc"], "--batch"),
        (["--batch", "1"], "batch"),
        (["--batch", "64", "--set", "pool_interior=20", "--set", "pool_boundary=4"], "exceed the pool"),
        (["--sampling", "dpp"], "sampling"),
        (["--time-budget", "0"], "time_budget_s"),
        (["--time-budget", "3600", "--seeds", "10"], "hours of CPU"),
        (["--set", "momentum=1.0"], "momentum"),
    ],
)
def test_bad_input_exit_2_one_line(args, needle, tmp_path):
    out = tmp_path / "run"
    r = runner.invoke(app, ["sng", *args, "--out", str(out), "-q"])
    assert r.exit_code == 2, r.output
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and needle in lines[0], r.stderr
    assert r.stdout == "" and not out.exists()


def test_small_run_contract(tmp_path):
    out = tmp_path / "run"
    r = runner.invoke(
        app,
        [
            "sng",
            "--problem",
            "heat1d",
            "--optim",
            "spring,engd",
            "--batch",
            "8,12",
            "--seeds",
            "2",
            "--sampling",
            "volume",
            *SMALL,
            "--out",
            str(out),
        ],
    )
    assert r.exit_code == 0, (r.output, r.exception)
    recs = [json.loads(x) for x in r.stdout.splitlines()]
    assert recs[0]["kind"] == "config" and recs[0]["problem"] == "heat1d" and recs[0]["batch"] == [8, 12]
    assert recs[-1]["kind"] == "summary"
    res = [x for x in recs if x["kind"] == "result"]
    assert [(x["optim"], x["batch"]) for x in res] == [("spring", 8), ("spring", 12), ("engd", None)]
    assert all(x["seeds"] == [0, 1] and x["iterations"] == 2 for x in res)
    assert res[0]["sampling"] == "volume" and res[-1]["sampling"] is None
    steps = [x for x in recs if x["kind"] == "step"]
    assert {(x["optim"], x["seed"]) for x in steps} == {(o, s) for o in ("spring", "engd") for s in (0, 1)}
    assert (out / "rel_l2_vs_time.png").stat().st_size > 1000 and (out / "config.yaml").is_file()
    assert len((out / "records.jsonl").read_text().splitlines()) == len(recs)


def test_set_help_lists_fields():
    r = runner.invoke(app, ["sng", "--set", "help"])
    assert r.exit_code == 0 and "damping" in r.stdout and "momentum" in r.stdout
