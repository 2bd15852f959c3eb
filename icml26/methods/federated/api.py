"""What the fed-lora command calls in this package (commands/fed_lora.py).

Every method package has an ``api`` module: the one door a command file goes through (beside
the package's torch-free config module). tests/test_house.py checks it.
"""

from icml26.methods.federated.harness import preflight, run

__all__ = ["preflight", "run"]
