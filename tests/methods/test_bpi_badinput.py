"""icml26 bpi: bad input exits 2 with a one-line message before any result; single-action MDPs."""

import json

import pytest
from typer.testing import CliRunner

from icml26.cli import app
from icml26.methods.exploration import bpi as B
from icml26.methods.exploration import mdps as M

runner = CliRunner()


def _run(*args):
    return runner.invoke(app, ["bpi", *args, "-q"])


@pytest.mark.parametrize(
    "args,msg",
    [
        (["--epsilon", "inf"], "epsilon must be a finite number, got inf"),
        (["--set", "gap_floor=inf"], "gap_floor must be a finite number, got inf"),
        (["--set", "kappa=inf"], "kappa must be a finite number, got inf"),
        (["--set", "var_floor=inf"], "var_floor must be a finite number, got inf"),
    ],
)
def test_non_finite_settings_exit_2_before_any_record(args, msg):
    r = _run("--mdp", "riverswim", "--budget", "100", "--seeds", "1", *args)
    assert r.exit_code == 2
    assert msg in r.output
    assert '"kind": "result"' not in r.output


@pytest.mark.parametrize(
    "spec,msg",
    [
        ("riverswim?states=100000", "S x A x S = 100000 x 2 x 100000 = 2.0e+10 transition entries"),
        ("garnet?states=100000&actions=100", "100000 x 100 x 100000 = 1.0e+12 transition entries"),
    ],
)
def test_huge_mdp_exit_2_names_size_and_limit(spec, msg):
    r = _run("--mdp", spec, "--budget", "100", "--seeds", "1")
    assert r.exit_code == 2
    assert msg in r.output and "exceeds the limit of 2e+07" in r.output


@pytest.mark.parametrize(
    "budget,msg",
    [
        (
            "1000000000000",
            "this run would draw ~3.0e+12 samples (seeds x algorithms x --budget, each run counted as at "
            "least 50; hours of CPU; limit 1e+08); lower --seeds, --budget or the number of --algo",
        ),
        ("99999999999999999999999", "this run would draw ~3.0e+23 samples"),
    ],
)
def test_total_work_limit_exit_2(budget, msg):
    r = _run("--mdp", "riverswim", "--budget", budget, "--seeds", "1")
    assert r.exit_code == 2
    assert r.stdout == "" and len(r.stderr.strip().splitlines()) == 1
    assert msg in " ".join(r.stderr.split())


def test_per_run_budget_limit_exit_2():
    r = _run("--mdp", "riverswim", "--budget", "60000000", "--seeds", "1", "--algo", "uniform")
    assert r.exit_code == 2
    assert "limit 5e+07 samples per run" in r.output


def test_planning_work_limit_exit_2():
    r = _run("--mdp", "riverswim?states=3000", "--budget", "20000", "--seeds", "100")
    assert r.exit_code == 2
    assert "flops planning on 3000 states" in r.output and "limit 1e+14" in r.output


@pytest.mark.parametrize(
    "spec,msg",
    [
        ("riverswim?states=abc", "riverswim option states='abc' must be an integer"),
        ("riverswim?gamma=x", "riverswim option gamma='x' must be a number"),
        ("garnet?actions=2.5", "garnet option actions=2.5 must be an integer"),
        ("riverswim?foo=1", "riverswim has no option 'foo'; valid options: states, gamma, noise"),
    ],
)
def test_builtin_option_messages(spec, msg):
    r = _run("--mdp", spec, "--budget", "100", "--seeds", "1")
    assert r.exit_code == 2
    assert msg in r.output


@pytest.mark.parametrize("text", ["P: [[[1.0]]]\nR: [[1.0]]\n", "P: [[[0.5, 0.5]], [[0.5, 0.5]]]\nR: [[1.0], [0.0]]\n"])
def test_single_action_mdp_every_algo_optimal(tmp_path, text):
    f = tmp_path / "one.yaml"
    f.write_text(text)
    r = _run("--mdp", str(f), "--budget", "100", "--seeds", "2")
    assert r.exit_code == 0, r.output
    res = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{") and '"result"' in x]
    assert sorted(x["algo"] for x in res) == sorted(B.ALGOS)
    for x in res:
        assert x["policy_gap"] == 0.0 and x["p_eps_optimal"] == 1.0 and x["samples"] == 100.0


def test_klb_weights_single_action_uniform():
    mdp = M.validate([[[0.5, 0.5]], [[0.5, 0.5]]], [[1.0], [0.0]], 0.0, None, 0.9)
    L = B.Learner(mdp)
    L.add(0, 0, 1.0, 0)
    L.add(1, 0, 0.0, 0)
    w = B.klb_weights(L, B.Config())
    assert w.tolist() == [[0.5], [0.5]]


def test_tiny_budget_runs_count_their_set_up():
    # 3 rules x 1e6 runs of 1 sample: each run costs ~0.5 ms of set-up, counted as 50 samples
    r = _run("--mdp", "riverswim", "--budget", "1", "--seeds", "1000000")
    assert r.exit_code == 2 and r.stdout == "" and len(r.stderr.strip().splitlines()) == 1
    assert "~1.5e+08 samples" in r.stderr and "lower --seeds" in r.stderr


@pytest.mark.parametrize(
    "recipe",
    sorted(__import__("pathlib").Path(__file__).resolve().parents[2].joinpath("recipes", "bpi").glob("*.yaml")),
    ids=lambda p: p.stem,
)
def test_every_shipped_recipe_is_under_the_limits(recipe):
    from icml26.core.recipe import resolve

    cfg = resolve(B.Config, "bpi", str(recipe), None)
    assert max(cfg.budget, B.MIN_RUN_SAMPLES) * cfg.seeds * len(B.parse_algos(cfg.algo)) <= B.MAX_TOTAL_SAMPLES
    B.check_samples(cfg)  # the samples' limits, without building the MDP
    if "frozenlake" in cfg.mdp:
        pytest.importorskip("gymnasium")
    B.check_planning(cfg, M.load_mdp(cfg.mdp))  # the planning cost on it


def test_duplicate_builtin_option_exit_2():
    r = _run("--mdp", "garnet?states=5&states=6", "--budget", "100", "--seeds", "1")
    assert r.exit_code == 2 and r.stdout == "" and len(r.stderr.strip().splitlines()) == 1
    assert "option states is given twice" in r.stderr
