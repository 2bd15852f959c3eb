"""`icml26 bai`: env-file contract, CLI output contract, determinism, real data."""

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from icml26.cli import app
from icml26.core.errors import InputError
from icml26.methods.exploration.bandit_env import load_env, parse_env

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


def _lines(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def invoke(args):
    r = runner.invoke(app, args)
    return r


@pytest.mark.parametrize(
    "arms, message",
    [
        ([{"dist": "poisson", "lam": 1}, {"dist": "bernoulli", "p": 0.5}], r"arm 0: field 'dist' must be one of"),
        ([{"dist": "gaussian", "mean": 0.1}, {"dist": "bernoulli", "p": 0.5}], r"arm 0: missing field 'std'"),
        (
            [{"dist": "bernoulli", "p": 0.5}, {"dist": "gaussian", "mean": ".nan", "std": 1.0}],
            r"arm 1: field 'mean' must be",
        ),
        (
            [{"dist": "bernoulli", "p": 0.5}, {"dist": "gaussian", "mean": float("inf"), "std": 1.0}],
            r"arm 1: field 'mean' must be finite",
        ),
        (
            [{"dist": "bernoulli", "p": 0.5}, {"dist": "gaussian", "mean": 0.0, "std": 1e308}],
            r"arm 1: field 'std' must be finite and at most 1e150",
        ),
        ([{"dist": "bernoulli", "p": 1.5}, {"dist": "bernoulli", "p": 0.5}], r"arm 0: field 'p' must be in \[0, 1\]"),
        (
            [{"dist": "bernoulli", "p": 0.5, "label": "x"}, {"dist": "student_t", "mean": 0, "scale": 1, "df": 1}],
            r"arm 1: field 'df' must be > 1",
        ),
        ([{"dist": "bernoulli", "p": 0.5}], r"at least 2 arms"),
        (
            [{"dist": "lognormal", "mean": -0.2, "sigma": 1}, {"dist": "bernoulli", "p": 0.5}],
            r"arm 0: field 'mean' must be > 0",
        ),
        (
            [{"dist": "bernoulli", "p": 0.5, "colour": 1}, {"dist": "bernoulli", "p": 0.5}],
            r"arm 0: unknown field 'colour'",
        ),
    ],
)
def test_env_errors_name_arm_and_field(arms, message):
    with pytest.raises(InputError, match=message):
        parse_env({"name": "t", "arms": arms}, Path("."))


def test_empirical_arms(tmp_path):
    (tmp_path / "c.csv").write_text("a,b,empty\n1,2,\n3,4,\n5,,\n")
    env = tmp_path / "e.yaml"
    env.write_text(
        "name: e\narms:\n  - {dist: empirical, file: c.csv, column: a, label: A}\n  - {dist: empirical, file: "
        "c.csv, column: b, missing: drop}\n"
    )
    t = load_env(env)
    assert t.labels == ("A", "arm1") and t.means.tolist() == [3.0, 3.0] and t.dropped == (0, 1)
    assert t.emp_values.tolist() == [1.0, 3.0, 5.0, 2.0, 4.0] and t.emp_offsets.tolist() == [0, 3, 5]
    env.write_text(
        "name: e\narms:\n  - {dist: empirical, file: c.csv, column: empty, missing: drop}\n  - {dist: bernoulli, "
        "p: 0.2}\n"
    )
    with pytest.raises(InputError, match=r"arm 0: field 'column': 'empty' in c.csv has no numeric values"):
        load_env(env)
    env.write_text("name: e\narms:\n  - {dist: empirical, file: nope.csv, column: a}\n  - {dist: bernoulli, p: 0.2}\n")
    with pytest.raises(InputError, match=r"arm 0: field 'file': .*nope.csv.* does not exist"):
        load_env(env)


def test_bad_env_file_exits_2_with_one_line(tmp_path):
    env = tmp_path / "bad.yaml"
    env.write_text("name: bad\narms:\n  - {dist: gaussian, mean: 0.5}\n  - {dist: bernoulli, p: 0.5}\n")
    r = invoke(["bai", "--env", str(env), "--budget", "100"])
    assert r.exit_code == 2
    assert "arm 0: missing field 'std'" in r.stderr


def _cli(args):
    """Run the real entry point (``python -m icml26``) in a subprocess: exit code, stdout, stderr."""
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "icml26", *args], capture_output=True, text=True, cwd=ROOT)
    return p.returncode, p.stdout, p.stderr


