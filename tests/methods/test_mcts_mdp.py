"""MDP files (``icml26 bpi``'s format) as ``icml26 mcts`` envs (icml26/methods/exploration/mdp_env.py):
the C++ table kernel against the Python search bit for bit (rewards with Gaussian noise
included), exact values against backward induction on the MDP's arrays, episodes whose return
is the sum of the env's rewards, and bad MDP input -> exit 2 with one line."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from icml26.cli import app
from icml26.methods.exploration import mcts as M
from icml26.methods.exploration import mcts_episodes as E
from icml26.methods.exploration.mdps import load_mdp
from icml26.ops._ref import mcts as R

TWO_STATE = "recipes/bpi/mdps/two_state.yaml"
RIVERSWIM = "mdp:riverswim"
GARNET = "mdp:garnet?states=12&actions=3&branching=3&seed=4"
SEEDS = [7, 2**62 + 12345]


def _load(env_id, **kw):
    cfg = M.Config(env=env_id, **kw)
    kind, env = M.load_env(cfg)
    return cfg, kind, env, M.search_params(cfg, kind, env)


@pytest.mark.parametrize(
    "env_id, horizon, norm",
    [(TWO_STATE, 15, "minmax"), (RIVERSWIM, 20, "minmax"), (GARNET, 12, "minmax"), (GARNET, 12, "oracle")],
)
def test_root_statistics_equal_the_python_search_bit_for_bit(mcts_table_kernel, env_id, horizon, norm):
    cfg, kind, env, prm = _load(env_id, horizon=horizon, value_norm=norm)
    assert kind == "gym" and env.noise is not None  # every instance here has reward noise
    budgets = [3, 120]
    for algo in R.ALGOS:
        rec, vis, q = mcts_table_kernel.table_search(env.table(), env.s0, algo, budgets, SEEDS, prm)
        for i, s in enumerate(SEEDS):
            for j, b in enumerate(budgets):
                a, st = R.search(env.model(s), R.ALGOS.index(algo), prm, s, b)
                assert rec[i, j] == a, (algo, s, b)
                assert vis[i, j].tolist() == st["visits"], (algo, s, b)
                assert q[i, j].tolist() == st["q"], (algo, s, b)  # exact float equality
    # the CLI's search goes through the same kernel, and backend=ref through the Python search
    r_ext, be_ext = env.search("varde", budgets, SEEDS, prm, use="auto")
    r_ref, be_ref = env.search("varde", budgets, SEEDS, prm, use="ref")
    assert (be_ext, be_ref) == ("ext-cpu", "python") and (r_ext == r_ref).all()


def test_table_and_exact_values_are_the_mdps():
    _, _, env, _ = _load(GARNET, horizon=9)
    mdp = load_mdp(GARNET[4:])
    for s in range(mdp.S):
        for a in range(mdp.A):
            trs = env.P[s][a]
            assert [t for _, t, _, _ in trs] == np.flatnonzero(mdp.P[s, a]).tolist()
            assert [p for p, *_ in trs] == mdp.P[s, a][mdp.P[s, a] > 0].tolist()
            assert all(r == mdp.R[s, a] and d is False for _, _, r, d in trs)
    v = np.zeros(mdp.S)  # finite-horizon backward induction on the arrays (no terminal states)
    for _ in range(9):
        q = mdp.R + mdp.gamma * mdp.P @ v
        v = q.max(axis=1)
    np.testing.assert_allclose(env.q_root, q[0], rtol=1e-12, atol=1e-12)
    assert env.gamma == mdp.gamma == 0.9 and env.s0 == 0


def test_reward_noise_has_the_files_mean_and_std():
    _, _, env, _ = _load(TWO_STATE, horizon=5)
    m = env.model(3)  # state 0, action 0: reward 0.5 + 0.3 z, next state 0 for sure
    st = m.root()
    r = np.array([m.step(st, 0, j)[0] for j in range(20000)])
    assert abs(r.mean() - 0.5) < 4 * 0.3 / np.sqrt(r.size)
    assert abs(r.std() - 0.3) < 0.01


def test_yaml_mdp_file_npz_and_prefix_name_the_same_mdp(tmp_path):
    mdp = load_mdp(TWO_STATE)
    z = tmp_path / "two.npz"
    np.savez(z, P=mdp.P, R=mdp.R, noise=mdp.noise, gamma=mdp.gamma)
    qs = [_load(e, horizon=7)[2].q_root for e in (TWO_STATE, "mdp:" + TWO_STATE, str(z))]
    assert qs[0].tolist() == qs[1].tolist() == qs[2].tolist()
    assert M.load_env(M.Config(env="recipes/mcts/envs/tiny.yaml"))[0] == "tree"  # tree files stay trees


@pytest.mark.parametrize("env_id", [TWO_STATE, RIVERSWIM])
def test_episode_return_is_the_sum_of_the_envs_rewards_and_both_backends_agree(mcts_table_kernel, env_id):
    from icml26.methods.exploration.mdp_env import MDPEnv

    cfg, kind, env, prm = _load(env_id, horizon=10, episodes=2, reuse_tree=True, episode_steps=15)
    eps = {}
    for be in ("auto", "ref"):
        c = M.Config(env=env_id, horizon=10, episodes=2, reuse_tree=True, episode_steps=15, backend=be)
        eps[be] = E.play_episode(kind, env, c, "uct", 40, prm, 11, 5, reuse=True, max_steps=15)
    assert eps["auto"]["backend"] == "ext-cpu" and eps["ref"]["backend"] == "python"
    assert eps["auto"]["actions"] == eps["ref"]["actions"] and eps["auto"]["rewards"] == eps["ref"]["rewards"]
    ep = eps["auto"]
    assert ep["steps"] == 15 and ep["return"] == pytest.approx(sum(ep["rewards"]), abs=0)
    real = MDPEnv(env.mdp)  # a fresh env replayed with the episode's seed and actions
    real.reset(seed=11)
    assert [real.step(a)[1] for a in ep["actions"]] == ep["rewards"]
    assert ep["reused"] >= 1


def _invoke(args):
    return CliRunner().invoke(app, ["mcts", *args])


def test_cli_on_an_mdp_file_records_the_kernel_and_the_mdps_gamma(tmp_path):
    r = _invoke(
        [
            "--env",
            TWO_STATE,
            "--algo",
            "varde,uct",
            "-n",
            "50",
            "--seeds",
            "4",
            "--set",
            "horizon=12",
            "--out",
            str(tmp_path / "o"),
            "-q",
        ]
    )
    assert r.exit_code == 0, r.output
    recs = [json.loads(x) for x in (tmp_path / "o" / "records.jsonl").read_text().splitlines()]
    res = [x for x in recs if x["kind"] == "result"]
    assert {x["backend"] for x in res} == {"ext-cpu"} and len(res) == 2
    assert [x for x in recs if x["kind"] == "summary"][0]["gamma"] == 0.9


@pytest.mark.parametrize(
    "env, text",
    [
        ("mdp:missing.yaml", "does not exist"),
        ("mdp:nosuch", "not a file (.yaml/.npz) nor one of riverswim"),
        ("mdp:garnet?states=x", "must be an integer"),
        ("BAD", "P must have shape (S, A, S)"),
        ("SUM", "sums to 0.9"),
    ],
)
def test_bad_mdp_exits_2_with_one_line(tmp_path, env, text):
    if env == "BAD":
        env = str(tmp_path / "bad.yaml")
        (tmp_path / "bad.yaml").write_text("P: [[[0.5, 0.5]]]\nR: [[1.0]]\n")
    if env == "SUM":
        env = str(tmp_path / "sum.yaml")
        (tmp_path / "sum.yaml").write_text("P: [[[0.9]]]\nR: [[1.0]]\n")
    out = tmp_path / "o"
    r = _invoke(["--env", env, "-n", "20", "--seeds", "2", "--out", str(out)])
    assert r.exit_code == 2, r.output
    assert r.stdout == "" and not out.exists()
    line = r.stderr.strip()
    assert "\n" not in line and text in line and line.startswith("icml26: error: --env "), line


def test_mdp_work_limit_is_the_table_kernels():
    r = _invoke(["--env", RIVERSWIM, "-n", "10000", "--seeds", "20000", "--algo", "uct,varde", "--set", "horizon=5"])
    assert r.exit_code == 2 and "this run would simulate ~" in r.stderr and "limit 2e+08" in r.stderr, r.output


def test_mdp_yaml_file_work_limit_applies_once_loaded():
    # a .yaml MDP file is told apart from a tree file only when loaded: the table kernel's limit then
    r = _invoke(["--env", TWO_STATE, "-n", "10000", "--seeds", "20000", "--algo", "uct,varde", "--set", "horizon=5"])
    assert r.exit_code == 2 and "this run would simulate ~" in r.stderr and "limit 2e+08" in r.stderr, r.output


@pytest.mark.parametrize("env, own", [(TWO_STATE, 0.9), (RIVERSWIM, 0.95), ("recipes/mcts/envs/noisy.yaml", None)])
def test_explicit_gamma_with_an_env_that_sets_its_own_exits_2(tmp_path, env, own):
    out = tmp_path / "o"
    r = _invoke(["--env", env, "-n", "20", "--seeds", "2", "--set", "gamma=0.5", "--out", str(out)])
    assert r.exit_code == 2, r.output
    assert r.stdout == "" and not out.exists()
    line = r.stderr.strip()
    assert "\n" not in line and "its own gamma" in line and "--set gamma" in line, line
    if own is not None:
        assert f"({own:g})" in line, line


@pytest.mark.parametrize(
    "env, used",
    [
        (TWO_STATE, 0.9),
        (RIVERSWIM, 0.95),
        ("recipes/mcts/envs/noisy.yaml", "tree"),
        ("FrozenLake-v1?map_name=4x4&is_slippery=true", 0.95),
    ],
)
def test_config_record_shows_the_gamma_used(tmp_path, env, used):
    if env.startswith("Frozen"):
        pytest.importorskip("gymnasium")
    if used == "tree":
        from icml26.methods.exploration.trees import load_tree

        used = load_tree(env).gamma
    r = _invoke(
        [
            "--env",
            env,
            "-n",
            "10",
            "--seeds",
            "2",
            "--set",
            "horizon=5",
            "--algo",
            "uct",
            "--out",
            str(tmp_path / "o"),
            "-q",
        ]
    )
    assert r.exit_code == 0, r.output
    recs = [json.loads(x) for x in (tmp_path / "o" / "records.jsonl").read_text().splitlines()]
    cfg = [x for x in recs if x["kind"] == "config"][0]
    assert cfg["gamma"] == used, cfg


@pytest.mark.parametrize(
    "name, text, want",
    [
        (
            "empty.yaml",
            "",
            "env file '{p}': expected a tree file's mapping with 'random' or 'root', or an MDP file's with 'P'",
        ),
        (
            "list.yaml",
            "- 1\n",
            "env file '{p}': expected a tree file's mapping with 'random' or 'root', or an MDP file's with 'P'",
        ),
        ("missing.yaml", None, "env file '{p}' (a tree or MDP file) does not exist or is not a file"),
    ],
)
def test_env_file_that_is_neither_form_names_both(tmp_path, name, text, want):
    p = tmp_path / name
    if text is not None:
        p.write_text(text)
    out = tmp_path / "o"
    r = _invoke(["--env", str(p), "-n", "10", "--seeds", "2", "--out", str(out)])
    assert r.exit_code == 2 and r.stdout == "" and not out.exists(), r.output
    line = r.stderr.strip()
    assert "\n" not in line and want.format(p=p) in line, line
