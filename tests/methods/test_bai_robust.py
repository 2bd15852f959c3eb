"""VarDE's robust location estimates (``mean_estimator`` mom / trimmed, icml26.ops.bai): the
estimator against its textbook definition (median of block means; scipy's trimmed mean), the
C++ kernel against the NumPy twin pull for pull, the default leaving every result as it was,
and bad values -> exit 2 with one line."""

from __future__ import annotations

import numpy as np
import pytest

from icml26.methods.exploration.bandit_env import make_env
from icml26.ops import bai
from icml26.ops._ref.bai import RobustLoc


def _table():
    return make_env(
        "robust",
        [
            {"dist": "lognormal", "mean": 1.0, "sigma": 1.0},
            {"dist": "student_t", "mean": 0.9, "scale": 1.0, "df": 2.5},
            {"dist": "gaussian", "mean": 0.8, "std": 3.0},
            {"dist": "bernoulli", "p": 0.7},
            {"dist": "student_t", "mean": 0.5, "scale": 0.5, "df": 2.5},
        ],
    )


@pytest.mark.parametrize(
    "kind, g, trim",
    [("mom", 5, 0.1), ("mom", 4, 0.1), ("mom", 1, 0.1), ("trimmed", 5, 0.1), ("trimmed", 5, 0.25), ("trimmed", 5, 0.0)],
)
def test_estimator_equals_its_definition_after_every_reward(kind, g, trim):
    from scipy import stats

    rng = np.random.default_rng(3)
    x = rng.standard_t(2.0, size=(2, 3, 57)) * 10 + 4  # 2 runs x 3 arms, heavy-tailed
    rl = RobustLoc(2, 3, kind, g, trim)
    for j in range(x.shape[2]):
        rows, arms = np.array([0, 1, 1]), np.array([2, 0, 1])
        rl.add(rows, arms, x[rows, arms, j], np.full(3, j + 1))
        for r, a in zip(rows, arms):
            v = x[r, a, : j + 1]
            if kind == "mom":  # reward i in block i mod g; median of the non-empty block means
                want = np.median([v[b::g].mean() for b in range(min(g, j + 1))])
            else:
                want = stats.trim_mean(v, trim)
            assert rl.loc[r, a] == pytest.approx(want, rel=1e-12, abs=1e-12), (kind, j)
    assert rl.loc[0, 0] == 0.0  # never pulled


def test_robust_estimates_are_robust_on_one_outlier():
    rl = {k: RobustLoc(1, 1, k, 5, 0.1) for k in ("mom", "trimmed")}
    xs = [1.0, 1.2, 0.9, 1.1, 1e6] + [1.0, 0.8, 1.1, 1.0, 1.2] * 3
    for j, v in enumerate(xs):
        for r in rl.values():
            r.add(np.array([0]), np.array([0]), np.array([v]), np.array([j + 1]))
    assert np.mean(xs) > 5e4
    assert all(abs(r.loc[0, 0] - 1.03) < 0.2 for r in rl.values())  # the outlier is out


@pytest.mark.parametrize(
    "prm",
    [
        {"mean_estimator": "mom"},
        {"mean_estimator": "mom", "mom_groups": 2, "warm_start": 2},
        {"mean_estimator": "trimmed", "trim": 0.2},
        {"mean_estimator": "trimmed", "smoother": "constant"},
        {"mean_estimator": "mom", "smoother": "sparsemax", "mom_groups": 3},
        {"mean_estimator": "mom", "mom_groups": 100},
    ],
)  # more blocks than any arm's pulls
@pytest.mark.parametrize("rr", [None, (-2.0, 5.0)])
def test_kernel_equals_the_numpy_twin(prm, rr):
    if bai.backend() != "ext-cpu":
        pytest.skip("the bai C++ kernel is not available")
    t, seeds = _table(), np.arange(24)
    x = bai.run_fixed_budget(t, "varde", 160, seeds, prm, backend="ext", reward_range=rr)
    y = bai.run_fixed_budget(t, "varde", 160, seeds, prm, backend="ref", reward_range=rr)
    assert np.array_equal(x["recommendation"], y["recommendation"]) and np.array_equal(x["counts"], y["counts"])
    z = bai.run_fixed_budget(t, "varde", 160, seeds, {}, backend="ext", reward_range=rr)
    assert not np.array_equal(x["counts"], z["counts"])  # the option changes the allocation


