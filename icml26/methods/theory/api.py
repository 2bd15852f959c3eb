"""What the jacobian-spectrum and equivariance commands call in this package: one namespace
per command (``spectrum``, ``equivariance``).

Every method package has an ``api`` module: the one door a command file goes through (beside
the package's torch-free config modules). tests/test_house.py checks it.
"""

from icml26.methods.theory import equivariance, spectrum

__all__ = ["equivariance", "spectrum"]
