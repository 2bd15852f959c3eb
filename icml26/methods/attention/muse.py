"""MuSe (Mitchell & Kersting, arXiv 2509.10406; ICML 2026) as a library: the settings, the
variants and the causal attention function. The implementation lives with the other kernels:
the torch twin in ``icml26/ops/_ref/muse.py``, the C++ kernel's wrapper in ``icml26/ops/muse.py``
(``icml26.methods.attention.kernel``); this module re-exports the twin's public names."""

from icml26.ops._ref.muse import (  # noqa: F401
    VARIANTS,
    MuseSettings,
    Plan,
    attention,
    balanced_order,
    exact_pairs_shape,
    make_plan,
    muse_attention,
    sdpa,
    sparsity,
)
