"""icml26 mcts value normalisation (issue 15, part): the value range that scales the UCB
bonuses, temperatures and Gumbel's sigma(q) is recorded in the config and in every result
(``value_norm``: oracle = the exact range, declared = ``--set value_range=[lo,hi]``); a
declared range is used instead of the exact one; bad settings exit 2 before any record."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from icml26.cli import app
from icml26.methods.exploration.trees import load_tree

TINY = "recipes/mcts/envs/tiny.yaml"


def _run(args):
    r = CliRunner().invoke(app, ["mcts", "--env", TINY, "--seeds", "60", "-n", "30", "-q", *args])
    recs = [json.loads(x) for x in r.stdout.splitlines() if x.strip().startswith("{")]
    return r.exit_code, recs, r.stderr


def test_value_norm_recorded_and_declared_range_used():
    tree = load_tree(TINY)
    code, recs, err = _run(["--algo", "uct,gumbel", "--set", "value_norm=oracle"])
    assert code == 0, err
    assert recs[0]["kind"] == "config" and recs[0]["value_norm"] == "oracle" and recs[0]["value_range"] is None
    res = [r for r in recs if r["kind"] == "result"]
    assert res and all(r["value_norm"] == "oracle" for r in res)
    assert all(r["value_range"] == [float(v) for v in tree.value_range] for r in res)
    lo, hi = tree.value_range
    wide = [lo - 1000.0 * (hi - lo), hi + 1000.0 * (hi - lo)]
    code, recs2, err = _run(
        ["--algo", "uct,gumbel", "--set", "value_norm=declared", "--set", f"value_range=[{wide[0]},{wide[1]}]"]
    )
    assert code == 0, err
    assert recs2[0]["value_norm"] == "declared" and recs2[0]["value_range"] == wide
    res2 = [r for r in recs2 if r["kind"] == "result"]
    assert all(r["value_norm"] == "declared" and r["value_range"] == wide for r in res2)
    # a range 2001 times wider makes UCT's bonus dominate: its recommendations change
    key = lambda rs: [(r["algo"], r["p_correct"], r["simple_regret"]) for r in rs]  # noqa: E731
    assert key(res) != key(res2)


@pytest.mark.parametrize(
    "sets, message",
    [
        (["value_norm=minmx"], "value_norm must be one of minmax, minmax-tree, declared, oracle"),
        (["value_norm=declared"], "value_norm 'declared' needs value_range"),
        (["value_norm=declared", "value_range=[1,1]"], "value_range must be [lo, hi] with finite lo < hi"),
        (["value_range=[0,1]"], "value_range is used only with value_norm 'declared'"),
    ],
)
def test_bad_value_norm_exits_2(sets, message):
    code, recs, err = _run([x for s in sets for x in ("--set", s)])
    assert code == 2 and not recs, err
    assert message in err and len(err.strip().splitlines()) == 1
