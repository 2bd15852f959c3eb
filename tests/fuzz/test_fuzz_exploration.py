"""Fuzz: the files and specs that ``bai``, ``mcts`` and ``bpi`` read by hand: bandit env
files, tree files, MDP files (YAML and .npz), built-in MDP and gymnasium ``?key=value``
options. Each input either parses or is an InputError with one line; never another
exception (see tests/fuzz/_fuzz.py for the profiles)."""

from __future__ import annotations

import io

import numpy as np
import pytest

from tests.fuzz._fuzz import (
    NASTY_FLOATS,
    NASTY_INTS,
    NASTY_TEXT,
    SCALARS,
    YAML_TEXT,
    fuzz_pair,
    one_line,
    parses_or_input_error,
    st,
    values,
)

from icml26.core.errors import InputError
from icml26.methods.exploration import bandit_env as B
from icml26.methods.exploration import gym_models as G
from icml26.methods.exploration import mdps as M
from icml26.methods.exploration import trees as T

VALUES = values(6)
NUMBERS = st.one_of(
    st.floats(-2, 2), st.integers(-2, 3), NASTY_FLOATS, NASTY_INTS, st.sampled_from(["0.5", True, None])
)


@pytest.fixture(scope="module")
def tmp_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz_exploration")


def _write(tmp_dir, name: str, data: str | bytes):
    p = tmp_dir / name
    p.write_bytes(data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data)
    return p


# --- bandit env files --------------------------------------------------------------------------
ARM_FIELDS = ("dist", "label", "p", "mean", "std", "scale", "df", "sigma", "file", "column", "missing")
CSV_CELLS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers().map(str),
    NASTY_TEXT,
    st.text(alphabet='0123456789.-e, "\n', max_size=6),
)


@st.composite
def arms(draw):
    dist = draw(st.one_of(st.sampled_from(list(B.KINDS)), SCALARS, st.lists(st.integers(), max_size=2)))
    arm = {"dist": dist}
    for k in draw(st.lists(st.sampled_from(ARM_FIELDS[1:]), max_size=4, unique=True)):
        arm[k] = draw(
            st.sampled_from(["data.csv", "none.csv", ""])
            if k == "file"
            else st.sampled_from(["c", "d", 3])
            if k == "column"
            else st.sampled_from(["drop", "error", "skip", 1])
            if k == "missing"
            else SCALARS
            if k == "label"
            else NUMBERS
        )
    if dist == "empirical" and draw(st.booleans()):
        arm.setdefault("file", "data.csv")
        arm.setdefault("column", "c")
    return arm


ENVS = st.one_of(
    st.fixed_dictionaries(
        {"arms": st.lists(arms(), max_size=4)}, optional={"name": SCALARS, "description": SCALARS, "config": VALUES}
    ),
    st.dictionaries(
        st.one_of(st.sampled_from(["arms", "name"]), st.integers(0, 2), st.text(max_size=3)), VALUES, max_size=3
    ),
    VALUES,
)


def _bandit_prop(tmp_dir, args):
    env, cells = args
    _write(tmp_dir, "data.csv", "c,d\n" + "\n".join(f"{a},{b}" for a, b in cells) + "\n")
    parses_or_input_error(B.parse_env, env, tmp_dir, source="env.yaml")


test_bandit_env, test_bandit_env_slow = fuzz_pair(
    st.tuples(ENVS, st.lists(st.tuples(CSV_CELLS, CSV_CELLS), max_size=5))
)(_bandit_prop)


def _bandit_text_prop(tmp_dir, text):
    parses_or_input_error(B.load_env, _write(tmp_dir, "env.yaml", text))


test_bandit_env_text, test_bandit_env_text_slow = fuzz_pair(st.one_of(YAML_TEXT, st.binary(max_size=100)), 100)(
    _bandit_text_prop
)


@pytest.mark.parametrize(
    "env, msg",
    [
        ({1: 2, "x": 3, "arms": []}, "unknown key 1"),  # TypeError: keys of mixed types sorted
        ({"arms": [{"dist": [1]}, {"dist": "bernoulli", "p": 0.5}]}, "field 'dist' must be one of"),  # unhashable
        (
            {"arms": [{"dist": "lognormal", "mean": 1.0, "sigma": 100}, {"dist": "bernoulli", "p": 0.5}]},
            "field 'sigma' must be at most 26",
        ),  # OverflowError: math.exp(sigma^2)
        (
            {"arms": [{"dist": "gaussian", "label": "a\nb", "mean": "x", "std": 1}, {"dist": "bernoulli", "p": 0.5}]},
            "arm 0 ('a\\nb'): field 'mean' must be a number",
        ),  # a label with a newline made two lines
    ],
)
def test_bandit_env_regressions(tmp_dir, env, msg):
    with pytest.raises(InputError) as e:
        B.parse_env(env, tmp_dir, source="env.yaml")
    assert msg in one_line(e.value)


