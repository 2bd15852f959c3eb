"""Affine invariance of every best-arm-identification algorithm (issue 15): with the same
seeds, rewards r -> 1000 r + 50 give the same pulls, stopping times and recommendations,
with the online reward scale (no range declared) and with a declared reward_range mapped
along; with a fixed range (the papers' [0, 1]) the decisions change (the check can fail)."""

from __future__ import annotations

import numpy as np
import pytest

from icml26.ops import bai, bai_fc

A, B = 1000.0, 50.0


def _arms(a: float = 1.0, b: float = 0.0, *, discrete: bool = False, top: float = 0.5) -> list[dict]:
    """Six heteroscedastic, partly heavy-tailed arms, rewards mapped by r -> a r + b:
    Gaussian (std 0.05 .. 0.3), Student-t (df 2.5) and two arms resampling recorded values
    (a skewed sample; with ``discrete``, 0/1 values so that the bernoulli model applies)."""
    rng = np.random.default_rng(7)
    skew = rng.gamma(0.5, 0.4, 300)
    if discrete:
        vals = [(rng.uniform(size=200) < p).astype(float) for p in (0.55, 0.45, 0.4, 0.35, 0.3, 0.5)]
        return [{"dist": "empirical", "values": v} for v in vals]
    return [
        {"dist": "gaussian", "mean": a * top + b, "std": a * 0.3},
        {"dist": "gaussian", "mean": a * 0.42 + b, "std": a * 0.05},
        {"dist": "student_t", "mean": a * 0.4 + b, "scale": a * 0.2, "df": 2.5},
        {"dist": "student_t", "mean": a * 0.3 + b, "scale": a * 0.1, "df": 2.5},
        {"dist": "empirical", "values": a * skew + b},
        {"dist": "empirical", "values": a * (skew * 0.5 + 0.1) + b},
    ]


def _table(arms: list[dict], name: str, tmp_path):
    """ArmTable via the env loader (empirical arms through a CSV file)."""
    import pandas as pd

    from icml26.methods.exploration.bandit_env import load_env

    specs, cols = [], {}
    for i, arm in enumerate(arms):
        if arm["dist"] == "empirical":
            cols[f"c{i}"] = arm["values"]
            specs.append({"dist": "empirical", "file": f"{name}.csv", "column": f"c{i}"})
        else:
            specs.append(arm)
    if cols:
        n = max(len(v) for v in cols.values())
        pd.DataFrame({k: pd.Series(np.asarray(v, dtype=float)) for k, v in cols.items()}).iloc[:n].to_csv(
            tmp_path / f"{name}.csv", index=False, float_format="%.17g"
        )
        for s in specs:  # columns of unequal length: missing cells at the end
            if s["dist"] == "empirical" and len(cols[s["column"]]) < n:
                s["missing"] = "drop"
    import yaml

    (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump({"name": name, "arms": specs}))
    return load_env(tmp_path / f"{name}.yaml")


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    d = tmp_path_factory.mktemp("scale")
    return {
        "base": _table(_arms(), "base", d),
        "affine": _table(_arms(A, B), "affine", d),
        "easy": _table(_arms(top=0.9), "easy", d),
        "easy_affine": _table(_arms(A, B, top=0.9), "easy_affine", d),
        "bin": _table(_arms(discrete=True), "bin", d),
        "bin_affine": _table(
            [{"dist": "empirical", "values": A * a["values"] + B} for a in _arms(discrete=True)], "bin_affine", d
        ),
    }


def _differ(x: dict, y: dict, keys=("recommendation", "counts")) -> list[str]:
    """The result fields (of ``keys``) where two runs differ: [] when identical."""
    return [k for k in keys if not np.array_equal(x[k], y[k])]


SEEDS = np.arange(150)


@pytest.mark.parametrize("algo", bai.ALGOS)
def test_fixed_budget_invariant(tables, algo):
    """Online scale and a declared range mapped along: identical pulls and recommendations."""
    for budget in (40, 150):
        x = bai.run_fixed_budget(tables["base"], algo, budget, SEEDS, reward_range=None)
        y = bai.run_fixed_budget(tables["affine"], algo, budget, SEEDS, reward_range=None)
        assert not _differ(x, y)
        x = bai.run_fixed_budget(tables["base"], algo, budget, SEEDS, reward_range=(-1.0, 2.0))
        y = bai.run_fixed_budget(tables["affine"], algo, budget, SEEDS, reward_range=(A * -1.0 + B, A * 2.0 + B))
        assert not _differ(x, y)


