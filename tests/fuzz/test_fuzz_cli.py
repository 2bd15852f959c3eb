"""Fuzz at the command line: what the parsers refuse reaches the user as exit code 2 and one
line on stderr, with no traceback and no record on stdout (CliRunner)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from tests.fuzz._fuzz import NASTY_TEXT, YAML_TEXT, fuzz_pair, st

from icml26.cli import app

TINY_TREE = "recipes/mcts/envs/tiny.yaml"


def _invoke(args):
    return CliRunner().invoke(app, args)


def _exit_2_one_line(r, *needles):
    assert r.exit_code == 2, (r.exit_code, r.output, r.exception)
    err = r.stderr.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in r.output, r.output
    assert r.stdout == ""
    for n in needles:
        assert n in err, err
    return err


def _need_gym():
    from tests.conftest import need_module

    need_module("gymnasium", "pip install gymnasium")


@pytest.mark.parametrize(
    "text, needle",
    [
        ("name: x\narms: !!int abc\n", "not valid YAML"),  # ValueError from the YAML constructor
        ("arms: [{dist: [1]}, {dist: bernoulli, p: 0.5}]\n", "field 'dist' must be one of"),  # TypeError: unhashable
        (
            "arms: [{dist: lognormal, mean: 1, sigma: 100}, {dist: bernoulli, p: 0.5}]\n",
            "field 'sigma' must be at most 26",
        ),
        ("1: a\nx: b\narms: []\n", "unknown key 1"),  # TypeError: sorted keys of mixed types
    ],
)
def test_bai_env_file(tmp_path, text, needle):
    p = tmp_path / "env.yaml"
    p.write_text(text)
    assert needle in _exit_2_one_line(_invoke(["bai", "--env", str(p), "--budget", "10", "--seeds", "1", "-q"]))


@pytest.mark.parametrize(
    "text, needle",
    [
        ("random: {depth: 2, reward_mean: [-1e308, 1e308]}\n", "at most 1e+150 in magnitude"),  # OverflowError (numpy)
        ("random: {depth: 2020-99-99}\n", "not valid YAML"),
        ("[" * 600 + "]" * 600, "nesting too deep"),  # RecursionError
    ],
)
def test_mcts_env_file(tmp_path, text, needle):
    p = tmp_path / "tree.yaml"
    p.write_text(text)
    assert needle in _exit_2_one_line(
        _invoke(["mcts", "--env", str(p), "-n", "10", "--seeds", "1", "--algo", "uct", "-q"])
    )


def test_mcts_gym_option_of_the_wrong_type():
    _need_gym()
    r = _invoke(
        ["mcts", "--env", "FrozenLake-v1?reward_schedule=[1,0,0]", "-n", "10", "--seeds", "1", "--algo", "uct", "-q"]
    )
    assert "transition table is not made of" in _exit_2_one_line(r)


@pytest.mark.parametrize(
    "text, needle",
    [
        ("P: [[[1]]]\nR: [[0]]\nstart: .inf\n", "start must be a state index"),  # OverflowError: int(inf)
        ("P: [[[1]]]\nR: [[0]]\ngamma: !!float \n", "not valid YAML"),  # IndexError in PyYAML
    ],
)
def test_bpi_mdp_file(tmp_path, text, needle):
    p = tmp_path / "m.yaml"
    p.write_text(text)
    assert needle in _exit_2_one_line(_invoke(["bpi", "--mdp", str(p), "--budget", "100", "--seeds", "1", "-q"]))


def test_bpi_builtin_option_that_reads_as_a_date():
    r = _invoke(["bpi", "--mdp", "garnet?seed=2020-99-99", "--budget", "100", "--seeds", "1", "-q"])
    assert "garnet option seed='2020-99-99' must be an integer" in _exit_2_one_line(r)


@pytest.mark.parametrize(
    "cmd, item, needle",
    [
        (["bai", "--budget", "10"], "tau=inf", "tau must be a finite number, got inf"),  # ran with tau = inf
        (["bai", "--budget", "10"], "seeds=2020-99-99", "seeds: expected an integer"),  # ValueError (a date)
        (["mcts", "--env", TINY_TREE, "-n", "10"], "c=" + "[" * 600, "c: expected a number"),  # RecursionError
    ],
)
def test_set_values(cmd, item, needle):
    assert needle in _exit_2_one_line(_invoke([*cmd, "--seeds", "1", "--set", item, "-q"]))


def test_filter_data_select_nan_in_metadata(tmp_path):
    p = tmp_path / "in.jsonl"
    p.write_text(
        '{"text": "a", "metadata": {"quality_score": 0.5, "x": NaN}}\n{"text": "b", "metadata": {"quality_score": '
        "0.7}}\n"
    )
    out = tmp_path / "out.jsonl"
    _exit_2_one_line(
        _invoke(["filter-data", "select", str(p), "--top", "0.5", "--output", str(out), "-q"]),
        "in.jsonl:1: not valid JSON (NaN is not JSON)",
    )
    assert not out.exists()


# a few random --set values on a tiny tree: exit 0 (a run of 10 simulations) or 2, one line
MCTS_KEYS = ["c", "tau", "kappa", "epsilon", "var_floor", "gamma", "delta", "prior_var", "horizon", "nope"]


def _mcts_set_prop(args):
    key, value = args
    r = _invoke(
        ["mcts", "--env", TINY_TREE, "-n", "10", "--seeds", "1", "--algo", "uct", "-q", "--set", f"{key}={value}"]
    )
    assert r.exit_code in (0, 2), (r.exit_code, r.output, r.exception)
    if r.exit_code == 2:
        _exit_2_one_line(r)


test_mcts_set_cli, test_mcts_set_cli_slow = fuzz_pair(
    st.tuples(st.sampled_from(MCTS_KEYS), st.one_of(NASTY_TEXT, YAML_TEXT, st.floats().map(repr))).filter(
        lambda kv: "\x00" not in kv[1]
    ),
    15,
)(_mcts_set_prop)  # argv cannot hold NUL
