"""`icml26 bai` env files: an empirical arm's column is read cell by cell (a bad or missing cell
is exit 2 naming file, column and row, unless the arm says `missing: drop`, which the env record
counts); `--delta` decides `error_below_delta` on the error rate's 95% interval."""

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from icml26.cli import app
from icml26.core.errors import InputError
from icml26.core.stats import wilson_interval
from icml26.methods.exploration import bai as B
from icml26.methods.exploration.bandit_env import load_env

ROOT = Path(__file__).resolve().parents[1]


def _cli(args):
    """The CLI in this process: exit code, stdout, stderr."""
    r = CliRunner().invoke(app, args)
    return r.exit_code, r.stdout, r.stderr


def _env(tmp_path, csv_text: str, arm_extra: str = "") -> Path:
    (tmp_path / "c.csv").write_text(csv_text)
    env = tmp_path / "e.yaml"
    env.write_text(
        f"name: e\narms:\n  - {{dist: empirical, file: c.csv, column: x{arm_extra}}}\n  - {{dist: bernoulli, p: 0.2}}\n"
    )
    return env


@pytest.mark.parametrize(
    "csv_text, message",
    [
        # a blank cell (row 3 of the data, line 4 of the file)
        ("t,x\n1,0.5\n2,0.7\n3,\n4,0.9\n", r"c\.csv' column 'x' row 3 \(line 4\) is missing; .*missing: drop"),
        # a non-numeric cell
        ("t,x\n1,0.5\n2,oops\n3,0.6\n", r"c\.csv' column 'x' row 2 \(line 3\) is 'oops', not a finite number"),
        # pandas' NA spellings are missing values too
        ("t,x\n1,0.5\n2,NA\n", r"column 'x' row 2 \(line 3\) is missing"),
        # a blank line of a one-column file is a missing cell, not skipped
        ("x\n0.5\n\n0.7\n", r"column 'x' row 2 \(line 3\) is missing"),
        # infinities and overflowing values are not rewards
        ("t,x\n1,0.5\n2,inf\n", r"row 2 \(line 3\) is inf, not a finite number"),
        ("t,x\n1,0.5\n2,1e200\n", r"row 2 \(line 3\) is 1e\+200, not a finite number"),
        # more bad cells are counted in the same line
        ("t,x\n1,a\n2,b\n3,c\n", r"row 1 \(line 2\) is 'a', not a finite number.*; 2 more such cells"),
    ],
)
def test_bad_or_missing_cell_names_file_column_row(tmp_path, csv_text, message):
    env = _env(tmp_path, csv_text)
    with pytest.raises(InputError, match=r"arm 0: field 'column': '.*" + message):
        load_env(env)


def test_bad_cell_is_exit_2_at_the_cli_before_any_output(tmp_path):
    env = _env(tmp_path, "t,x\n1,0.5\n2,0.7\n3,\n4,0.9\n5,0.1\n")
    out = tmp_path / "run"
    code, stdout, err = _cli(
        ["bai", "--env", str(env), "--budget", "20", "--algo", "uniform", "--seeds", "5", "--out", str(out)]
    )
    assert code == 2 and stdout == "" and len(err.strip().splitlines()) == 1, (code, stdout, err)
    assert str(tmp_path / "c.csv") in err and "column 'x' row 3 (line 4) is missing" in err
    assert not out.exists()


def test_missing_drop_drops_only_missing_cells_and_the_env_record_counts_them(tmp_path):
    csv_text = "t,x\n1,0.5\n2,\n3,0.7\n4,NA\n5,0.9\n\n"
    env = _env(tmp_path, csv_text, ", missing: drop")
    t = load_env(env)
    assert t.emp_values.tolist() == [0.5, 0.7, 0.9] and t.dropped == (3, 0)  # '', 'NA' and the blank line
    assert t.means[0] == pytest.approx(0.7) and t.variances[0] == pytest.approx(np.var([0.5, 0.7, 0.9]))
    code, stdout, err = _cli(["bai", "--env", str(env), "--budget", "20", "--algo", "uniform", "--seeds", "5", "-q"])
    assert code == 0, err
    rec = [json.loads(x) for x in stdout.splitlines()]
    env_rec = next(r for r in rec if r["kind"] == "env")
    assert env_rec["missing_dropped"] == [3, 0] and env_rec["values"] == [3, None]
    assert env_rec["means"][0] == pytest.approx(0.7)
    # 'missing: drop' does not make text a number
    env = _env(tmp_path, "t,x\n1,0.5\n2,\n3,abc\n4,0.9\n", ", missing: drop")
    with pytest.raises(InputError, match=r"row 3 \(line 4\) is 'abc', not a finite number"):
        load_env(env)
    # and the setting itself is checked
    env = _env(tmp_path, "t,x\n1,0.5\n", ", missing: skip")
    with pytest.raises(InputError, match=r"arm 0: field 'missing' must be one of error, drop, got 'skip'"):
        load_env(env)
    env.write_text("name: e\narms:\n  - {dist: bernoulli, p: 0.2, missing: drop}\n  - {dist: bernoulli, p: 0.5}\n")
    with pytest.raises(InputError, match=r"unknown field 'missing' for dist bernoulli"):
        load_env(env)