@pytest.mark.parametrize(
    "prm", [{"mean_estimator": "mom", "mom_groups": 4}, {"mean_estimator": "trimmed", "trim": 0.15}]
)
def test_varde_robust_location_estimates_invariant(tables, prm):
    """VarDE's mean_estimator options (median of means, trimmed mean) are affine-equivariant:
    the same pulls and recommendations under r -> 1000 r + 50, online and declared scale."""
    for budget in (40, 150):
        x = bai.run_fixed_budget(tables["base"], "varde", budget, SEEDS, prm, reward_range=None)
        y = bai.run_fixed_budget(tables["affine"], "varde", budget, SEEDS, prm, reward_range=None)
        assert not _differ(x, y)
        x = bai.run_fixed_budget(tables["base"], "varde", budget, SEEDS, prm, reward_range=(-1.0, 2.0))
        y = bai.run_fixed_budget(
            tables["affine"], "varde", budget, SEEDS, prm, reward_range=(A * -1.0 + B, A * 2.0 + B)
        )
        assert not _differ(x, y)
    plain = bai.run_fixed_budget(tables["base"], "varde", 150, SEEDS, reward_range=None)
    assert _differ(plain, bai.run_fixed_budget(tables["base"], "varde", 150, SEEDS, prm, reward_range=None))


@pytest.mark.parametrize("algo", ("varde", "ucb-e", "ugape", "continuous-rejects"))
def test_fixed_range_is_not_invariant(tables, algo):
    """The scale-dependent rules do change under r -> 1000 r + 50 when the scale is fixed
    at [0, 1] (the engines' default, the papers' instances): the test above can fail."""
    x = bai.run_fixed_budget(tables["base"], algo, 150, SEEDS)
    y = bai.run_fixed_budget(tables["affine"], algo, 150, SEEDS)
    assert (x["counts"] != y["counts"]).any()


@pytest.mark.parametrize("algo", bai_fc.ALGOS)
def test_fixed_confidence_invariant(tables, algo):
    """Gaussian model with online scale, stopping at delta and in budget mode; bernoulli
    model (0/1 rewards) with the declared range mapped along: identical stopping times,
    pulls and recommendations."""
    seeds = SEEDS[:60]
    kw = dict(max_pulls=4000)
    x = bai_fc.run_fixed_confidence(tables["easy"], algo, seeds, delta=0.1, reward_range=None, **kw)
    y = bai_fc.run_fixed_confidence(tables["easy_affine"], algo, seeds, delta=0.1, reward_range=None, **kw)
    assert not _differ(x, y, ("recommendation", "counts", "pulls", "stopped"))
    assert x["stopped"].mean() > 0.5  # the stopping rule did decide in most runs
    x = bai_fc.run_fixed_confidence(tables["base"], algo, seeds, budget=120, reward_range=None)
    y = bai_fc.run_fixed_confidence(tables["affine"], algo, seeds, budget=120, reward_range=None)
    assert not _differ(x, y)
    assert bai_fc.noise_of(tables["bin_affine"], "auto", (B, A + B)) == "bernoulli"
    x = bai_fc.run_fixed_confidence(tables["bin"], algo, seeds[:25], delta=0.2, reward_range=(0.0, 1.0), max_pulls=1500)
    y = bai_fc.run_fixed_confidence(
        tables["bin_affine"], algo, seeds[:25], delta=0.2, reward_range=(B, A + B), max_pulls=1500
    )
    assert not _differ(x, y, ("recommendation", "counts", "pulls", "stopped"))


def test_bernoulli_model_refuses_rewards_outside_its_range(tables):
    with pytest.raises(ValueError, match="needs rewards in"):
        bai_fc.run_fixed_confidence(tables["bin_affine"], "kl-lucb", SEEDS[:4], {"noise_model": "bernoulli"}, delta=0.1)
    with pytest.raises(ValueError, match=r"reward_range \[50, 500\]"):
        bai_fc.noise_of(tables["bin_affine"], "bernoulli", (50.0, 500.0))
    # undeclared: 0/1 rewards -> the bernoulli model at its own scale; mapped -> gaussian
    assert bai_fc.noise_of(tables["bin"], "auto", None) == "bernoulli"
    assert bai_fc.noise_of(tables["bin_affine"], "auto", None) == "gaussian"


def test_declared_unit_range_keeps_the_rewards_bit_for_bit(tables):
    """reward_range (0, 1) normalises by (x - 0) / 1: the engines' default, same results."""
    for algo in ("varde", "ugape"):
        assert not _differ(
            bai.run_fixed_budget(tables["base"], algo, 90, SEEDS),
            bai.run_fixed_budget(tables["base"], algo, 90, SEEDS, reward_range=(0.0, 1.0)),
        )
    with pytest.raises(ValueError, match="lo < hi"):
        bai.run_fixed_budget(tables["base"], "varde", 90, SEEDS, reward_range=(1.0, 1.0))


