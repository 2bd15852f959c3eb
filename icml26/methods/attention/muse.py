"""MuSe (Mitchell & Kersting, arXiv 2509.10406; ICML 2026) as a library: the settings, the
variants and the causal attention function. The implementation lives with the other kernels in
``icml26.ops.muse`` (the C++ kernel's wrapper, which re-exports its torch twin's public names);
this module re-exports the twin's names from there."""

from icml26.ops.muse import (  # noqa: F401
    VARIANTS,
    MuseSettings,
    Plan,
    balanced_order,
    exact_pairs_shape,
    make_plan,
    muse_attention,
    sdpa,
    sparsity,
)
from icml26.ops.muse import ref_attention as attention  # noqa: F401
