"""icml26 mcts, value normalisation by the search's own observed Q range (``value_norm: minmax``,
the default): the C++ kernel and its _ref twin agree bit for bit in every mode, minmax decisions
do not move when the rewards are scaled (a fixed declared range does), the tree file's
``value_range`` key feeds ``declared`` (``--set`` overrides it), and every record says which
normalisation scaled the search."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from icml26.cli import app
from icml26.methods.exploration import mcts as M
from icml26.methods.exploration import trees as T
from icml26.ops import mcts as ops
from icml26.ops._ref import mcts as R

TINY = "recipes/mcts/envs/tiny.yaml"


def _need_ext():
    if ops.backend() == "ref":
        from icml26.core import ext

        pytest.skip(f"mcts C++ kernel unavailable: {ext.why('mcts')}")


def _prm(t, norm, **kw):
    cfg = M.Config(value_norm=norm, value_range=(-1.0, 4.0) if norm == "declared" else None, **kw)
    return M.search_params(cfg, "tree", t)


PARITY_TREES = {
    "noisy": lambda: T.load_tree(M.resolve_env_path("recipes/mcts/envs/noisy.yaml")),
    "bernoulli-chance3": lambda: T.generate(3, 3, 3, noise="bernoulli", seed=5, gamma=0.9),
    "gauss-4-actions": lambda: T.generate(4, 4, 1, noise_scale=1.0, noise_spread=0.5, seed=0),
}


@pytest.mark.parametrize("norm", ["minmax", "minmax-tree", "oracle"])
@pytest.mark.parametrize("tree", list(PARITY_TREES))
@pytest.mark.parametrize("algo", R.ALGOS)
def test_ext_matches_ref_bit_for_bit_per_value_norm(tree, algo, norm):
    _need_ext()
    t = PARITY_TREES[tree]()
    prm = (
        _prm(t, norm, kappa=0.0) if algo == "varde" and tree == "noisy" else _prm(t, norm)
    )  # (kappa 0: tau from the range)
    seeds = ops.run_seeds(5, 3)
    a = ops.tree_search(t, algo, [6, 50, 120], seeds, prm, use="ref")
    b = ops.tree_search(t, algo, [6, 50, 120], seeds, prm, use="ext")
    for x, y in zip(a[:3], b[:3]):
        np.testing.assert_array_equal(x, y)


def test_minmax_range_is_the_range_of_the_backed_up_estimates():
    """Oracle recomputation: the twin's [lo, hi] after a search equals the min and max over every
    value a root-or-deeper estimate took, recorded by an independent hook on the backups."""
    t = PARITY_TREES["noisy"]()
    for algo in ("uct", "ments"):
        prm = _prm(t, "minmax-tree")
        s = R.Search(R.TreeModel(t, 11), R.ALGOS.index(algo), prm, 11)
        seen = []
        orig = s._backup

        def backup(path, s=s, seen=seen, orig=orig):
            orig(path)
            for nd, a, _ in path:  # the values this backup wrote
                seen.append(nd.g[a] if algo == "uct" else nd.Q[a])

        s._backup = backup
        for _ in range(300):
            s.simulate()
        assert s.lo == min(seen) and s.hi == max(seen)
        assert s.span == s.hi - s.lo and s.v_lo == s.lo
        assert s.tau == prm.tau * s.span  # tau in units of the observed range


def _scaled(t, a):
    u = T.Tree(t.node_off, t.mean * a, t.scale * a, t.out_off, t.prob, t.child, gamma=t.gamma, noise=t.noise, df=t.df)
    return T.solve(u)


@pytest.mark.parametrize("norm", ["minmax", "minmax-tree"])
@pytest.mark.parametrize("algo", ["uct", "power-uct", "ments", "mdp-gape", "sequential-halving", "gumbel"])
def test_minmax_decisions_do_not_move_when_rewards_are_scaled(algo, norm):
    """r -> 1024 r (a power of two: every step of the search scales exactly): the same root
    visits and recommendations under minmax; under a fixed declared range they change."""
    t = T.generate(3, 4, 2, noise_scale=1.0, noise_spread=0.5, seed=2)
    u = _scaled(t, 1024.0)
    seeds = ops.run_seeds(2, 8)
    use = "ref" if ops.backend() == "ref" else "ext"
    a = ops.tree_search(t, algo, [40, 200], seeds, _prm(t, norm), use=use)
    b = ops.tree_search(u, algo, [40, 200], seeds, _prm(u, norm), use=use)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    c = ops.tree_search(u, algo, [40, 200], seeds, _prm(u, "declared"), use=use)  # range [-1, 4] for values x1024
    assert not np.array_equal(a[1], c[1])


def _run(args, env=TINY):
    r = CliRunner().invoke(
        app, ["mcts", "--env", env, "--seeds", "40", "-n", "30", "-q", "--algo", "uct,gumbel", *args]
    )
    recs = [json.loads(x) for x in r.stdout.splitlines() if x.strip().startswith("{")]
    return r.exit_code, recs, r.stderr


def test_default_is_minmax_and_every_record_says_so():
    code, recs, err = _run([])
    assert code == 0, err
    assert recs[0]["kind"] == "config" and recs[0]["value_norm"] == "minmax" and recs[0]["value_range"] is None
    res = [r for r in recs if r["kind"] == "result"]
    assert len(res) == 2
    assert all(
        r["value_norm"] == "minmax" and r["value_range"] is None and r["value_range_source"] == "observed" for r in res
    )
    code, recs, err = _run(["--set", "value_norm=oracle"])
    res = [r for r in recs if r["kind"] == "result"]
    assert code == 0 and all(r["value_norm"] == "oracle" and r["value_range_source"] == "exact" for r in res)


def test_tree_file_value_range_feeds_declared_and_set_overrides_it(tmp_path):
    text = (M.resolve_env_path(TINY)).read_text()
    f = tmp_path / "t.yaml"
    f.write_text("value_range: [-100.0, 100.0]\n" + text)
    assert T.load_tree(f).declared_value_range == (-100.0, 100.0)
    code, recs, err = _run(["--set", "value_norm=declared"], env=str(f))
    assert code == 0, err
    res = [r for r in recs if r["kind"] == "result"]
    assert all(r["value_range"] == [-100.0, 100.0] and r["value_range_source"] == "file" for r in res)
    code, recs2, err = _run(["--set", "value_norm=declared", "--set", "value_range=[0,1]"], env=str(f))
    res2 = [r for r in recs2 if r["kind"] == "result"]
    assert code == 0 and all(r["value_range"] == [0.0, 1.0] and r["value_range_source"] == "set" for r in res2)
    assert [r["p_correct"] for r in res] != [r["p_correct"] for r in res2] or [r["simple_regret"] for r in res] != [
        r["simple_regret"] for r in res2
    ]
    code, recs3, err = _run([], env=str(f))  # minmax (default): the file's range is not used, and a note says so
    assert code == 0 and "used only with --set value_norm=declared" in err
    assert all(r["value_norm"] == "minmax" for r in recs3 if r["kind"] == "result")


@pytest.mark.parametrize(
    "line, message",
    [
        ("value_range: [1, 1]", "value_range must be [lo, hi] with finite lo < hi"),
        ("value_range: [0, .nan]", "value_range must be [lo, hi] with finite lo < hi"),
        ("value_range: 3", "value_range must be [lo, hi] with finite lo < hi"),
        ("value_range: [0, 1, 2]", "value_range must be [lo, hi] with finite lo < hi"),
    ],
)
def test_bad_file_value_range_exits_2(tmp_path, line, message):
    f = tmp_path / "t.yaml"
    f.write_text(line + "\n" + M.resolve_env_path(TINY).read_text())
    code, recs, err = _run([], env=str(f))
    assert code == 2 and not recs, err
    assert message in err and len(err.strip().splitlines()) == 1


def test_declared_without_any_range_exits_2_naming_both_sources():
    code, recs, err = _run(["--set", "value_norm=declared"])
    assert code == 2 and not recs
    assert (
        "a value_range key in the tree file or --set value_range=[lo,hi]" in err and len(err.strip().splitlines()) == 1
    )


def test_minmax_on_a_gymnasium_table_env_runs_the_table_search():
    pytest.importorskip("gymnasium")
    from icml26.ops import mcts_table

    cfg = M.Config(
        env="FrozenLake-v1?map_name=4x4&is_slippery=false", algo="uct,ments", simulations=(60,), seeds=3, horizon=8
    )
    res = [r for r in M.run(cfg, seed=0) if r["kind"] == "result"]
    be = "ext-cpu" if mcts_table.available() else "python"  # the C++ table kernel where it builds
    assert all(r["backend"] == be and r["value_norm"] == "minmax" and r["value_range"] is None for r in res)
    # deterministic 4x4 over 8 steps: the goal is reachable, so a search with its own range finds the optimum
    assert all(r["p_correct"] is not None for r in res)


def test_minmax_per_node_ucb_is_ucb_on_the_node_normalised_estimates():
    """Oracle: with value_norm minmax, UCT's choice at every node is argmax of
    (Q - min Q) / (max Q - min Q) + c sqrt(log n / N) (mctx's qtransform_by_parent_and_siblings
    rescaling, without the node value), recomputed here with numpy."""
    t = PARITY_TREES["noisy"]()
    prm = _prm(t, "minmax")
    s = R.Search(R.TreeModel(t, 3), R.ALGOS.index("uct"), prm, 3)
    for _ in range(400):
        s.simulate()
    stack, checked = [s.root], 0
    while stack:
        nd = stack.pop()
        stack += [k for ks in nd.kids for k in ks if k is not None]
        if min(nd.N) == 0 or len(set(nd.g)) < 2:
            continue
        q, n = np.array(nd.g), np.array(nd.N, float)
        score = (q - q.min()) / (q.max() - q.min()) + prm.c * np.sqrt(np.log(nd.n) / n)
        top = np.sort(score)[-2:]
        if top[1] - top[0] < 1e-9:  # (a near tie: rounding may pick either)
            continue
        assert s._select(nd, 1) == int(np.argmax(score))
        checked += 1
    assert checked >= 10
