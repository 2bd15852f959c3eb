"""`icml26 bai` up-front limits (work, CPU time, memory) and the recipe-as-env hint: each bad
run exits 2 with one stderr line naming the flag to lower, before any record; every shipped
recipe's estimate is under the limits (checked with the estimator, not by running it)."""

import dataclasses
from pathlib import Path

import pytest
from typer.testing import CliRunner

from icml26.cli import app
from icml26.core.errors import InputError
from icml26.core.recipe import resolve
from icml26.methods.exploration import bai as m
from icml26.methods.exploration.bandit_env import load_env, parse_env

ROOT = Path(__file__).resolve().parents[1]
RECIPES = sorted((ROOT / "recipes" / "bai").glob("*.yaml"))


def _refused(args):
    r = CliRunner().invoke(app, ["bai", *args])
    assert r.exit_code == 2, r.output
    assert r.stdout == ""  # no record
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    return lines[0]


def _tie(tmp_path):
    f = tmp_path / "tie.yaml"
    f.write_text("name: tie\narms:\n  - {dist: bernoulli, p: 0.5}\n  - {dist: bernoulli, p: 0.5}\n")
    return str(f)


def test_huge_max_pulls_is_refused_at_its_worst_case(tmp_path):
    # two equal arms never stop: each run pulls max_pulls times, so the estimate counts it in full
    msg = _refused(
        [
            "--env",
            _tie(tmp_path),
            "--algo",
            "uniform",
            "--delta",
            "0.01",
            "--seeds",
            "2",
            "--set",
            "max_pulls=100000000000",
        ]
    )
    assert "this run would simulate ~2.0e+11 pulls" in msg
    assert "max_pulls" in msg and "limit 2e+10" in msg and "lower --set max_pulls=N" in msg


def test_fixed_confidence_counts_every_delta_and_algorithm():
    table = load_env(m.resolve_env_path("gk2016-1"))
    cfg = m.Config(env="gk2016-1", algo=("all",), delta=(0.1, 0.01), seeds=2000)  # 6 rules x 2 x 2000 x 1e6 = 2.4e10
    with pytest.raises(InputError, match=r"~2\.4e\+10 pulls .*lower --set max_pulls=N"):
        m.validate(cfg, table)
    m.validate(m.Config(env="gk2016-1", algo=("all",), delta=(0.1,), seeds=3000), table)  # 1.8e10: accepted


def test_huge_seed_count_on_the_tiny_recipe_is_refused():
    msg = _refused(["-r", str(ROOT / "recipes/bai/tiny.yaml"), "--seeds", "100000000"])
    assert "this run would simulate ~4.5e+10 pulls" in msg and "lower --seeds" in msg


def test_memory_bound_names_the_largest_seed_count():
    table = load_env(m.resolve_env_path("varde-3groups"))  # 10 arms: 344 bytes per seed
    assert m.result_bytes(10) == 344
    cfg = m.Config(env="varde-3groups", algo=("uniform",), budget=(10,), seeds=20_000_000)  # 2e9 pulls, 17 s, 6.9 GB
    with pytest.raises(InputError) as e:
        m.validate(cfg, table)
    msg = str(e.value)
    assert "GB of per-run results in memory" in msg and "limit 4 GB" in msg
    assert f"lower --seeds to at most {int(4e9 // 344)}" in msg


def test_slow_algorithm_is_refused_by_its_cpu_time():
    # 4e9 pulls is far under the pulls limit, but top-two-ts pulls ~8e5/s on 14 gaussian arms (one core)
    msg = _refused(["--env", "varde-geom14", "--algo", "top-two-ts", "--budget", "10000", "--seeds", "400000"])
    assert "seconds of CPU" in msg and "limit 4e+03" in msg and "lower --seeds, --budget" in msg


def test_trimmed_mean_is_counted_by_its_quadratic_cost():
    # 2e8 pulls pass the per-pull limit (~20 s), but the trimmed mean sorts ~budget/14 rewards a pull
    mean = m.Config(env="varde-geom14", algo=("varde",), budget=(2_000_000,), seeds=100)
    table = load_env(m.resolve_env_path("varde-geom14"))
    m.check_limits(mean, table, ["varde"])
    with pytest.raises(InputError) as e:  # checked on the config: without the limit this run takes hours
        m.check_limits(dataclasses.replace(mean, mean_estimator="trimmed"), table, ["varde"])
    assert "seconds of CPU" in str(e.value) and "limit 4e+03" in str(e.value)
    assert 100 * 4e12 / 14 * m.SECONDS_PER_TRIMMED_ELEMENT > m.MAX_CPU_SECONDS


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.stem)
def test_every_shipped_recipe_is_under_the_limits(recipe):
    cfg = resolve(m.Config, "bai", str(recipe), None)
    algos = m.expand_algos(cfg)
    table = load_env(m.resolve_env_path(cfg.env))
    K = table.K
    m.check_limits(cfg, table, algos)  # raises InputError above a limit
    per_run = sum(cfg.budget) if cfg.budget else len(cfg.delta) * cfg.max_pulls
    assert cfg.seeds * len(algos) * per_run <= m.MAX_TOTAL_PULLS
    assert cfg.seeds * m.result_bytes(K) <= m.MAX_RESULT_BYTES


def test_recipe_passed_as_env_gets_a_hint():
    msg = _refused(["--env", str(ROOT / "recipes/bai/tiny.yaml"), "--budget", "100"])
    assert "unknown key 'config'" in msg and "(this looks like a recipe: use -r/--recipe)" in msg
    with pytest.raises(InputError) as e:  # an env file with another unknown key gets no hint
        parse_env({"name": "x", "arms": [], "extra": 1}, ROOT)
    assert "recipe" not in str(e.value)
