"""The C++ search over gymnasium transition tables (icml26/ops/mcts_table.py,
icml26/csrc/cpu/mcts_table.h) against its twin, the Python search on TableModel: the same
recommendations and root statistics bit for bit with the same seeds, re-rooting that keeps the
subtree, and episodes whose returns are the env's rewards summed."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from icml26.methods.exploration import mcts as M
from icml26.methods.exploration import mcts_episodes as E
from icml26.ops._ref import mcts as R

FL4 = "FrozenLake-v1?map_name=4x4&is_slippery=true"
FL8 = "FrozenLake-v1?map_name=8x8&is_slippery=true"
TAXI = "Taxi-v4"
RAINY = "Taxi-v4?is_rainy=true"
CLIFF = "CliffWalking-v1"
SEEDS = [7, 2**62 + 12345]


@pytest.fixture(scope="module", autouse=True)
def _gymnasium():
    pytest.importorskip("gymnasium")


def _load(env_id, **kw):
    cfg = M.Config(env=env_id, **kw)
    kind, env = M.load_env(cfg)
    return cfg, env, M.search_params(cfg, kind, env)


def _python(env, algo, prm, seed, budget):
    from icml26.methods.exploration.gym_models import TableModel

    return R.search(TableModel(env.P, env.A, env.s0, env.gamma, seed), R.ALGOS.index(algo), prm, seed, budget)


@pytest.mark.parametrize(
    "env_id, horizon, norm",
    [
        (FL4, 12, "minmax"),
        (FL8, 16, "minmax"),
        (TAXI, 10, "minmax"),
        (RAINY, 8, "minmax"),
        (CLIFF, 12, "minmax"),
        (FL8, 16, "minmax-tree"),
        (RAINY, 8, "oracle"),
    ],
)
def test_root_statistics_equal_the_python_search_bit_for_bit(mcts_table_kernel, env_id, horizon, norm):
    cfg, env, prm = _load(env_id, horizon=horizon, value_norm=norm)
    budgets = [3, 50]
    for algo in R.ALGOS:
        rec, vis, q = mcts_table_kernel.table_search(env.table(), env.s0, algo, budgets, SEEDS, prm)
        for i, s in enumerate(SEEDS):
            for j, b in enumerate(budgets):
                a, st = _python(env, algo, prm, s, b)
                assert rec[i, j] == a, (algo, s, b)
                assert vis[i, j].tolist() == st["visits"], (algo, s, b)
                assert q[i, j].tolist() == st["q"], (algo, s, b)  # exact float equality
                assert int(vis[i, j].sum()) == b


def test_command_records_use_the_kernel_and_match_backend_ref(mcts_table_kernel):
    cfg = M.Config(env=RAINY, algo="all", simulations=(20, 60), seeds=4, horizon=8)
    fast = [r for r in M.run(cfg, seed=3) if r["kind"] == "result"]
    slow = [r for r in M.run(dataclasses.replace(cfg, backend="ref"), seed=3) if r["kind"] == "result"]
    assert {r["backend"] for r in fast} == {"ext-cpu"} and {r["backend"] for r in slow} == {"python"}
    strip = lambda r: {k: v for k, v in r.items() if k != "backend"}  # noqa: E731
    assert [strip(r) for r in fast] == [strip(r) for r in slow]


def _child_stats(search, a, key):
    nd = search.root
    kid = nd.kids[a][nd.keys[a][key]]
    vals = kid.g if search.algo in (R.UCT, R.SH, R.GUMBEL) else kid.Q
    return {"visits": list(kid.N), "q": list(vals)}


@pytest.mark.parametrize("algo", ["uct", "varde", "mdp-gape", "gumbel", "ments"])
def test_reroot_keeps_the_subtree_and_continues_as_the_python_search(mcts_table_kernel, algo):
    from icml26.methods.exploration.gym_models import TableModel

    cfg, env, prm = _load(RAINY, horizon=5)
    sd = 11
    py = R.Search(TableModel(env.P, env.A, env.s0, env.gamma, sd), R.ALGOS.index(algo), prm, sd)
    py.keep_cuts = True
    cc = mcts_table_kernel.TableSearch(env.table(), env.s0, algo, prm, sd, keep_cuts=True)
    a = py.run(300)
    assert cc.run(300) == a and cc.root_stats() == py.root_stats()
    key = max(py.root.keys[a], key=lambda k: py.root.cnt[a][py.root.keys[a][k]])  # the most sampled next state
    want = _child_stats(py, a, key)
    assert sum(want["visits"]) > 0
    unseen = next(s for s in range(env.table().S) if s not in py.root.keys[a])
    assert not cc.reroot(a, unseen) and cc.root_stats() == py.root_stats()  # an unseen outcome: nothing changes
    assert cc.reroot(a, key) and py.reroot(a, key)
    assert cc.root_stats() == want  # the child's counts and values, as they were
    # the nodes outside the kept subtree were dropped: as many nodes as the Python subtree has
    stack, n_py = [py.root], 0
    while stack:
        nd = stack.pop()
        n_py += 1
        stack.extend(k for ks in nd.kids for k in ks if k is not None)
    assert cc.n_nodes == n_py
    for b in (40, 80):  # then both continue from the kept subtree identically
        assert cc.run(b) == py.run(b)
        assert cc.root_stats() == py.root_stats()
    assert sum(cc.root_stats()["visits"]) == sum(want["visits"]) + 120


@pytest.mark.parametrize("env_id, algo", [(RAINY, "uct"), (RAINY, "varde"), (FL8, "gumbel"), (FL4, "mdp-gape")])
@pytest.mark.parametrize("reuse", [False, True])
def test_kernel_episodes_equal_python_episodes_and_sum_the_env_rewards(mcts_table_kernel, env_id, algo, reuse):
    import gymnasium as gym

    cfg, env, prm = _load(
        env_id, algo=algo, simulations=(30,), seeds=1, horizon=8, episodes=1, reuse_tree=reuse, episode_steps=30
    )
    es, ps = E.episode_seeds(5, 0)
    ep = E.play_episode("gym", env, cfg, algo, 30, prm, es, ps, reuse=reuse, max_steps=30)
    ref = E.play_episode(
        "gym", env, dataclasses.replace(cfg, backend="ref"), algo, 30, prm, es, ps, reuse=reuse, max_steps=30
    )
    assert ep["backend"] == "ext-cpu" and ref["backend"] == "python"
    assert {k: v for k, v in ep.items() if k != "backend"} == {k: v for k, v in ref.items() if k != "backend"}
    name, _, q = env_id.partition("?")
    kw = {k: (v == "true") if v in ("true", "false") else v for k, v in (p.split("=") for p in q.split("&") if p)}
    fresh = gym.make(name, **kw)
    fresh.reset(seed=int(es))
    rs = []
    for a in ep["actions"]:
        _, r, term, trunc, _ = fresh.step(a)
        rs.append(float(r))
    assert rs == ep["rewards"] and ep["return"] == sum(rs)
    assert term or trunc or ep["steps"] == 30
    if reuse:
        assert ep["reused"] >= 1


def test_a_table_the_kernel_cannot_reproduce_falls_back_to_python(mcts_table_kernel):
    """float32 probabilities sum differently in Python (NumPy's float32 arithmetic): no
    compiled table, so the Python search runs."""
    cfg, env, prm = _load(FL4, horizon=6, simulations=(20,), seeds=2, algo="uct")
    assert mcts_table_kernel.compile_table(env.P, env.A, env.gamma) is not None
    P32 = {s: {a: [(np.float32(p), s2, r, d) for p, s2, r, d in env.P[s][a]] for a in env.P[s]} for s in env.P}
    assert mcts_table_kernel.compile_table(P32, env.A, env.gamma) is None
    assert mcts_table_kernel.compile_table({1: env.P[0]}, env.A, env.gamma) is None  # states not numbered 0..S-1
    env.P = P32
    env.__dict__.pop("_table", None)
    rec, be = env.search("uct", [20], [1, 2], prm)
    assert be == "python" and rec.shape == (2, 1)
    with pytest.raises(RuntimeError, match="backend ext: the env has no transition table"):
        env.search("uct", [20], [1], prm, use="ext")


def test_cli_episodes_record_the_kernel(mcts_table_kernel, tmp_path):
    import json

    from typer.testing import CliRunner

    from icml26.cli import app

    out = tmp_path / "run"
    r = CliRunner().invoke(
        app,
        [
            "mcts",
            "--env",
            RAINY,
            "--algo",
            "uct,varde",
            "-n",
            "30",
            "--seeds",
            "2",
            "--episodes",
            "2",
            "--reuse-tree",
            "--set",
            "horizon=8",
            "--set",
            "episode_steps=20",
            "-q",
            "--out",
            str(out),
        ],
    )
    assert r.exit_code == 0, r.output
    recs = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
    res = [x for x in recs if x.get("kind") == "result"]
    assert len(res) == 2 and all(x["backend"] == "ext-cpu" and x["episode_backend"] == "ext-cpu" for x in res)
    assert all(x["episodes"] == 2 and x["reuse_tree"] and -20.0 <= x["episode_return"] <= 20.0 for x in res)