# --- tree files ----------------------------------------------------------------------------------
SIZES = st.one_of(st.integers(-1, 3), st.sampled_from([10**8, 10**12, 2**63, 1.5, "2", None, True]))


def nodes(depth: int):
    action = st.fixed_dictionaries(
        {},
        optional={
            "mean": NUMBERS,
            "scale": NUMBERS,
            "x": SCALARS,
            "next": st.lists(
                st.fixed_dictionaries({}, optional={"p": NUMBERS, "node": nodes(depth - 1) if depth else st.just([])}),
                max_size=3,
            ),
        },
    )
    return st.one_of(st.lists(action, max_size=3), SCALARS)


TREES = st.one_of(
    st.fixed_dictionaries(
        {
            "random": st.one_of(
                st.fixed_dictionaries(
                    {},
                    optional={
                        "depth": SIZES,
                        "branching": SIZES,
                        "chance": SIZES,
                        "reward_mean": st.one_of(st.lists(NUMBERS, max_size=3), NUMBERS),
                        "noise_scale": NUMBERS,
                        "noise_spread": NUMBERS,
                        "dirichlet": NUMBERS,
                        "seed": st.one_of(SIZES, NASTY_INTS),
                        "bad": SCALARS,
                    },
                ),
                SCALARS,
            )
        },
        optional={
            "gamma": NUMBERS,
            "noise": st.sampled_from(["gaussian", "student_t", "bernoulli", "cauchy", 1]),
            "df": NUMBERS,
            "name": SCALARS,
        },
    ),
    st.fixed_dictionaries(
        {"root": nodes(2)}, optional={"gamma": NUMBERS, "noise": st.sampled_from(["gaussian", "bernoulli"])}
    ),
    VALUES,
)


def _tree_prop(data):
    t = parses_or_input_error(T.from_dict, data, "tree.yaml")
    if t is not None:  # what parses has finite exact values
        assert np.all(np.isfinite(t.q_star)) and np.all(np.isfinite(t.v_star))


test_tree_file, test_tree_file_slow = fuzz_pair(TREES)(_tree_prop)


def _tree_text_prop(tmp_dir, text):
    parses_or_input_error(T.load_tree, _write(tmp_dir, "tree.yaml", text))


test_tree_text, test_tree_text_slow = fuzz_pair(st.one_of(YAML_TEXT, st.binary(max_size=100)), 100)(_tree_text_prop)


@pytest.mark.parametrize(
    "data, msg",
    [
        (
            {"random": {"depth": 2, "reward_mean": [-1e308, 1e308]}},
            "at most 1e+150 in magnitude",
        ),  # OverflowError (numpy)
        ({"random": {"depth": 2, "noise_scale": 10**400}}, "at most 1e+150 in magnitude"),  # OverflowError: float(int)
        (
            {"root": [{"mean": 1e308}, {"mean": 1e308, "next": [{"p": 1, "node": [{"mean": 1e308}]}]}]},
            "at most 1e+150 in magnitude",
        ),  # parsed, with Q* = inf
        (
            {"random": {"depth": 1, "branching": 10**8, "chance": 1}},
            "outcome entries (> 2e+07)",
        ),  # 1e8 actions allocated
    ],
)
def test_tree_regressions(data, msg):
    with pytest.raises(InputError) as e:
        T.from_dict(data, "tree.yaml")
    assert msg in one_line(e.value)


def test_tree_huge_depth_is_refused_at_once():
    """``depth: 1e12`` summed 10**12 powers before the size check (a hang); now counted up to the limit."""
    import time

    t0 = time.perf_counter()
    for b, c in ((1, 1), (2, 1), (3, 4)):
        with pytest.raises(InputError, match="has more than 2000000 nodes"):
            T.from_dict({"random": {"depth": 10**12, "branching": b, "chance": c}}, "tree.yaml")
    assert time.perf_counter() - t0 < 2.0


# --- MDP files and built-in specs ------------------------------------------------------------------
def _matrix(shape_s, shape_a):
    cell = st.one_of(st.floats(0, 1), NUMBERS, st.just("x"))
    return st.lists(
        st.lists(st.lists(cell, min_size=shape_s, max_size=shape_s), min_size=shape_a, max_size=shape_a),
        min_size=shape_s,
        max_size=shape_s,
    )


