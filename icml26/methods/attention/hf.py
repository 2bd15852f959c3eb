"""MuSe as a transformers attention implementation (``attn_implementation="muse"``).

    from icml26.methods.attention import hf, muse
    hf.register(muse.MuseSettings(block_tokens=256))
    model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="muse")

``register`` adds ``"muse"`` to ``AttentionInterface`` (the forward below) and to
``AttentionMaskInterface`` (transformers' own SDPA mask builder, which returns ``None`` for a
plain causal batch). The forward runs MuSe (or the variant in the
settings; ``sdpa`` is also accepted) on a causal prefill without padding and with at least two
blocks; otherwise (decode steps of ``model.generate`` over the KV cache, a padded batch, a
prompt shorter than 2 blocks) it falls back to exact SDPA attention. Layers MuSe cannot compute
fall back too, never silently: a ``sliding_window`` shorter than the call (Mistral, Gemma 2 / 3
local layers) runs exact SDPA with the model's sliding-window mask, attention logit softcapping
(Gemma 2) runs exact softcapped attention here; ``check_model`` names them before a run
(core/hf_attention.py) and ``counters()`` counts every fallback by reason. ``settings(...)``
changes the settings for a ``with`` block. The forward returns (out (B, T, H, D), None).
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from dataclasses import replace

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from icml26.core.hf_attention import attention_features, describe
from icml26.methods.attention import muse as M
from icml26.ops import muse as kernel

_SETTINGS: dict = {"settings": M.MuseSettings(), "method": "muse", "calls": 0, "fallbacks": 0, "reasons": {}}


def _fallback(reason: str) -> None:
    _SETTINGS["fallbacks"] += 1
    _SETTINGS["reasons"][reason] = _SETTINGS["reasons"].get(reason, 0) + 1


def _window_mask(t: int, sk: int, window: int, device):
    """(1, 1, T, S) bool: causal and within the last ``window`` keys (transformers' sliding window)."""
    qi = torch.arange(sk - t, sk, device=device)[:, None]
    kj = torch.arange(sk, device=device)[None, :]
    return ((kj <= qi) & (qi - kj < window))[None, None]


def _softcapped(query, key, value, attention_mask, scaling, softcap, sliding_window):
    """Exact causal attention with tanh logit capping (Gemma 2's eager form): (B, T, H, D)."""
    h, hk = query.shape[1], key.shape[1]
    k = key.repeat_interleave(h // hk, 1)
    v = value.repeat_interleave(h // hk, 1)
    t, sk = query.shape[2], key.shape[2]
    sc = (query @ k.transpose(-1, -2)) * (scaling if scaling is not None else query.shape[-1] ** -0.5)
    sc = torch.tanh(sc / softcap) * softcap
    if attention_mask is not None:
        m = attention_mask[:, :, :, :sk]
        sc = sc.masked_fill(~m, float("-inf")) if m.dtype == torch.bool else sc + m
    else:
        sc = sc.masked_fill(~_window_mask(t, sk, sliding_window or sk, query.device), float("-inf"))
    out = torch.softmax(sc.float(), -1).to(value.dtype) @ v
    return out.transpose(1, 2).contiguous(), None


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
    s = _SETTINGS["settings"]
    method = _SETTINGS["method"]
    t, sk = query.shape[2], key.shape[2]
    softcap = kwargs.get("softcap")
    window = kwargs.get("sliding_window")
    if softcap:  # MuSe has no softcapped form: exact softcapped attention, not SDPA (which drops it)
        _fallback("attn_logit_softcapping")
        return _softcapped(query, key, value, attention_mask, scaling, float(softcap), window)
    reason = (
        "method sdpa"
        if method == "sdpa"
        else "sliding_window"
        if window and window < sk
        else "attention mask (padding)"
        if attention_mask is not None
        else "decode (kv cache)"
        if t != sk
        else "shorter than 2 blocks"
        if t < 2 * s.block_tokens
        else "attention dropout"
        if (dropout and module.training)
        else None
    )
    if reason is not None:
        _fallback(reason)
        if reason == "sliding_window" and attention_mask is None:  # never the full causal window
            attention_mask = _window_mask(t, sk, window, query.device)
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, is_causal=is_causal, **kwargs
        )
    _SETTINGS["calls"] += 1
    out = kernel.attention(query, key, value, replace(s, variant=method), scale=scaling)
    return out.transpose(1, 2).contiguous(), None


def register(settings: M.MuseSettings | None = None, method: str | None = None) -> None:
    """Register ``"muse"`` with transformers (idempotent) and set the settings it uses."""
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
    """How many attention calls ran MuSe vs fell back to exact attention since the process started,
    and the fallbacks by reason."""
    return {"calls": _SETTINGS["calls"], "fallbacks": _SETTINGS["fallbacks"], "reasons": dict(_SETTINGS["reasons"])}


def check_model(config, context_tokens: int, *, warn: bool = True) -> dict:
    """What of a model's attention MuSe cannot compute at ``context_tokens`` (core/hf_attention.py):
    {} for plain causal attention, else ``attention_features`` (the setting, by name),
    ``fallback`` (what runs instead), ``muse_layers`` / ``exact_layers`` (how many layers run MuSe
    or the fallback). With ``warn``, one stderr line before the run."""
    f = attention_features(config, context_tokens)
    if not f:
        return {}
    n = int(getattr(config, "num_hidden_layers", 0) or 0)
    exact = set(range(n)) if "attn_logit_softcapping" in f else set(f.get("sliding_window_layers", []))
    fb = []
    if "sliding_window" in f:
        fb.append("sliding-window layers: exact SDPA with the model's sliding-window mask")
    if "attn_logit_softcapping" in f:
        fb.append("softcapped layers: exact attention with the softcap")
    rec = {
        "attention_features": describe(f),
        "fallback": "; ".join(fb),
        "muse_layers": n - len(exact),
        "exact_layers": len(exact),
    }
    if warn:
        print(
            f"muse: warning: this model has {rec['attention_features']} at {context_tokens} tokens; MuSe has no form "
            f"for it, so {rec['exact_layers']} of {n} layers run exact attention ({rec['fallback']}); "
            f"MuSe figures cover the other {rec['muse_layers']} layers only",
            file=sys.stderr,
        )
    return rec
