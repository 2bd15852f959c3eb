"""What the sng command calls in this package (commands/sng.py).

Every method package has an ``api`` module: the one door a command file goes through (beside
the package's torch-free config module). tests/test_house.py checks it.
"""

from icml26.methods.pinn.train import plot, run

__all__ = ["plot", "run"]
