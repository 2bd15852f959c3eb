"""Data-parallel training under ``torchrun`` (gloo on CPU, NCCL on request), shared by the
training commands (``train-lfm``, ``muse train``, ``icr train``).

``setup()`` joins the process group when ``WORLD_SIZE > 1`` and returns a ``Dist``; in one process
it returns ``Dist()`` (rank 0 of 1) and imports nothing. Every rank draws the same global batch
(from a generator seeded by the step) and trains on its slice ``Dist.shard(batch)``; DDP averages
the gradients, so with equal slices a W-process run computes the single-process gradient up to
the order of the float reductions. Rank 0 alone writes records and checkpoints
(``drain_unless_main`` in the command layer).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterable


@dataclass
class Dist:
    """The rank and world size of this process (``rank`` in [0, world))."""

    rank: int = 0
    world: int = 1

    @property
    def main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.world > 1:
            import torch.distributed

            torch.distributed.barrier()

    def mean(self, x: float) -> float:
        """The mean of a Python float over the ranks (float64 all-reduce)."""
        if self.world == 1:
            return x
        import torch

        t = torch.tensor([x], dtype=torch.float64)
        torch.distributed.all_reduce(t)
        return float(t) / self.world

    def bounds(self, n: int) -> tuple[int, int]:
        """Rows [lo, hi) of a global batch of ``n`` rows that this rank trains on.

        Raises ValueError when ``n`` is not a multiple of the world size (unequal slices would
        weight the ranks' rows differently in the averaged gradient)."""
        if n % self.world:
            raise ValueError(
                f"a global batch of {n} rows does not split over {self.world} processes; "
                f"use a batch size that is a multiple of {self.world}"
            )
        k = n // self.world
        return self.rank * k, (self.rank + 1) * k

    def shard(self, *tensors):
        """This rank's rows of each tensor (batch dimension first); one tensor in, one out."""
        lo, hi = self.bounds(len(tensors[0]))
        out = tuple(t[lo:hi] for t in tensors)
        return out[0] if len(out) == 1 else out

    def wrap(self, model):
        """``model`` in DistributedDataParallel when world > 1, else ``model`` itself."""
        if self.world == 1:
            return model
        from torch.nn.parallel import DistributedDataParallel as DDP

        return DDP(model)


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def is_main() -> bool:
    """True in a single process and on rank 0 under torchrun (read from the environment)."""
    return int(os.environ.get("RANK", "0")) == 0


def setup() -> Dist:
    """Join the process group when launched by torchrun (WORLD_SIZE > 1), once; gloo on CPU,
    NCCL when CUDA is available and ``ICML26_NCCL`` is set."""
    if world_size() <= 1:
        return Dist()
    import torch
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group("nccl" if torch.cuda.is_available() and os.environ.get("ICML26_NCCL") else "gloo")
    return Dist(dist.get_rank(), dist.get_world_size())


def drain_unless_main(records: Iterable) -> bool:
    """On ranks other than 0, run ``records`` to the end silently and return True (the caller
    returns); on rank 0 return False without touching it (the caller streams it)."""
    if is_main():
        return False
    for _ in records:
        pass
    return True
