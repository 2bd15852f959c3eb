"""Head-adaptive budgets in a dense transformers cache: per-head masks over a padded cache.

With head-adaptive budgets (Ada-KV style) each KV head of a layer keeps a different number of
entries. A transformers ``DynamicCache`` holds one (B, Hkv, T, D) tensor per layer, so the
layer is stored padded to its largest head, and the padding slots are masked out of attention:

    keep: (B, Hkv, T0) bool, True = a real kept entry, False = padding (never attended)

The mask lives on the attention module (``module._icml26_keep``) and covers the first T0
positions of the layer's cache (the compressed prompt); tokens appended later are attended
normally. ``masked_attention`` is installed in transformers' attention registry in place of
the model's implementation while ``head_masks(model)`` is active, and falls through to the
original function for any layer without a mask, so a uniform-budget cache is unaffected.

Memory: the padded tensor is what this dense layout holds (``held_bytes``); a per-head
variable-length layout (Ada-KV's flattened cache, paged attention) holds only the kept entries
(``kept_bytes``). Both are reported by the harness.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Iterator

import torch
import torch.nn.functional as F

_ATTR = "_icml26_keep"


def _impl_name(model) -> str:
    name = getattr(model.config, "_attn_implementation", None) or "sdpa"
    return name


def masked_attention(original):
    """Wrap a transformers attention function so that ``module._icml26_keep`` masks padding."""

    def forward(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None, **kwargs):
        keep = getattr(module, _ATTR, None)
        if keep is None:
            return original(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
        b, hq, tq, d = query.shape
        hkv, tk = key.shape[1], key.shape[2]
        g = hq // hkv
        t0 = min(keep.shape[-1], tk)
        bias = torch.zeros(b, hkv, 1, tk, dtype=query.dtype, device=query.device)
        bias[..., :t0] = torch.where(keep[..., :t0], 0.0, float("-inf")).to(query.dtype).unsqueeze(2)
        bias = bias.repeat_interleave(g, dim=1)  # (B, Hq, 1, Tk), query head h reads KV head h // g
        if attention_mask is not None and attention_mask.shape[-1] == tk:
            m = attention_mask
            if m.dtype == torch.bool:
                m = torch.where(m, 0.0, float("-inf")).to(query.dtype)
            bias = bias + m
        elif tq > 1:  # causal: query i sits at key position tk - tq + i
            # (also when the model built its mask for another layer's length: padded layers differ in
            # length, and transformers sizes the mask from layer 0; compressed prompts carry no padding)
            i = torch.arange(tq, device=query.device)[:, None]
            j = torch.arange(tk, device=query.device)[None, :]
            bias = bias + torch.where(j > tk - tq + i, float("-inf"), 0.0).to(query.dtype)
        k = key.repeat_interleave(g, dim=1)
        v = value.repeat_interleave(g, dim=1)
        scale = scaling if scaling is not None else 1.0 / math.sqrt(d)
        out = F.scaled_dot_product_attention(query, k, v, attn_mask=bias, dropout_p=0.0, scale=scale)
        return out.transpose(1, 2).contiguous(), None

    forward._icml26_original = original
    return forward


@contextmanager
def head_masks(model) -> Iterator[None]:
    """Install ``masked_attention`` for the model's attention implementation; restore on exit.

    Layers whose module carries no ``_icml26_keep`` mask run the original function unchanged."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    from transformers.models.llama.modeling_llama import eager_attention_forward

    name = _impl_name(model)
    had_local = name in ALL_ATTENTION_FUNCTIONS._local_mapping
    prev_local = ALL_ATTENTION_FUNCTIONS._local_mapping.get(name)
    if had_local and hasattr(prev_local, "_icml26_original"):  # already installed (nested)
        yield
        return
    original = (
        ALL_ATTENTION_FUNCTIONS.get(name, eager_attention_forward) if name != "eager" else eager_attention_forward
    )
    ALL_ATTENTION_FUNCTIONS[name] = masked_attention(original)
    try:
        yield
    finally:
        if had_local:
            ALL_ATTENTION_FUNCTIONS[name] = prev_local
        else:
            del ALL_ATTENTION_FUNCTIONS[name]


def attention_modules(model) -> list:
    lm = model.model.language_model if hasattr(model.model, "language_model") else model.model
    return [layer.self_attn for layer in lm.layers]


def set_masks(model, masks: dict | None) -> None:
    """Put ``masks[layer_idx]`` (B, Hkv, T0) bool on each attention module (None clears)."""
    for i, m in enumerate(attention_modules(model)):
        keep = None if not masks else masks.get(i)
        if keep is None:
            if hasattr(m, _ATTR):
                delattr(m, _ATTR)
        else:
            setattr(m, _ATTR, keep)


@contextmanager
def cache_masks(model, cache) -> Iterator[None]:
    """Attend over ``cache`` honouring its head masks (``cache.icml26_keep``, if any)."""
    masks = getattr(cache, "icml26_keep", None)
    if not masks:
        yield
        return
    with head_masks(model):
        set_masks(model, masks)
        try:
            yield
        finally:
            set_masks(model, None)


def set_layer_mask(module, keep) -> None:
    """Set (or clear, keep=None) one attention module's padding mask."""
    if keep is None:
        if hasattr(module, _ATTR):
            delattr(module, _ATTR)
    else:
        setattr(module, _ATTR, keep)
