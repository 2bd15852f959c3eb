"""icml26 mcts --episodes: full episodes (plan, act in the real env, repeat), with --reuse-tree
keeping the chosen child's subtree. An episode's return is the sum of the env's rewards
(replayed on a fresh env), re-rooting keeps the subtree's counts and values, bad settings exit 2."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from icml26.cli import app
from icml26.methods.exploration import mcts as M
from icml26.methods.exploration import mcts_episodes as E
from icml26.ops._ref import mcts as R

TAXI = "Taxi-v4?is_rainy=true"


def _gym():
    pytest.importorskip("gymnasium")


@pytest.mark.parametrize(
    "env_id, algo, reuse",
    [(TAXI, "uct", True), (TAXI, "varde", False), ("FrozenLake-v1?map_name=4x4&is_slippery=true", "gumbel", True)],
)
def test_episode_return_is_the_sum_of_the_env_rewards(env_id, algo, reuse):
    _gym()
    import gymnasium as gym

    cfg = M.Config(
        env=env_id, algo=algo, simulations=(40,), seeds=1, horizon=8, episodes=1, reuse_tree=reuse, episode_steps=25
    )
    kind, env = M.load_env(cfg)
    prm = M.search_params(cfg, kind, env)
    for i in range(2):
        es, ps = E.episode_seeds(3, i)
        ep = E.play_episode(kind, env, cfg, algo, 40, prm, es, ps, reuse=reuse, max_steps=25)
        # replay the actions on a fresh env with the episode's seed: the same rewards, summed
        name, _, q = env_id.partition("?")
        kw = {k: (v == "true") if v in ("true", "false") else v for k, v in (p.split("=") for p in q.split("&"))}
        fresh = gym.make(name, **kw)
        fresh.reset(seed=int(es))
        rs, done = [], False
        for a in ep["actions"]:
            assert not done
            _, r, term, trunc, _ = fresh.step(a)
            rs.append(float(r))
            done = term or trunc
        assert rs == ep["rewards"] and ep["return"] == sum(rs)
        assert done or ep["steps"] == 25  # it stopped when the env ended it, or at the step cap
        if reuse:
            assert ep["reused"] >= 1


def _snapshot(nd):
    """Every statistic of the subtree below ``nd`` (recursively, in slot order)."""
    kids = [[_snapshot(k) if k is not None else None for k in ks] for ks in nd.kids]
    return (
        nd.state,
        nd.n,
        list(nd.N),
        list(nd.g),
        list(nd.Q),
        list(nd.VQ),
        nd.V,
        nd.VV,
        nd.T,
        [dict(k) for k in nd.keys],
        [list(c) for c in nd.cnt],
        kids,
    )


def _depths(nd, d=0):
    yield nd, d
    for ks in nd.kids:
        for k in ks:
            if k is not None:
                yield from _depths(k, d + 1)


def _same_but_cuts(want, nd) -> int:
    """Assert the subtree below ``nd`` has the statistics recorded in ``want`` (a _snapshot), except
    that a slot cut by the horizon may now hold a fresh node (no visits, value 0); returns how
    many such slots were found."""
    assert want[:11] == _snapshot(nd)[:11]
    fresh = 0
    for ws, ks in zip(want[11], nd.kids):
        assert len(ws) == len(ks)
        for w, k in zip(ws, ks):
            if w is None:
                if k is not None:
                    assert k.n == 0 and k.V == 0.0 and sum(k.N) == 0
                    fresh += 1
            else:
                fresh += _same_but_cuts(w, k)
    return fresh


@pytest.mark.parametrize("algo", ["uct", "varde", "mdp-gape", "gumbel"])
def test_reroot_keeps_the_subtree_counts_and_values(algo):
    _gym()
    from icml26.methods.exploration import gym_models as G

    cfg = M.Config(env=TAXI, horizon=4)
    kind, env = M.load_env(cfg)
    prm = M.search_params(cfg, kind, env)
    s = R.Search(G.TableModel(env.P, env.A, env.s0, env.gamma, 5), R.ALGOS.index(algo), prm, 5)
    s.keep_cuts = True
    a = s.run(400)
    root = s.root
    key, slot = max(root.keys[a].items(), key=lambda kv: root.cnt[a][kv[1]])  # the most sampled outcome
    child = root.kids[a][slot]
    want = _snapshot(child)
    cuts = sum(len(nd.cut) for nd, _ in _depths(child) if nd.cut)
    assert cuts > 0 and all(d + 2 == s.horizon for nd, d in _depths(child) if nd.cut)  # one level nearer the root now
    assert not s.reroot(a, "no such outcome") and s.root is root  # an unknown outcome: nothing changes
    assert s.reroot(a, key) and s.root is child
    assert _same_but_cuts(want, s.root) == cuts  # every cut slot expanded, everything else as it was
    assert all(not nd.cut for nd, _ in _depths(s.root))
    old = {id(nd): (nd, nd.n, list(nd.N)) for nd, _ in _depths(s.root)}
    n0 = s.root.n
    s.run(60)
    assert s.root.n == n0 + 60  # every new simulation starts at the new root
    assert all(nd.n >= n and all(x >= y for x, y in zip(nd.N, N)) for nd, n, N in old.values())  # counts only grow


def test_reroot_on_a_tree_file_keeps_the_child_statistics(repo_root):
    t = M.load_env(M.Config(env="recipes/mcts/envs/noisy.yaml"))[1]
    prm = M.search_params(M.Config(), "tree", t)
    s = R.Search(R.TreeModel(t, 9), R.ALGOS.index("ments"), prm, 9)
    a = s.run(500)
    key, slot = next(iter(s.root.keys[a].items()))
    child = s.root.kids[a][slot]
    want = _snapshot(child)
    assert s.reroot(a, key)
    assert _snapshot(s.root) == want


def _cli(args):
    r = CliRunner().invoke(app, ["mcts", "-q", *args])
    recs = [json.loads(x) for x in r.stdout.splitlines() if x.strip().startswith("{")]
    return r.exit_code, recs, r.stderr


def test_cli_episodes_report_return_beside_p_correct():
    code, recs, err = _cli(
        [
            "--env",
            "recipes/mcts/envs/tiny.yaml",
            "--algo",
            "uct,varde",
            "-n",
            "15",
            "-n",
            "40",
            "--seeds",
            "5",
            "--episodes",
            "6",
            "--reuse-tree",
        ]
    )
    assert code == 0, err
    assert recs[0]["episodes"] == 6 and recs[0]["reuse_tree"] is True
    res = [r for r in recs if r["kind"] == "result"]
    assert len(res) == 4
    for r in res:
        assert r["p_correct"] is not None and r["episodes"] == 6 and r["reuse_tree"] is True
        lo, hi = r["episode_return_ci"]
        assert lo <= r["episode_return"] <= hi and 1 <= r["episode_steps_mean"] <= 2
    assert set(recs[-1]["episode_return"]) == {"uct", "varde"}
    # the same seed gives the same episodes
    code2, recs2, _ = _cli(
        [
            "--env",
            "recipes/mcts/envs/tiny.yaml",
            "--algo",
            "uct,varde",
            "-n",
            "15",
            "-n",
            "40",
            "--seeds",
            "5",
            "--episodes",
            "6",
            "--reuse-tree",
        ]
    )
    assert [r.get("episode_return") for r in recs2] == [r.get("episode_return") for r in recs]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--episodes", "0"], "episodes must be an integer in [1, 100000]"),
        (["--episodes", "-2"], "episodes must be an integer in [1, 100000]"),
        (["--episodes", "1000000"], "episodes must be an integer in [1, 100000]"),
        (["--reuse-tree"], "reuse_tree and episode_steps apply to episodes"),
        (["--set", "episode_steps=5"], "reuse_tree and episode_steps apply to episodes"),
        (["--episodes", "3", "--set", "episode_steps=0"], "episode_steps must be an integer in [1, 100000]"),
        (["--episodes", "90000", "-n", "3000"], "--episodes, --simulations"),
    ],
)
def test_bad_episodes_exit_2_before_any_record(args, message):
    code, recs, err = _cli(["--env", "recipes/mcts/envs/tiny.yaml", "-n", "10", "--seeds", "2", *args])
    assert code == 2 and not recs, err
    assert message in err and len(err.strip().splitlines()) == 1


def test_episodes_non_integer_exits_2():
    code, recs, err = _cli(["--env", "recipes/mcts/envs/tiny.yaml", "--episodes", "two"])
    assert code == 2 and not recs


def test_t_interval_matches_the_textbook_formula():
    x = np.array([1.0, 2.0, 4.0, 7.0])
    lo, hi = E.t_interval(x)
    h = 3.182446305284263 * x.std(ddof=1) / 2.0  # t_{0.975, 3}
    assert abs(lo - (x.mean() - h)) < 1e-12 and abs(hi - (x.mean() + h)) < 1e-12
    assert E.t_interval([5.0]) == (5.0, 5.0)


@pytest.mark.parametrize("env_id, steps", [("mdp:riverswim", 20), ("FrozenLake-v1?map_name=4x4&is_slippery=true", 3)])
def test_reuse_share_counts_only_moves_with_a_next_move(env_id, steps):
    # an episode cut at episode_steps re-roots nowhere after its last move: reused <= steps - 1,
    # so episode_reuse_share = sum(reused) / (moves - episodes) stays in [0, 1]
    if not env_id.startswith("mdp:"):
        _gym()
    cfg = M.Config(
        env=env_id,
        horizon=20,
        algo="varde",
        simulations=(100,),
        seeds=2,
        episodes=3,
        reuse_tree=True,
        episode_steps=steps,
    )
    kind, env = M.load_env(cfg)
    prm = M.search_params(cfg, kind, env)
    eps = [
        E.play_episode(kind, env, cfg, "varde", 100, prm, *E.episode_seeds(0, i), reuse=True, max_steps=steps)
        for i in range(3)
    ]
    for ep in eps:
        assert 0 <= ep["reused"] <= ep["steps"] - 1, ep
    ((_, rec),) = E.run_episodes(kind, env, cfg, "varde", (100,), prm, 0)
    assert 0.0 <= rec["episode_reuse_share"] <= 1.0, rec
    if env_id.startswith("mdp:"):  # riverswim never ends by itself: every move but the last re-roots
        assert rec["episode_reuse_share"] == 1.0 and all(ep["reused"] == steps - 1 for ep in eps)