def test_ref_twin_online_scale_matches_kernel(tables):
    """The NumPy twin follows the kernel with the online scale too (when the kernel builds)."""
    if bai.backend() != "ext-cpu" or bai_fc.backend() != "ext-cpu":
        pytest.skip("C++ kernels not available")
    for algo in bai.ALGOS:
        x = bai.run_fixed_budget(tables["affine"], algo, 60, SEEDS[:20], reward_range=None, backend="ref")
        y = bai.run_fixed_budget(tables["affine"], algo, 60, SEEDS[:20], reward_range=None, backend="ext")
        assert not _differ(x, y)
    for algo in bai_fc.ALGOS:
        x = bai_fc.run_fixed_confidence(
            tables["easy_affine"], algo, SEEDS[:8], delta=0.1, reward_range=None, max_pulls=1500, backend="ref"
        )
        y = bai_fc.run_fixed_confidence(
            tables["easy_affine"], algo, SEEDS[:8], delta=0.1, reward_range=None, max_pulls=1500, backend="ext"
        )
        assert not _differ(x, y, ("recommendation", "counts", "pulls"))


# ------------------------------------------------------------------ command: reward_range
def _run_cli(args):
    from typer.testing import CliRunner

    from icml26.cli import app

    r = CliRunner().invoke(app, args)
    import json

    return r.exit_code, [json.loads(x) for x in r.stdout.splitlines() if x.strip().startswith("{")], r.stderr


def _env(tmp_path, extra: str = "", scale: float = 1.0, shift: float = 0.0) -> str:
    p = tmp_path / f"e{len(list(tmp_path.iterdir()))}.yaml"
    arms = "".join(
        f"  - {{dist: gaussian, mean: {scale * m + shift}, std: {scale * s}}}\n"
        for m, s in ((0.5, 0.3), (0.42, 0.05), (0.4, 0.2))
    )
    p.write_text(f"name: e\n{extra}arms:\n{arms}")
    return str(p)


def test_cli_records_the_scale_used_and_is_invariant(tmp_path):
    """No range declared -> 'online' in the config and env records, same results after
    r -> 1000 r + 50; a declared range in the file, or --set (which overrides it), is
    recorded as [lo, hi]."""
    base = ["--budget", "60", "--algo", "varde,ucb-e,continuous-rejects", "--seeds", "200", "-q"]
    c1, r1, _ = _run_cli(["bai", "--env", _env(tmp_path), *base])
    c2, r2, _ = _run_cli(["bai", "--env", _env(tmp_path, scale=A, shift=B), *base])
    assert c1 == c2 == 0
    cfg = [r for r in r1 if r["kind"] == "config"][0]
    assert cfg["reward_range"] == "online"
    assert [r for r in r1 if r["kind"] == "env"][0]["reward_range"] == "online"
    res = lambda rs: [(r["algo"], r["error_probability"], r["pull_share"]) for r in rs if r["kind"] == "result"]  # noqa: E731
    assert res(r1) == res(r2)
    c3, r3, _ = _run_cli(["bai", "--env", _env(tmp_path, "reward_range: [-1, 2]\n"), *base])
    assert c3 == 0 and [r for r in r3 if r["kind"] == "env"][0]["reward_range"] == [-1.0, 2.0]
    assert [r for r in r3 if r["kind"] == "config"][0]["reward_range"] == [-1.0, 2.0]
    c4, r4, _ = _run_cli(
        [
            "bai",
            "--env",
            _env(tmp_path, "reward_range: [-1, 2]\n", scale=A, shift=B),
            *base,
            "--set",
            f"reward_range=[{-A + B},{2 * A + B}]",
        ]
    )
    assert c4 == 0 and [r for r in r4 if r["kind"] == "env"][0]["reward_range"] == [-A + B, 2 * A + B]
    assert res(r3) == res(r4)


@pytest.mark.parametrize(
    "extra, sets, message",
    [
        ("reward_range: [1, 0]\n", [], r"key 'reward_range' must be \[lo, hi\] with lo < hi"),
        ("reward_range: 3\n", [], r"key 'reward_range' must be \[lo, hi\] \(two numbers\)"),
        ("reward_range: [0, .inf]\n", [], r"key 'reward_range' must be \[lo, hi\] with finite numbers"),
        ("", ["--set", "reward_range=[2,2]"], r"reward_range.*lo < hi"),
        ("", ["--set", "reward_range=auto"], r"reward_range must be \[lo, hi\] or 'online'"),
        (
            "",
            ["--delta", "0.1", "--algo", "kl-lucb", "--set", "noise_model=bernoulli", "--set", "reward_range=[0,1]"],
            r"kl-lucb: noise_model 'bernoulli' needs rewards in \[0, 1\]",
        ),
    ],
)
def test_cli_bad_reward_range_exits_2(tmp_path, extra, sets, message):
    import re

    args = ["bai", "--env", _env(tmp_path, extra), "--seeds", "10", "-q", *sets]
    if "--delta" not in sets:
        args += ["--budget", "30"]
    code, recs, err = _run_cli(args)
    assert code == 2 and not recs, (code, err)
    assert re.search(message, err), err
    assert len(err.strip().splitlines()) == 1
