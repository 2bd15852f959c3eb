"""What the modality-pairing command calls in this package (commands/modality_pairing.py).

Every method package has an ``api`` module: the one door a command file goes through (beside
the package's torch-free config module). tests/test_house.py checks it.
"""

from icml26.methods.multimodal.train import load, run, validate

__all__ = ["load", "run", "validate"]
