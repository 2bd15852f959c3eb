"""What the dsac-aid and bfq commands call in this package: one namespace per command part
(``dsac_aid``: online training; ``offline_make``: bfq make-dataset; ``offline``: bfq train).

Every method package has an ``api`` module: the one door a command file goes through (beside
the package's torch-free config modules). tests/test_house.py checks it.
"""

from icml26.methods.rl import dsac_aid, offline, offline_make

__all__ = ["dsac_aid", "offline", "offline_make"]
