"""What the bai, mcts, bpi and prepare-data commands call in this package: one namespace per
command (``bai``, ``mcts``, ``bpi``; ``bandit_env`` for bandit files, ``traffic_bandit`` for
the bandit made of recorded traffic counts).

Every method package has an ``api`` module: the one door a command file goes through (beside
the package's torch-free config module). tests/test_house.py checks it.
"""

from icml26.methods.exploration import bai, bandit_env, bpi, mcts, traffic_bandit

__all__ = ["bai", "bandit_env", "bpi", "mcts", "traffic_bandit"]
