"""What the probe-syntax command calls in this package (commands/probe_syntax.py).

Every method package has an ``api`` module: the one door a command file goes through (beside
the package's torch-free config module). tests/test_house.py checks it.
"""

from icml26.methods.probing.syntax_semantics import COLUMNS, load_sentences, plot, run

__all__ = ["COLUMNS", "load_sentences", "plot", "run"]
