"""What the train-lfm and sample-lfm commands call in this package: one namespace per command
(``train``, ``sample``); their settings are the torch-free ``config`` and ``sample_config``.

Every method package has an ``api`` module: the one door a command file goes through (beside
the package's torch-free config module). tests/test_house.py checks it.
"""

from icml26.methods.lfm import sample, train

__all__ = ["sample", "train"]