def test_cli_exit_codes_and_one_line_errors(tmp_path):
    env = tmp_path / "bad.yaml"
    env.write_text("name: bad\narms:\n  - {dist: gaussian, mean: 0.5}\n  - {dist: bernoulli, p: 0.5}\n")
    code, out, err = _cli(["bai", "--env", str(env), "--budget", "100", "-q"])
    assert code == 2 and out == "" and err.strip().count("\n") == 0 and "arm 0: missing field 'std'" in err
    code, out, err = _cli(["bai", "--recipe", "recipes/bai/tiny.yaml", "--set", "colour=red"])
    assert code == 2 and "unknown key 'colour'" in err and "valid keys:" in err
    code, out, err = _cli(["bai", "--env", "varde-3groups", "--budget", "100", "--delta", "0.1"])
    assert code == 2 and "not both" in err
    code, out, err = _cli(["bai", "--env", "no-such-env", "--budget", "100"])
    assert code == 2 and "not a built-in" in err
    code, out, err = _cli(["bai", "--env", "varde-3groups"])
    assert code == 2 and "--budget" in err
    code, out, err = _cli(["bai", "--env", "varde-3groups", "--budget", "5"])
    assert code == 2 and "smaller than the number of arms" in err
    code, out, err = _cli(["bai", "--env", "varde-3groups", "--delta", "0.1", "--algo", "successive-rejects"])
    assert code == 2 and "no stopping rule" in err
    # every hyper-parameter is checked before any output
    code, out, err = _cli(["bai", "--env", "gk2016-1", "--budget", "40", "--algo", "uniform,varde", "--set", "tau=0"])
    assert code == 2 and out == "" and "varde: tau" in err
    code, out, err = _cli(["bai", "--env", "gk2016-1", "--budget", "40", "--algo", "varde", "--set", "tts_beta=0.3"])
    assert code == 2 and out == "" and "tts_beta is not a parameter of any selected algorithm" in err
    code, out, err = _cli(["bai", "--env", "gk2016-1", "--budget", "10000000000"])
    assert code == 2 and out == "" and "pulls" in err
    # the parser's own errors are one line too
    for bad in (["--budget", "0"], ["--budget", "abc"], ["--seeds", "0", "--budget", "10"]):
        code, out, err = _cli(["bai", "--env", "gk2016-1", *bad])
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err


def test_tiny_recipe_output_contract(tmp_path):
    out_dir = tmp_path / "run"
    r = invoke(["bai", "--recipe", str(ROOT / "recipes/bai/tiny.yaml"), "--out", str(out_dir), "-q"])
    assert r.exit_code == 0, r.output
    recs = _lines(r.stdout)
    assert recs[0]["kind"] == "config" and recs[-1]["kind"] == "summary"
    results = [x for x in recs if x["kind"] == "result"]
    assert [x["algo"] for x in results] == ["varde", "uniform", "successive-rejects"]
    for x in results:
        for key in (
            "kind",
            "algo",
            "env",
            "budget",
            "seeds",
            "error_probability",
            "error_probability_ci",
            "simple_regret",
        ):
            assert key in x
        lo, hi = x["error_probability_ci"]
        assert 0 <= lo <= x["error_probability"] <= hi <= 1
        assert x["seeds"] == 200 and x["budget"] == 150
    s = recs[-1]
    assert s["leader"] in {"varde", "uniform", "successive-rejects"} and s["leader"] in s["tied_with_best"]
    # a winner only when no other algorithm's interval overlaps the leader's
    assert s["best_algo"] == (s["leader"] if s["tied_with_best"] == [s["leader"]] else None)
    # --out holds the same records, the resolved config and a plot
    saved = [json.loads(line) for line in (out_dir / "records.jsonl").read_text().splitlines()]
    assert saved == recs
    assert (out_dir / "config.yaml").exists() and (out_dir / "bai.png").stat().st_size > 1000
    # never clobbered silently
    r2 = invoke(["bai", "--recipe", str(ROOT / "recipes/bai/tiny.yaml"), "--out", str(out_dir), "-q"])
    assert r2.exit_code == 2


