"""What the mamoe command calls in this package (commands/mamoe.py): data preparation,
training and evaluation.

Every method package has an ``api`` module: the one door a command file goes through (beside
the package's torch-free config module). tests/test_house.py checks it.
"""

from icml26.methods.speech.prepare import default_data_dir, prepare, validate_prepare
from icml26.methods.speech.train import config_from_run, run, validate

__all__ = ["config_from_run", "default_data_dir", "prepare", "run", "validate", "validate_prepare"]
