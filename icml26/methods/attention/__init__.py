"""Approximate causal attention: MuSe (ICML 2026, arXiv 2509.10406) beside exact SDPA and a
MoBA-style spatial-block baseline, as a library and a transformers attention implementation.

    from icml26.methods.attention import muse
    out = muse.muse_attention(q, k, v, muse.MuseSettings(block_tokens=256))
    from icml26.methods.attention.hf import register
    register(muse.MuseSettings())       # then from_pretrained(..., attn_implementation="muse")

Modules: ``muse`` (the method's public names: settings, variants, the attention function; the
C++ kernel and its torch twin live in ``icml26.ops.muse`` / ``icml26.ops._ref.muse``), ``hf`` (the
transformers registration), ``config`` (the torch-free settings), ``harness`` (the command's entry
points, re-exported from ``config``, ``data``, ``bench``, ``evaluate`` and ``train``).
"""
