"""What the muse command calls in this package (commands/muse.py): the bench, eval and train runs.

Every method package has an ``api`` module: the one door a command file goes through (beside
the package's torch-free config module, here ``config``: the settings and ``preflight``).
"""

from icml26.methods.attention.bench import run_bench
from icml26.methods.attention.evaluate import run_eval
from icml26.methods.attention.train import run_train

__all__ = ["run_bench", "run_eval", "run_train"]
