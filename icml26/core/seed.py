"""Seeding of every random source the toolkit uses."""

from __future__ import annotations

import os
import random


def seed_everything(seed: int, *, deterministic: bool = False) -> None:
    """Seed Python, NumPy and (if imported or importable) torch.

    seed: non-negative int. deterministic: also ask torch for deterministic kernels.
    Raises ValueError for a negative seed."""
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    random.seed(seed)
    os.environ.setdefault("PYTHONHASHSEED", str(seed))
    import numpy as np

    np.random.seed(seed % (2**32))
    try:
        import torch
    except ImportError:  # pragma: no cover
        return
    torch.manual_seed(seed)
    if deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
