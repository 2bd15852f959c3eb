"""icml26 mcts on bad input: every case exits 2 with a one-line message on stderr, before any
record is printed or any file is written."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from icml26.cli import app
from icml26.methods.exploration import mcts as M

TINY = "recipes/mcts/envs/tiny.yaml"


def _invoke(args):
    return CliRunner().invoke(app, ["mcts", *args])


@pytest.mark.parametrize("n", ["1000000000000", "4294967297", "99999999999999999999999"])
def test_huge_simulation_budget_exits_2_and_writes_nothing(n, tmp_path):
    out = tmp_path / "a" / "b"
    r = _invoke(["-n", n, "--seeds", "1", "--algo", "uct", "--out", str(out)])
    assert r.exit_code == 2, r.output
    assert r.stdout == ""
    assert "simulations=" in r.stderr and "is over its limit 1e+07" in r.stderr  # the declared sized limit
    assert len(r.stderr.strip().splitlines()) == 1
    assert not out.exists() and not (tmp_path / "a").exists()


@pytest.mark.parametrize("seeds", ["3000000000", "99999999999999999999"])
def test_huge_seed_count_exits_2_at_its_sized_limit(seeds):
    r = _invoke(["-n", "10", "--seeds", seeds, "--algo", "uct"])
    assert r.exit_code == 2, r.output
    assert r.stdout == ""
    assert "seeds=" in r.stderr and "is over its limit 1e+06" in r.stderr and "lower seeds" in r.stderr


def test_seeds_within_their_limit_exit_2_via_the_total_work_check():
    r = _invoke(["-n", "100000", "--seeds", "999999", "--algo", "uct"])
    assert r.exit_code == 2, r.output
    assert r.stdout == ""
    assert "this run would simulate ~" in r.stderr and "lower --seeds" in r.stderr


def test_total_work_counts_budgets_seeds_and_algorithms():
    # 7 algorithms x 2000 seeds x (1000 + 3000) = 5.6e7: fine on a tree file
    M.Config(env=TINY, simulations=(1000, 3000), seeds=2000)
    with pytest.raises(ValueError, match=r"would simulate ~1\.4e\+10 simulations \(tree search"):
        M.Config(env=TINY, simulations=(1000, 1_000_000), seeds=2000)
    # the Python search on a gymnasium env has a lower limit (2e6, ~30 minutes at ~1e3 simulations/s):
    # at once with backend ref, else once the env is loaded and has no transition table
    with pytest.raises(ValueError, match=r"would simulate ~1\.4e\+07 simulations \(Python search"):
        M.Config(env="CartPole-v1", simulations=(1000,), seeds=2000, backend="ref")
    cfg = M.Config(env="CartPole-v1", simulations=(1000,), seeds=2000)
    pytest.importorskip("gymnasium")
    with pytest.raises(
        ValueError,
        match=r"would simulate ~1\.4e\+07 simulations \(Python search on a gymnasium env without a transition table",
    ):
        M.check_episode_work(cfg, *M.load_env(cfg))
    # the C++ table search (FrozenLake, Taxi, ...): 2e8
    with pytest.raises(ValueError, match=r"would simulate ~2\.1e\+08 simulations \(search on a gymnasium env"):
        M.Config(env="FrozenLake-v1", simulations=(100_000,), seeds=300)
    # a budget of 1 still counts as a search's fixed cost (1000 on trees)
    with pytest.raises(ValueError, match="each search counted as at least 1000"):
        M.Config(env=TINY, algo="uct", simulations=(1,), seeds=10**7 + 1)


@pytest.mark.parametrize(
    "setting", ["c=inf", "tau=-inf", "gamma=inf", "kappa=inf", "epsilon=inf", "prior_var=inf", "c_visit=1e400"]
)
def test_non_finite_settings_exit_2(setting):
    r = _invoke(["--env", TINY, "-n", "10", "--seeds", "2", "--set", setting])
    assert r.exit_code == 2, r.output
    assert r.stdout == ""
    name = setting.split("=")[0]
    assert f"{name} must be finite" in r.stderr


@pytest.mark.parametrize(
    "kw, msg",
    [
        (dict(horizon="5"), "horizon must be an integer, got '5' (str)"),
        (dict(seeds=2.5), "seeds must be an integer, got 2.5 (float)"),
        (dict(seeds=True), "seeds must be an integer, got True (bool)"),
        (dict(c="1"), "c must be a number, got '1' (str)"),
        (dict(gamma="0.9"), "gamma must be a number, got '0.9' (str)"),
        (dict(simulations=(1.5,)), "simulations must be a tuple of integers"),
        (dict(env=3), "env must be a string"),
        (dict(c=float("inf")), "c must be finite, got inf"),
        (dict(delta=float("nan")), "delta must be finite, got nan"),
    ],
)
def test_python_api_wrong_types_raise_value_error(kw, msg):
    with pytest.raises(ValueError) as e:
        M.Config(**kw)
    assert msg in str(e.value)


def test_python_api_accepts_a_list_of_budgets():
    assert M.Config(env=TINY, simulations=[10, 20]).simulations == (10, 20)


def test_bad_env_exits_2_before_the_config_record(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("root: [{mean: 1, next: [{p: 0.5}]}]")
    out = tmp_path / "run"
    for env in (str(bad), str(tmp_path / "missing.yaml"), "NoSuchEnv-v0"):
        r = _invoke(["--env", env, "-n", "10", "--seeds", "2", "--out", str(out)])
        assert r.exit_code == 2, r.output
        assert r.stdout == "", f"{env}: record printed before the env was checked: {r.stdout!r}"
        assert len(r.stderr.strip().splitlines()) == 1
        assert not out.exists()


def _need_gym():
    from tests.conftest import need_module

    need_module("gymnasium", "pip install gymnasium")


@pytest.mark.parametrize("value", ["maybe", "yes", "2", ""])
def test_gym_boolean_option_must_be_true_false_1_0(value):
    _need_gym()
    r = _invoke(["--env", f"FrozenLake-v1?is_slippery={value}", "-n", "10", "--seeds", "2", "--algo", "uct"])
    assert r.exit_code == 2, r.output
    assert r.stdout == ""
    assert "option is_slippery takes true/false/1/0" in r.stderr


@pytest.mark.parametrize("value, slippery", [("TRUE", True), ("false", False), ("1", True), ("0", False)])
def test_gym_boolean_option_spellings(value, slippery):
    _need_gym()
    from icml26.methods.exploration.gym_models import make_problem

    pb = make_problem(f"FrozenLake-v1?is_slippery={value}", horizon=5, gamma=0.9)
    assert len(pb.env.unwrapped.P[0][0]) == (3 if slippery else 1)  # slippery: 3 outcomes per move


def test_gym_rejected_option_is_named():
    _need_gym()
    r = _invoke(["--env", "FrozenLake-v1?map_name=9x9", "-n", "10", "--seeds", "2", "--algo", "uct"])
    assert r.exit_code == 2, r.output
    assert r.stdout == ""
    assert "gymnasium cannot make 'FrozenLake-v1' with option map_name='9x9': KeyError: '9x9'" in r.stderr
    r = _invoke(["--env", "FrozenLake-v1?foo=3", "-n", "10", "--seeds", "2", "--algo", "uct"])
    assert r.exit_code == 2 and "with option foo=3: TypeError" in r.stderr and "foo" in r.stderr


def test_no_exact_values_table_shows_the_recommended_actions():
    _need_gym()
    r = _invoke(["--env", "Blackjack-v1", "-n", "10", "--seeds", "3", "--algo", "uct", "--set", "horizon=5"])
    assert r.exit_code == 0, r.output
    recs = [json.loads(line) for line in r.stdout.strip().splitlines()]
    assert recs[0]["kind"] == "config" and recs[-1]["kind"] == "summary"
    res = [x for x in recs if x["kind"] == "result"]
    assert len(res) == 1
    x = res[0]
    for k in ("kind", "algo", "env", "simulations", "seeds", "p_correct", "p_correct_ci", "simple_regret"):
        assert k in x  # the record contract (null where there are no exact values)
    assert x["p_correct"] is None and sum(x["action_counts"]) == 3
    assert x["top_action"] == max(range(2), key=lambda a: x["action_counts"][a])
    assert x["top_action_share"] == pytest.approx(max(x["action_counts"]) / 3)
    assert "most chosen" in r.stderr and "share" in r.stderr
    assert f"{x['top_action_share']:.4f}" in r.stderr


def _refused(args):
    r = _invoke(args)
    assert r.exit_code == 2, r.output
    assert r.stdout == ""  # refused before the config record
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    return lines[0]


def test_gym_work_limit_is_about_30_minutes_and_names_the_flags():
    assert M.MAX_TOTAL_SIMULATIONS_GYM == 2e6
    # 7 algorithms x 300 seeds x 1000 simulations = 2.1e6 (~35 minutes at ~1e3 simulations/s)
    for extra in (["--env", "FrozenLake-v1", "--set", "backend=ref"], ["--env", "Blackjack-v1"]):  # the Python search
        msg = _refused(extra + ["-n", "1000", "--seeds", "300"])
        assert "~2.1e+06 simulations (Python search on a gymnasium env" in msg and "limit 2e+06" in msg
        assert "lower --seeds, --simulations or the number of algorithms" in msg


def test_table_search_memory_limit_exits_2_before_any_record():
    pytest.importorskip("gymnasium")
    # budget x horizon nodes at most: 10^6 x 100 on FrozenLake is ~63 GiB of tree, refused
    msg = _refused(["--env", "FrozenLake-v1", "-n", "1000000", "--seeds", "1", "--algo", "uct"])
    assert "may hold up to" in msg and "GiB of tree" in msg and "lower --simulations or --set horizon=H" in msg


def test_backend_ext_on_an_env_without_a_table_exits_2():
    pytest.importorskip("gymnasium")
    msg = _refused(["--env", "Blackjack-v1", "-n", "10", "--seeds", "1", "--algo", "uct", "--set", "backend=ext"])
    assert "backend ext: the env has no transition table" in msg


@pytest.mark.parametrize(
    "recipe",
    sorted(__import__("pathlib").Path(__file__).resolve().parents[2].joinpath("recipes", "mcts").glob("*.yaml")),
    ids=lambda p: p.stem,
)
def test_every_shipped_recipe_is_under_the_limits(recipe):
    from icml26.core.recipe import resolve

    cfg = resolve(M.Config, "mcts", str(recipe), None)  # Config runs check_work (InputError above a limit)
    gym = M.resolve_env_path(cfg.env) is None
    floor = M.MIN_SEARCH_COST["gym" if gym else "tree"]
    work = sum(max(b, floor) for b in cfg.simulations) * cfg.seeds * len(M.parse_algos(cfg.algo))
    assert work <= (M.MAX_TOTAL_SIMULATIONS_GYM if gym else M.MAX_TOTAL_SIMULATIONS)


@pytest.mark.parametrize(
    "option,words",
    [
        (
            "success_rate=2",
            [
                "transition probabilities are not a distribution",
                "state 0 action 0",
                "check its options (success_rate=2)",
            ],
        ),
        ("success_rate=-1", ["transition probabilities are not a distribution", "check its options (success_rate=-1)"]),
        ("success_rate=nan", ["option success_rate takes a finite number, got 'nan'"]),
        ("success_rate=1e400", ["option success_rate takes a finite number, got '1e400'"]),
        ("render_mode=human", ["option render_mode is not supported", "planning does not render"]),
        ("map_name=4x4&map_name=8x8", ["option map_name is given twice", "give each option once"]),
    ],
)
def test_bad_gym_options_exit_2_with_one_line(option, words):
    pytest.importorskip("gymnasium")
    msg = _refused(["--env", f"FrozenLake-v1?{option}", "-n", "10", "--seeds", "1", "--algo", "uct"])
    for w in words:
        assert w in msg, msg
    assert "TypeError" not in msg and "Traceback" not in msg


def test_check_table_rows_must_sum_to_one_and_rewards_be_finite():
    from icml26.core.errors import InputError
    from icml26.methods.exploration.gym_models import check_table

    check_table({0: {0: [(0.5, 0, 0.0, False), (0.5, 0, 1.0, True)]}}, 1, "X-v0", {})
    with pytest.raises(InputError, match=r"state 0 action 0 sums to 2\b.*check its options \(p=2\)"):
        check_table({0: {0: [(1.0, 0, 0.0, False), (1.0, 0, 1.0, True)]}}, 1, "X-v0?p=2", {"p": "2"})
    with pytest.raises(InputError, match="rewards are not finite"):
        check_table({0: {0: [(1.0, 0, float("inf"), False)]}}, 1, "X-v0", {})
