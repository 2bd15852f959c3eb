"""The tiny random decoder models of the MuSe tests (one definition for test_muse_hf.py and
test_muse_causal.py): 2 layers, hidden 64, 4 query heads over 2 key/value heads (GQA), random
weights from ``seed``; ``overrides`` change the architecture's own config fields."""

from __future__ import annotations

import torch

TINY = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
)


def tiny_lm(arch: str, attn: str, *, vocab: int = 97, seed: int = 0, **overrides):
    """A random ``<arch>ForCausalLM`` (``arch``: Llama, Mistral, Qwen2, Gemma2...) with
    ``attn_implementation=attn``, in training mode as transformers builds it; the weights depend
    on ``seed`` and the config only (two calls with different ``attn`` share them)."""
    import transformers

    config = getattr(transformers, f"{arch}Config")(vocab_size=vocab, **{**TINY, **overrides})
    torch.manual_seed(seed)
    return getattr(transformers, f"{arch}ForCausalLM")._from_config(config, attn_implementation=attn)