@st.composite
def mdp_mappings(draw):
    S, A = draw(st.integers(1, 3)), draw(st.integers(1, 2))
    d = {
        "P": draw(st.one_of(_matrix(S, A), VALUES)),
        "R": draw(st.one_of(st.lists(st.lists(NUMBERS, min_size=A, max_size=A), min_size=S, max_size=S), VALUES)),
    }
    for k in draw(
        st.lists(st.sampled_from(["noise", "gamma", "rho", "start", "name", "extra"]), max_size=3, unique=True)
    ):
        d[k] = draw(st.one_of(NUMBERS, st.lists(NUMBERS, max_size=4), VALUES))
    if draw(st.booleans()):  # a valid distribution now and then, so that the later checks run
        d["P"] = [[[1.0 / S] * S for _ in range(A)] for _ in range(S)]
    return d


def _mdp_prop(tmp_dir, d):
    import yaml

    try:
        text = yaml.safe_dump(d, allow_unicode=True)
    except (yaml.YAMLError, UnicodeError):
        return
    parses_or_input_error(M.load_mdp, str(_write(tmp_dir, "m.yaml", text)))


test_mdp_file, test_mdp_file_slow = fuzz_pair(mdp_mappings())(_mdp_prop)


def _mdp_text_prop(tmp_dir, text):
    parses_or_input_error(M.load_mdp, str(_write(tmp_dir, "m.yaml", text)))


test_mdp_text, test_mdp_text_slow = fuzz_pair(st.one_of(YAML_TEXT, st.binary(max_size=100)), 100)(_mdp_text_prop)


NPZ_ARRAYS = st.one_of(
    st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=8).map(np.array),
    st.lists(st.text(max_size=3), max_size=3).map(np.array),
    st.sampled_from(
        [
            np.ones((2, 2, 2)) / 2,
            np.zeros((2, 2)),
            np.array(0.9),
            np.array("abc"),
            np.array([0.9, 0.1]),
            np.ones((1, 1, 1)),
            np.array([[1.0]]),
            np.array(b"xy"),
        ]
    ),
)


def _mdp_npz_prop(tmp_dir, arrays):
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    parses_or_input_error(M.load_mdp, str(_write(tmp_dir, "m.npz", buf.getvalue())))


test_mdp_npz, test_mdp_npz_slow = fuzz_pair(
    st.dictionaries(st.sampled_from(["P", "R", "noise", "rho", "gamma", "name", "x"]), NPZ_ARRAYS, max_size=6), 100
)(_mdp_npz_prop)


def _query(keys):
    pair = st.tuples(
        st.one_of(st.sampled_from(keys), st.text(max_size=4)), st.one_of(YAML_TEXT, NASTY_TEXT, st.text(max_size=8))
    )
    return st.lists(pair, max_size=3).map(lambda kv: "&".join(f"{k}={v}" for k, v in kv))


def _builtin_prop(args):
    name, q = args
    parses_or_input_error(M.load_mdp, f"{name}?{q}")


test_mdp_builtin_options, test_mdp_builtin_options_slow = fuzz_pair(
    st.tuples(
        st.sampled_from(["riverswim", "garnet", "Garnet ", "nosuch"]),
        _query(["states", "actions", "branching", "noise", "gamma", "seed"]),
    ),
    100,
)(_builtin_prop)


@pytest.mark.parametrize(
    "text, msg",
    [
        ("P: [[[1]]]\nR: [[0]]\nstart: .inf\n", "start must be a state index"),  # OverflowError: int(inf)
        ("P: [[[1]]]\nR: [[0]]\nrho: [.nan]\n", "rho must be a probability vector"),  # NaN start distribution parsed
        ("P: [[[1]]]\nR: [[1e300]]\n", "R must be at most 1e+150 in magnitude"),  # values R / (1 - gamma) overflow
        ("P: [[[1]]]\nR: [[0]]\nnoise: 1e300\n", "at most 1e+150"),
    ],
)
def test_mdp_file_regressions(tmp_dir, text, msg):
    with pytest.raises(InputError) as e:
        M.load_mdp(str(_write(tmp_dir, "m.yaml", text)))
    assert msg in one_line(e.value)


@pytest.mark.parametrize(
    "arrays, msg",
    [
        (dict(P=np.ones((1, 1, 1)), R=np.zeros((1, 1)), gamma=np.array("abc")), "gamma must be a number"),  # ValueError
        (dict(P=np.ones((1, 1, 1)), R=np.zeros((1, 1)), name=np.array(["a", "b"])), None),  # ambiguous truth value
        (dict(P=np.ones((1, 1, 1)), R=np.zeros((1, 1)), rho=np.array(["x"])), "rho must be a probability vector"),
    ],
)
def test_mdp_npz_regressions(tmp_dir, arrays, msg):
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    p = str(_write(tmp_dir, "m.npz", buf.getvalue()))
    if msg is None:
        assert M.load_mdp(p).name == "['a', 'b']"
        return
    with pytest.raises(InputError) as e:
        M.load_mdp(p)
    assert msg in one_line(e.value)


