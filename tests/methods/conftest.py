"""Fixtures shared by the tests of tests/methods/."""

import pytest


@pytest.fixture(scope="module")
def kernel():
    """The mcts_table C++ kernel module (icml26/ops/mcts_table.py); skip (CI: a failure, as every
    skip) when it does not build here."""
    from icml26.ops import mcts_table as T

    if not T.available():
        pytest.skip("the mcts_table C++ kernel does not build here")
    return T