def test_default_is_the_running_mean_bit_for_bit():
    t, seeds = _table(), np.arange(40)
    for be in ("auto", "ref"):
        x = bai.run_fixed_budget(t, "varde", 120, seeds, backend=be, reward_range=None)
        y = bai.run_fixed_budget(
            t,
            "varde",
            120,
            seeds,
            {"mean_estimator": "mean", "mom_groups": 7, "trim": 0.3},
            backend=be,
            reward_range=None,
        )
        assert np.array_equal(x["counts"], y["counts"]) and np.array_equal(x["recommendation"], y["recommendation"])
    assert bai.DEFAULTS["varde"]["mean_estimator"] == "mean"


@pytest.mark.parametrize(
    "sets, text",
    [
        (["mean_estimator=median"], "mean_estimator must be one of mean, mom, trimmed"),
        (["mean_estimator=trimmed", "trim=0.5"], "trim must be a number in [0, 0.5)"),
        (["mean_estimator=mom", "mom_groups=0"], "mom_groups must be an integer in [1, 1000000]"),
        (["mean_estimator=mom", "mom_groups=2.5"], "mom_groups: expected an integer, got 2.5"),
        # an option without the estimator that reads it
        (["trim=0.2"], "trim applies only with mean_estimator=trimmed"),
        (["mean_estimator=mom", "trim=0.2"], "trim applies only with mean_estimator=trimmed"),
        (["mom_groups=3"], "mom_groups applies only with mean_estimator=mom"),
        (["mean_estimator=trimmed", "mom_groups=3"], "mom_groups applies only with mean_estimator=mom"),
    ],
)
def test_cli_bad_estimator_exits_2_with_one_line(sets, text):
    from typer.testing import CliRunner

    from icml26.cli import app

    args = ["bai", "--env", "heavy-mixed6", "--algo", "varde", "--budget", "60", "--seeds", "5", "-q"]
    for s in sets:
        args += ["--set", s]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2 and r.stdout == "", r.output
    assert text in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_cli_runs_the_option_and_refuses_it_with_a_stopping_rule():
    from typer.testing import CliRunner

    from icml26.cli import app

    base = ["bai", "--env", "heavy-mixed6", "--algo", "varde", "--seeds", "20", "-q", "--set", "mean_estimator=mom"]
    r = CliRunner().invoke(app, [*base, "--budget", "100"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(app, [*base, "--delta", "0.1"])
    assert r.exit_code == 2 and "mean_estimator is a fixed-budget option of varde: use --budget" in r.stderr, r.output


@pytest.mark.parametrize("key, value", [("mean_estimator", "mom"), ("trim", "0.2"), ("mom_groups", "3")])
def test_cli_estimator_with_delta_says_it_is_a_fixed_budget_option(key, value):
    from typer.testing import CliRunner

    from icml26.cli import app

    r = CliRunner().invoke(
        app,
        [
            "bai",
            "--env",
            "heavy-t3groups",
            "--delta",
            "0.1",
            "--algo",
            "varde",
            "--seeds",
            "5",
            "-q",
            "--set",
            f"{key}={value}",
        ],
    )
    assert r.exit_code == 2 and r.stdout == "", r.output
    line = r.stderr.strip()
    assert "\n" not in line and f"{key} is a fixed-budget option" in line and "--budget" in line, line
    assert "not a parameter of any selected algorithm" not in line


def test_mom_groups_above_an_arms_pulls_is_the_median_of_its_rewards():
    # the kernel's rule (docs/bai.md): with n < g rewards every non-empty block holds one reward,
    # so the median of means is the median of the arm's rewards (the twin agrees pull for pull)
    x = np.array([5.0, -1.0, 30.0, 2.0, 0.5, 7.0])
    rl = RobustLoc(1, 1, "mom", 50, 0.1)
    for j, v in enumerate(x):
        rl.add(np.array([0]), np.array([0]), np.array([v]), np.array([j + 1]))
        assert rl.loc[0, 0] == pytest.approx(np.median(x[: j + 1]), abs=1e-12)
