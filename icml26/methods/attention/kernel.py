"""The C++ MuSe kernel's public face (``icml26.ops.muse``), re-exported for the method's callers."""

from icml26.ops.muse import (  # noqa: F401
    ISA,
    KERNEL_VARIANTS,
    MuseFunction,
    attention,
    backend,
    backend_for,
    exact_pairs,
    exact_pairs_shape,
    isa,
)