def test_complete_column_reads_every_row_and_parquet_rows_are_named(tmp_path):
    pd = pytest.importorskip("pandas")
    env = _env(tmp_path, "t,x\n" + "".join(f"{i},{i * 0.25}\n" for i in range(8)))
    t = load_env(env)
    assert t.emp_values.tolist() == [i * 0.25 for i in range(8)] and t.dropped == (0, 0)
    pytest.importorskip("pyarrow")
    pd.DataFrame({"x": [0.1, None, 0.3]}).to_parquet(tmp_path / "p.parquet")
    env.write_text("name: e\narms:\n  - {dist: empirical, file: p.parquet, column: x}\n  - {dist: bernoulli, p: 0.2}\n")
    with pytest.raises(InputError, match=r"p\.parquet' column 'x' row 2 is missing"):
        load_env(env)


# ---------------------------------------------------------------- --delta: decided on the interval


def test_below_delta_is_decided_on_the_wilson_interval():
    lo, hi = wilson_interval(1, 10)  # the case: 0.1 [0.018, 0.404]
    assert B.below_delta([lo, hi], 0.1) is None and B.below_delta([lo, hi], 0.2) is None
    assert B.below_delta(list(wilson_interval(0, 100)), 0.1) is True  # [0, 0.037]
    assert B.below_delta(list(wilson_interval(30, 100)), 0.1) is False  # [0.219, 0.396]
    assert B.below_delta([0.0, 0.1], 0.1) is True


def test_best_algo_only_among_rows_shown_below_delta():
    cfg = B.Config(env="gk2016-1", delta=(0.1,), seeds=10)

    def row(algo, errors, n, stop):
        ci = list(wilson_interval(errors, n))
        return {
            "kind": "result",
            "algo": algo,
            "env": "e",
            "delta": 0.1,
            "seeds": n,
            "error_probability": errors / n,
            "error_probability_ci": ci,
            "stopping_time_mean": stop,
            "stopped_fraction": 1.0,
            "error_below_delta": B.below_delta(ci, 0.1),
        }

    s = B.summarize([row("fast", 1, 10, 50.0), row("slow", 0, 10, 90.0)], cfg)
    assert s["best_algo"] is None and s["delta_respected_by"] == [] and s["delta_undetermined"] == ["fast", "slow"]
    s = B.summarize([row("fast", 1, 10, 50.0), row("slow", 0, 100, 90.0), row("bad", 40, 100, 10.0)], cfg)
    assert s["best_algo"] == "slow" and s["stopping_time_mean"] == 90.0
    assert s["delta_respected_by"] == ["slow"] and s["delta_undetermined"] == ["fast"]


def test_cli_few_seeds_leave_error_below_delta_undetermined():
    code, out, err = _cli(
        ["bai", "--env", "gk2016-1", "--delta", "0.1", "--algo", "lucb,track-and-stop", "--seeds", "10", "-q"]
    )
    assert code == 0, err
    recs = [json.loads(x) for x in out.splitlines()]
    res = [r for r in recs if r["kind"] == "result"]
    assert len(res) == 2
    for r in res:
        assert r["error_probability"] <= 0.2  # a handful of errors at most: the interval spans 0.1
        assert r["error_below_delta"] is None and r["error_probability_ci"][1] > 0.1
    assert recs[-1]["best_algo"] is None and recs[-1]["stopping_time_mean"] is None
    code, out, err = _cli(["bai", "--env", "gk2016-1", "--delta", "0.1", "--algo", "lucb", "--seeds", "100", "-q"])
    assert code == 0, err
    recs = [json.loads(x) for x in out.splitlines()]
    r = next(r for r in recs if r["kind"] == "result")
    assert r["error_probability_ci"][1] <= 0.1 and r["error_below_delta"] is True
    # one algorithm: nothing to compare, so no best_algo; the leader is the one that qualified
    assert recs[-1]["best_algo"] is None and recs[-1]["leader"] == "lucb"


def test_directory_where_a_file_is_expected(tmp_path):
    """--env DIR and an arm's `file: DIR` say it is a directory (one line, exit 2)."""
    from typer.testing import CliRunner

    from icml26.cli import app

    r = CliRunner().invoke(app, ["bai", "--env", str(tmp_path), "--budget", "100", "-q"])
    assert r.exit_code == 2 and "is a directory" in r.stderr, r.stderr
    (tmp_path / "d").mkdir()
    env = tmp_path / "e.yaml"
    env.write_text("arms:\n  - {dist: empirical, file: d, column: x}\n  - {dist: bernoulli, p: 0.5}\n")
    r = CliRunner().invoke(app, ["bai", "--env", str(env), "--budget", "100", "-q"])
    assert r.exit_code == 2 and "is a directory" in r.stderr, r.stderr
    assert r.stdout == ""
