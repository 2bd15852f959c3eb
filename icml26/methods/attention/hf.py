"""MuSe as a transformers attention implementation (``attn_implementation="muse"``).

    from icml26.methods.attention import hf, muse
    hf.register(muse.MuseSettings(block_tokens=256))
    model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="muse")

``register`` adds ``"muse"`` to ``AttentionInterface`` (the forward below) and to
``AttentionMaskInterface`` (transformers' own SDPA mask builder, which returns ``None`` for a
plain causal batch, shared/methods/muse.md step 7). The forward runs MuSe (or the variant in the
settings; ``sdpa`` is also accepted) on a causal prefill without padding and with at least two
blocks; otherwise (decode steps of ``model.generate`` over the KV cache, a padded batch, a
prompt shorter than 2 blocks) it falls back to exact SDPA attention. ``settings(...)`` changes
the settings for a ``with`` block. The forward returns (out (B, T, H, D), None).
"""

from __future__ import annotations

from contextlib import contextmanager

from icml26.methods.attention import muse as M

_SETTINGS: dict = {"settings": M.MuseSettings(), "method": "muse", "calls": 0, "fallbacks": 0}


def muse_attention_forward(
    module,
    query,
    key,
    value,
    attention_mask,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs,
):
    """transformers attention function: query (B, H, T, D), key / value (B, Hkv, S, D)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    s = _SETTINGS["settings"]
    method = _SETTINGS["method"]
    t, sk = query.shape[2], key.shape[2]
    if (
        method == "sdpa"
        or attention_mask is not None
        or t != sk
        or t < 2 * s.block_tokens
        or (dropout and module.training)
    ):
        _SETTINGS["fallbacks"] += 1
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, is_causal=is_causal, **kwargs
        )
    _SETTINGS["calls"] += 1
    from dataclasses import replace

    from icml26.methods.attention import kernel

    out = kernel.attention(query, key, value, replace(s, variant=method), scale=scaling)
    return out.transpose(1, 2).contiguous(), None


def register(settings: M.MuseSettings | None = None, method: str | None = None) -> None:
    """Register ``"muse"`` with transformers (idempotent) and set the settings it uses."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register("muse", muse_attention_forward)
    AttentionMaskInterface.register("muse", sdpa_mask)
    if settings is not None:
        _SETTINGS["settings"] = settings
        _SETTINGS["method"] = settings.variant
    if method is not None:
        _SETTINGS["method"] = method


@contextmanager
def settings(s: M.MuseSettings, method: str | None = None):
    """Use settings ``s`` (and ``method``: a variant or ``sdpa``) inside a ``with`` block."""
    old = dict(_SETTINGS)
    register(s, method or s.variant)
    try:
        yield
    finally:
        _SETTINGS.update(settings=old["settings"], method=old["method"])


def counters() -> dict:
    """How many attention calls ran MuSe vs fell back to SDPA since the process started."""
    return {"calls": _SETTINGS["calls"], "fallbacks": _SETTINGS["fallbacks"]}
