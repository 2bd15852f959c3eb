"""Shared pieces of the property-based fuzz tests of the hand-fed parsers.

The property everywhere: an input either parses or raises ``InputError`` whose message is
one non-empty line (what the CLI prints before exiting 2); any other exception is a bug.

Two settings profiles per target: ``FAST`` (a fixed, derandomized set of ~150 examples, so
``make test`` stays at seconds and never flakes) and ``SLOW`` (thousands of fresh random
examples, ``@pytest.mark.slow``, run by ``make test-slow``).
"""

from __future__ import annotations

import math
import string

import pytest

hypothesis = pytest.importorskip("hypothesis", reason="needs hypothesis: pip install -e '.[test]'")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from icml26.core.errors import InputError  # noqa: E402

_HC = [
    HealthCheck.too_slow,
    HealthCheck.filter_too_much,
    HealthCheck.data_too_large,
    HealthCheck.function_scoped_fixture,
]
FAST = settings(
    max_examples=150, deadline=None, derandomize=True, database=None, suppress_health_check=_HC, print_blob=True
)
SLOW = settings(max_examples=3000, deadline=None, database=None, suppress_health_check=_HC, print_blob=True)


def one_line(e: InputError) -> str:
    msg = str(e)
    assert msg.strip(), "an InputError with an empty message"
    assert "\n" not in msg and "\r" not in msg, f"a message of several lines: {msg!r}"
    return msg


def parses_or_input_error(fn, *args, **kwargs):
    """``fn(*args, **kwargs)``; None when it raised InputError (one line), else its result.
    Any other exception propagates, and hypothesis reports the input that raised it."""
    try:
        return fn(*args, **kwargs)
    except InputError as e:
        one_line(e)
        return None


def fuzz_pair(strategy, fast_examples: int = 150):
    """Decorator: ``test_x, test_x_slow = fuzz_pair(st...)(prop)``; the first runs in
    ``make test`` (FAST), the second only under ``-m slow`` (SLOW)."""

    def deco(prop):
        fast = settings(FAST, max_examples=fast_examples)(given(strategy)(prop))
        slow = pytest.mark.slow(settings(SLOW)(given(strategy)(prop)))
        return fast, slow

    return deco


# --- values as YAML/JSON would hold them ---------------------------------------------------
NASTY_FLOATS = st.sampled_from([math.inf, -math.inf, math.nan, 1e308, -1e308, 1e-320, 0.0, -0.0, 1e150, 1e151])
NASTY_INTS = st.sampled_from([0, -1, 1, 2, 2**31, 2**63, -(2**63), 10**30, 10**400, -(10**30)])
NASTY_TEXT = st.sampled_from(
    [
        "",
        " ",
        "inf",
        "-inf",
        "nan",
        ".inf",
        "1e400",
        "-1e400",
        "1e-400",
        "0x10",
        "1_000",
        "2020-99-99",
        "yes",
        "no",
        "on",
        "~",
        "null",
        "true",
        "\u00e9\u4e2d\U0001f600",
        "a\nb",
        "\x00",
        "\ud800",
        "x" * 300,
        "[1, 2",
        "{a: 1",
        "-",
        "'",
        '"',
        "1:30",
        "+.5",
        "0o7",
    ]
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-10, 10),
    NASTY_INTS,
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    NASTY_FLOATS,
    st.text(max_size=12),
    NASTY_TEXT,
)


def values(max_leaves: int = 12):
    """Nested lists/mappings of nasty scalars (mapping keys: text, ints, booleans, None)."""
    keys = st.one_of(st.text(max_size=8), st.integers(-3, 3), st.booleans(), st.none(), NASTY_TEXT)
    return st.recursive(
        SCALARS,
        lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=4)),
        max_leaves=max_leaves,
    )


def deep(open_: str, close: str, n: int) -> str:
    return open_ * n + close * n


# --- raw YAML-ish text ----------------------------------------------------------------------
YAML_FRAGMENTS = [
    "[",
    "]",
    "{",
    "}",
    ":",
    ": ",
    "- ",
    "\n",
    "  ",
    ", ",
    "!!float ",
    "!!int ",
    "!!binary ",
    "!!timestamp ",
    "!!str ",
    "!!map ",
    "!!seq ",
    "!!set ",
    "!!omap ",
    "!!python/object:os.system ",
    "!!python/name:os.system ",
    "2020-99-99",
    "2001-12-14t21:59:43.10-05:00",
    ".inf",
    "-.inf",
    ".nan",
    "1e400",
    "1e-2",
    "0x1F",
    "0o17",
    "1:30:00",
    "&a ",
    "*a",
    "*b",
    "<<: ",
    "? ",
    "---\n",
    "...\n",
    "'",
    '"',
    "# c\n",
    "%YAML 1.1\n",
    "%TAG ! tag:x\n",
    "|\n",
    ">\n",
    "\t",
    "~",
    "null",
    "true",
    "yes",
    "\u00e9",
    "\U0001f600",
    "\x85",
    "\ufeff",
    "10" * 30,
    "a",
    "b",
    "seed",
    "config",
    "method",
    "arms",
    "dist",
    "P",
    "R",
    "root",
    "random",
    "9" * 5000,
]
YAML_TEXT = st.one_of(
    st.lists(st.sampled_from(YAML_FRAGMENTS), max_size=30).map("".join),
    st.text(max_size=200),
    st.text(alphabet=string.printable, max_size=200),
    # nesting (the depths past Python's recursion limit are regression examples: PyYAML takes ~0.5 s there)
    st.integers(1, 60).map(lambda n: deep("[", "]", n)),
    st.integers(1, 60).map(lambda n: "{a: " * n + "1" + "}" * n),
    st.integers(1, 60).map(lambda n: "".join(f"{' ' * i}k{i}:\n" for i in range(n)) + " " * n + "v"),
)
