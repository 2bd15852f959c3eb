"""What the evict-kv command calls in this package (commands/evict_kv.py).

Every method package has an ``api`` module: the one door a command file goes through (beside
the package's torch-free config module). tests/test_house.py checks it.
"""

from icml26.methods.kvcache.evaluate import run, write_head_budgets

__all__ = ["run", "write_head_budgets"]
