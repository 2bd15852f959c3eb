"""What the quantize command calls in this package (commands/quantize.py): the run, and the
readers of a folder that a run saved (packed weights, compressed-tensors export).

Every method package has an ``api`` module: the one door a command file goes through (beside
the package's torch-free config module). tests/test_house.py checks it.
"""

from icml26.methods.quantization.export import is_export_folder
from icml26.methods.quantization.fptquant import LONG_RUN_S, run, run_packed
from icml26.methods.quantization.pack import is_packed_folder

__all__ = ["LONG_RUN_S", "is_export_folder", "is_packed_folder", "run", "run_packed"]
