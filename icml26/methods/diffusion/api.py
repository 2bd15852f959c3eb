"""What the icr command calls in this package: one namespace per subcommand (``analyze``,
``train``, ``report``).

Every method package has an ``api`` module: the one door a command file goes through (beside
the package's torch-free config module). tests/test_house.py checks it.
"""

from icml26.methods.diffusion import analyze, report, train

__all__ = ["analyze", "report", "train"]
