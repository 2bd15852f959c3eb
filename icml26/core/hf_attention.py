"""What a transformers model's attention does beyond plain causal softmax attention.

Methods that replace or compress attention (muse's drop-in, evict-kv's caches, presses run
through kvpress) read a model's config with :func:`attention_features` and either handle each
feature or refuse / fall back with :func:`describe`. Torch and transformers are not imported.

Features read (transformers' config names):
- ``sliding_window``: local attention over the last W tokens (Mistral, Qwen2 with
  ``use_sliding_window``, Gemma 2 / 3 on the layers whose ``layer_types`` say
  ``sliding_attention``, Phi-3). Active only when W is shorter than the context.
- ``attn_logit_softcapping``: tanh capping of attention logits (Gemma 2).
"""

from __future__ import annotations

from typing import Any


def _get(config: Any, name: str, default: Any = None) -> Any:
    if isinstance(config, dict):
        return config.get(name, default)
    return getattr(config, name, default)


def sliding_window_layers(config: Any) -> tuple[int | None, list[int]]:
    """``(window, layers)``: the sliding window in tokens and the layer indices that use it;
    ``(None, [])`` when the model attends to its whole past in every layer."""
    w = _get(config, "sliding_window")
    if w is None or isinstance(w, bool) or int(w) <= 0:
        return None, []
    if _get(config, "use_sliding_window", True) is False:  # Qwen2 / Qwen2.5 ship it off
        return None, []
    n = int(_get(config, "num_hidden_layers", 0) or 0)
    types = _get(config, "layer_types")
    if types:
        layers = [i for i, t in enumerate(types) if str(t) == "sliding_attention"]
    else:
        layers = list(range(n))
        mwl = _get(config, "max_window_layers")
        if mwl is not None and _get(config, "model_type") in ("qwen2", "qwen2_moe"):
            layers = [i for i in layers if i >= int(mwl)]  # Qwen2: layers below max_window_layers are full
    return (int(w), layers) if layers else (None, [])


def attention_features(config: Any, context_tokens: int | None = None) -> dict:
    """The non-plain attention features of ``config`` that matter at ``context_tokens``.

    Returns a dict (empty for plain causal attention): ``sliding_window`` (tokens) and
    ``sliding_window_layers`` when a window shorter than the context is in use (any window when
    ``context_tokens`` is None); ``attn_logit_softcapping`` (the cap) when set."""
    out: dict = {}
    w, layers = sliding_window_layers(config)
    if w is not None and (context_tokens is None or w < int(context_tokens)):
        out["sliding_window"] = w
        out["sliding_window_layers"] = layers
    cap = _get(config, "attn_logit_softcapping")
    if cap is not None and float(cap) > 0:
        out["attn_logit_softcapping"] = float(cap)
    return out


def describe(features: dict) -> str:
    """One phrase naming the features, for warnings and refusals
    (``"sliding_window=4096 (32 layers), attn_logit_softcapping=50.0"``)."""
    parts = []
    if "sliding_window" in features:
        parts.append(f"sliding_window={features['sliding_window']} ({len(features['sliding_window_layers'])} layers)")
    if "attn_logit_softcapping" in features:
        parts.append(f"attn_logit_softcapping={features['attn_logit_softcapping']}")
    return ", ".join(parts)
