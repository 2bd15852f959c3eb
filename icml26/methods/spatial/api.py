"""What the geo-fusion command calls in this package (commands/geo_fusion.py): make-bench,
train and score.

Every method package has an ``api`` module: the one door a command file goes through (beside
the package's torch-free config module). tests/test_house.py checks it. ``load_splits`` and
``run`` (training) load torch on first call: make-bench and score stay light.
"""

from icml26.methods.spatial.bench import BenchConfig, build, check_out, read_questions
from icml26.methods.spatial.scoring import read_predictions, score

__all__ = ["BenchConfig", "build", "check_out", "load_splits", "read_predictions", "read_questions", "run", "score"]


def load_splits(*args, **kwargs):
    """:func:`experiment.load_splits` (torch loads here, so make-bench and score stay light)."""
    from icml26.methods.spatial.experiment import load_splits

    return load_splits(*args, **kwargs)


def run(*args, **kwargs):
    """:func:`experiment.run`: the geo-fusion training and evaluation records."""
    from icml26.methods.spatial.experiment import run

    return run(*args, **kwargs)