def test_same_seed_same_records():
    a = _lines(invoke(["bai", "--recipe", str(ROOT / "recipes/bai/tiny.yaml"), "-q"]).stdout)
    b = _lines(invoke(["bai", "--recipe", str(ROOT / "recipes/bai/tiny.yaml"), "-q"]).stdout)
    c = _lines(invoke(["bai", "--recipe", str(ROOT / "recipes/bai/tiny.yaml"), "-q", "--seed", "1"]).stdout)
    strip = lambda rs: [{k: v for k, v in r.items() if k != "seconds"} for r in rs]  # noqa: E731
    assert strip(a) == strip(b)
    assert strip(a) != strip(c)


def test_fixed_confidence_contract():
    r = invoke(["bai", "--env", "gk2016-1", "--delta", "0.1", "--algo", "varde,track-and-stop", "--seeds", "100", "-q"])
    assert r.exit_code == 0, r.output
    res = [x for x in _lines(r.stdout) if x["kind"] == "result"]
    assert len(res) == 2
    for x in res:
        assert (
            x["delta"] == 0.1
            and x["stopping_time_mean"] > 0
            and x["stopping_time_q90"] >= x["stopping_time_mean"] * 0.5
        )
        assert x["error_probability"] <= 0.1 + 1e-9


def test_real_traffic_data_bandit(tmp_path):
    """Arms resample real recorded counts; VarDE finds the busiest lane of the 5 busiest far
    more often than chance at a modest budget."""
    from conftest import need_module

    need_module("traffic_anomaly", "pip install traffic-anomaly")
    code, out, err = _cli(["prepare-data", "traffic-bandit", "--out", str(tmp_path / "t")])
    assert code == 0, err
    t = load_env(tmp_path / "t" / "traffic-top5.yaml")
    assert t.K == 5 and t.labels[0] == "det_17" and np.all(np.diff(t.means) <= 0)
    assert t.emp_offsets[-1] == 5 * 2492
    r = invoke(
        [
            "bai",
            "--env",
            str(tmp_path / "t" / "traffic-top5.yaml"),
            "--budget",
            "200",
            "--algo",
            "varde",
            "--seeds",
            "400",
            "-q",
        ]
    )
    assert r.exit_code == 0, r.output
    res = [x for x in _lines(r.stdout) if x["kind"] == "result"][0]
    assert res["error_probability"] < 0.2


def test_one_algorithm_has_nothing_to_compare_best_algo_is_null():
    """A single --algo is the leader of nothing: best_algo null (core/verdict: a winner only when
    separated from another method), leader names it; in both settings."""
    r = invoke(["bai", "--env", "varde-3groups", "--algo", "varde", "--budget", "150", "--seeds", "50", "-q"])
    assert r.exit_code == 0, r.output
    s = _lines(r.stdout)[-1]
    assert s["leader"] == "varde" and s["tied_with_best"] == ["varde"] and s["best_algo"] is None
    r = invoke(["bai", "--env", "varde-3groups", "--algo", "lucb", "--delta", "0.1", "--seeds", "20", "-q"])
    assert r.exit_code == 0, r.output
    s = _lines(r.stdout)[-1]
    assert s["best_algo"] is None and s["leader"] in ("lucb", None)


def test_pulls_over_the_limit_refused_before_the_bandit_is_read(tmp_path):
    """The Config's work() model (seeds x algorithms x budget) refuses at once, naming the flags,
    before the bandit file is opened and before --out is created."""
    out = tmp_path / "run"
    r = invoke(
        ["bai", "--env", str(tmp_path / "absent.yaml"), "--budget", "1000", "--set", "seeds=1e9", "--out", str(out)]
    )
    assert r.exit_code == 2 and "pulls" in r.stderr and "--seeds" in r.stderr, r.stderr
    assert "absent.yaml" not in r.stderr and not out.exists()