def test_mdp_start_with_aliased_huge_P_is_refused_before_allocating(tmp_dir):
    """``start`` built np.eye(S) (S x S floats) and P was converted before its size was
    checked: a small file of YAML aliases asked for gigabytes."""
    n = 40_000
    text = "P: &s [&a [&r [1]]" + ", *a" * (n - 1) + "]\nR: [[0]]\nstart: 3\n"
    with pytest.raises(InputError) as e:
        M.load_mdp(str(_write(tmp_dir, "m.yaml", text)))
    assert "transition entries" in one_line(e.value)


@pytest.mark.parametrize("spec", ["garnet?seed=2020-99-99", "riverswim?states=" + "[" * 600])
def test_mdp_builtin_option_regressions(spec):
    with pytest.raises(InputError) as e:
        M.load_mdp(spec)
    assert "must be an integer" in one_line(e.value)


# --- gymnasium ?key=value options -------------------------------------------------------------------
def _need_gym():
    from tests.conftest import need_module

    need_module("gymnasium", "pip install gymnasium")


def _gym_prop(q):
    _need_gym()
    parses_or_input_error(G.make_problem, f"FrozenLake-v1?{q}", horizon=3, gamma=0.9)


test_gym_options, test_gym_options_slow = fuzz_pair(
    _query(["map_name", "is_slippery", "success_rate", "reward_schedule", "desc", "render_mode"]), 60
)(_gym_prop)


def _split_prop(q):
    raw = parses_or_input_error(G.split_query, q, "X-v0?" + q)
    if raw is not None:
        kw = G.typed_kwargs(raw)
        parses_or_input_error(G.check_bool_kwargs, kw, set(kw), "X-v0", raw)
        parses_or_input_error(G.check_number_kwargs, kw, set(kw), "X-v0", raw)


test_gym_query_parsing, test_gym_query_parsing_slow = fuzz_pair(
    st.one_of(
        _query(["a", "b"]),
        st.text(max_size=30),
        st.lists(st.sampled_from(["&", "=", "a", "?", "[", "2020-99-99"]), max_size=10).map("".join),
    )
)(_split_prop)


@pytest.mark.parametrize(
    "q, msg",
    [
        ("reward_schedule=[1,0,0]", "transition table is not made of"),  # ValueError: float('[') in check_table
        ("map_name=2020-99-99", "gymnasium cannot make"),  # ValueError from the YAML date
        ("is_slippery=" + "[" * 600, "option is_slippery takes true/false/1/0"),  # RecursionError
        ("0\n0=", "option name '0\\n0' is not a keyword name"),  # a key with a newline printed raw split the message
        ("0\r0=", "option name '0\\r0' is not a keyword name"),
    ],
)
def test_gym_option_regressions(q, msg):
    _need_gym()
    with pytest.raises(InputError) as e:
        G.make_problem(f"FrozenLake-v1?{q}", horizon=3, gamma=0.9)
    assert msg in one_line(e.value)


@pytest.mark.parametrize(
    "text",
    [
        "P: [[[1e1000000]]]\nR: [[0]]\n".replace("1e1000000", "1" + "0" * 400),
        "P: [[[1]]]\nR: [[" + "1" + "0" * 400 + "]]\n",
        "P: [[[1]]]\nR: [[0]]\nnoise: " + "1" + "0" * 400 + "\n",
        "P: [[[1]]]\nR: [[0]]\nrho: [" + "1" + "0" * 400 + "]\n",
    ],
)
def test_mdp_integer_beyond_float_range(tmp_dir, text):
    """np.asarray(10**400, float64) raised OverflowError (found by the slow profile)."""
    with pytest.raises(InputError) as e:
        M.load_mdp(str(_write(tmp_dir, "m.yaml", text)))
    one_line(e.value)


def test_bandit_integer_beyond_float_range(tmp_dir):
    """float(10**400) raised OverflowError in the arm's number check."""
    env = {"arms": [{"dist": "gaussian", "mean": 10**400, "std": 1}, {"dist": "bernoulli", "p": 0.5}]}
    with pytest.raises(InputError) as e:
        B.parse_env(env, tmp_dir, source="env.yaml")
    assert "field 'mean' must be finite and at most 1e150 in magnitude" in one_line(e.value)
