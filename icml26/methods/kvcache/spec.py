"""Method names of ``evict-kv`` and what each one ran (torch-free).

A method is a policy name, optionally with settings after ``@`` that make it a row of its own:
``snapkv@kernel_size=13`` is SnapKV pooled over 13 tokens, ``kvpress:SnapKVPress@kernel_size=13``
the same in kvpress. ``capkv`` is the paper's single-channel CapKV; ``capkv-qa`` adds our
question-aware retrieval channel (``question_share`` of the budget, 0.4 by default), so a filter
on ``method`` never mixes the two. ``method_settings`` names the settings a record's method ran
with (pooling width, window, shares; the kvpress press and version).
"""

from __future__ import annotations

from icml26.methods.kvcache.options import QUESTION_SHARE

METHODS = (
    "capkv",
    "capkv-qa",
    "capkv-greedy",
    "streaming",
    "snapkv",
    "h2o",
    "tova",
    "knorm",
    "random",
    "expected-attention",
)
DECODE_METHODS = ("capkv", "capkv-qa", "streaming", "snapkv", "tova", "knorm", "random", "expected-attention")
# h2o: during decoding only the recent queries are known, so its score is SnapKV's; capkv-greedy: prefill only
NOT_DECODING = ("capkv-greedy", "h2o")

_CAPKV = ("weight", "query_source", "gqa", "ridge_ratio", "ridge_absolute", "stat_tokens", "n_future_positions")
_CAPKV_EXTRAS = {  # ours, off by default: listed when a run turns them on
    "pool": "none",
    "recent_share": 0.0,
    "recent_mode": "fixed",
    "future_strata": 1,
    "past_mix": 0.0,
    "head_budget": "uniform",
}
_SETTINGS = {
    "capkv": _CAPKV,
    "capkv-greedy": _CAPKV,
    "capkv-qa": _CAPKV + ("question_share", "stat_window", "pool_kernel"),
    "snapkv": ("kernel_size",),
    "expected-attention": ("n_future_positions", "stat_tokens"),
}


def _value(text: str):
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def parse_method(spec: str) -> tuple[str, dict]:
    """``"snapkv@kernel_size=13"`` -> ``("snapkv", {"kernel_size": 13})``; ValueError when a
    setting is not ``key=value``."""
    base, *parts = str(spec).split("@")
    over: dict = {}
    for part in parts:
        key, eq, val = part.partition("=")
        if not eq or not key:
            raise ValueError(f"method {spec!r}: settings after @ are key=value (e.g. snapkv@kernel_size=13)")
        over[key.strip()] = _value(val.strip())
    return base.strip(), over


def check_method(spec: str, press_fields) -> None:
    """ValueError for an unknown policy or a setting that is not a press option."""
    base, over = parse_method(spec)
    if base.startswith("kvpress:"):
        return  # its settings are the press' own fields, checked when the press is built
    if base not in METHODS and base != "full":
        raise ValueError(f"methods: unknown {base!r}; valid: full, {', '.join(METHODS)}, kvpress:<PressClass>")
    bad = [k for k in over if k not in press_fields]
    if bad:
        raise ValueError(f"method {spec!r}: {bad[0]!r} is not a press option; valid: {', '.join(sorted(press_fields))}")
    if base == "capkv" and over.get("question_share") not in (None, 0, 0.0):
        raise ValueError(
            f"method {spec!r}: capkv is the paper's single-channel CapKV (question_share 0); "
            "the question-aware retrieval channel is its own method: capkv-qa"
        )


def press_kwargs(spec: str, common: dict) -> tuple[str, dict]:
    """(policy, KVPress keyword arguments) of a method spec on a run's press options ``common``:
    the spec's settings override the run's; ``question_share`` reaches capkv-qa only."""
    base, over = parse_method(spec)
    kw = {**common, **over}
    if base != "capkv-qa" and "question_share" not in over:
        kw["question_share"] = None
    return base, kw


def check_decode_methods(methods) -> None:
    """ValueError for a policy that has no decoding-time rule."""
    for m in methods:
        base = parse_method(m)[0]
        if base in NOT_DECODING:
            raise ValueError(
                f"method {m!r} has no decoding-time compression (mode decode: {', '.join(DECODE_METHODS)}, "
                "kvpress:DecodingPress/<ScorerPress>)"
            )
        if base.startswith("kvpress:") and not base.split(":", 1)[1].startswith("DecodingPress"):
            raise ValueError(f"method {m!r}: in mode decode the kvpress press is kvpress:DecodingPress/<ScorerPress>")


def method_settings(spec: str, common: dict, press=None) -> dict:
    """The settings that say what ``spec`` ran: ``policy``, the sinks and recent window every
    built-in policy keeps, the policy's own settings (CapKV's channel, capkv-qa's share and
    max-pool width, SnapKV's avg-pool width) and any of CapKV's extras turned on; for kvpress the
    press class, kvpress' version and the press' fields (``press``: the built kvpress press)."""
    base, kw = press_kwargs(spec, common)
    if base == "full":
        return {"policy": "full"}
    if base.startswith("kvpress:"):
        out = {"policy": base, "press": base.split(":", 1)[1], "kvpress_version": _kvpress_version()}
        if press is not None:
            import dataclasses

            if dataclasses.is_dataclass(press):
                for f in dataclasses.fields(press):
                    v = getattr(press, f.name, None)
                    if isinstance(v, (int, float, str, bool)) or v is None:
                        out[f.name] = v
                    elif dataclasses.is_dataclass(v):
                        out[f.name] = type(v).__name__
        out.update(parse_method(spec)[1])
        return out
    out = {"policy": base, "sink_tokens": kw.get("sink_tokens"), "window_tokens": kw.get("window_tokens")}
    for k in _SETTINGS.get(base, ()):
        out[k] = kw.get(k)
    if base == "capkv-qa":
        out["question_share"] = QUESTION_SHARE if kw.get("question_share") is None else kw["question_share"]
        out["retrieval_pool"] = "max"
    if base == "snapkv":
        out["pool"] = "avg"
    if base.startswith("capkv"):
        for k, default in _CAPKV_EXTRAS.items():
            if kw.get(k, default) != default:
                out[k] = kw[k]
        if out.get("pool", "none") != "none":
            out["pool_kernel"] = kw.get("pool_kernel")
    elif kw.get("head_budget", "uniform") != "uniform":
        out["head_budget"] = kw["head_budget"]
    return out


def _kvpress_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("kvpress")
    except Exception:  # noqa: BLE001 - not installed: no version to name
        return None


WINDOW_TRANSFORMERS = (5, 25)  # the first transformers tested to mask layers of different cache lengths right


def _transformers_version() -> tuple[int, int] | None:
    try:
        from importlib.metadata import version

        major, minor = version("transformers").split(".")[:2]
        return int(major), int("".join(c for c in minor if c.isdigit()) or 0)
    except Exception:  # noqa: BLE001 - not installed / unparsable: unknown
        return None


def _cfg_get(cfg, name, default=None):
    return cfg.get(name, default) if isinstance(cfg, dict) else getattr(cfg, name, default)


def _text(config):
    """A multimodal config's ``text_config`` (Gemma 3), else the config itself."""
    text = config.get("text_config") if isinstance(config, dict) else getattr(config, "text_config", None)
    return text if text is not None else config


def window_layers(config, tokens: int | None) -> tuple[int | None, list[int]]:
    """``(window, layers)``: the sliding-window layers that a policy leaves to the model's own
    window at ``tokens`` positions (None: at any length) -- those whose window is shorter than the
    sequence, and every sliding layer of Gemma 3 (transformers masks them by the uncompressed
    length). The policy compresses the other layers, as kvpress does for Gemma 3's global layers."""
    from icml26.core.hf_attention import sliding_window_layers

    cfg = _text(config)
    w, layers = sliding_window_layers(cfg)
    if w is None:
        return None, []
    if str(_cfg_get(cfg, "model_type", "") or "").startswith("gemma3") or tokens is None or w < int(tokens):
        return w, layers
    return None, []


def attention_refusal(config, tokens: int | None, *, kvpress: bool = False) -> str | None:
    """Why eviction cannot run on a model whose attention is not plain causal softmax at ``tokens``
    positions (``icml26.core.hf_attention``), or None when it can.

    Sliding-window layers whose window is active (Mistral, Qwen2 with ``use_sliding_window``,
    Gemma 2 / 3 local layers; ``window_layers``) keep the model's own window, uncompressed, and
    the policy compresses the full-attention layers: refused when no full-attention layer is left
    (Mistral past its window), through the kvpress adapter (its presses compress every layer),
    and under transformers older than ``WINDOW_TRANSFORMERS`` (masks sized from the first
    layer's cache). Logit soft-capping (Gemma 2) and a ``query_pre_attn_scalar`` other than
    ``head_dim`` change the attention the scores estimate: refused. Messages name the setting."""
    from icml26.core.hf_attention import attention_features, describe

    cfg = _text(config)
    feats = attention_features(cfg, tokens)
    scalar = _cfg_get(cfg, "query_pre_attn_scalar")
    head_dim = _cfg_get(cfg, "head_dim")
    why = []
    what = []
    if "attn_logit_softcapping" in feats:
        what.append(f"attn_logit_softcapping={feats['attn_logit_softcapping']}")
        why.append("soft-capped attention logits are not what the eviction scores estimate")
    if scalar is not None and head_dim is not None and int(scalar) != int(head_dim):
        what.append(f"query_pre_attn_scalar={scalar} (head_dim {head_dim})")
        why.append("the scores scale attention logits by head_dim^-1/2, the model by query_pre_attn_scalar^-1/2")
    w, layers = window_layers(cfg, tokens)
    if layers:
        n = int(_cfg_get(cfg, "num_hidden_layers", 0) or 0)
        at = f"at {tokens} positions" if tokens is not None else "at sequences longer than the window"
        win = describe({"sliding_window": w, "sliding_window_layers": layers})
        tv = _transformers_version()
        if kvpress:
            what.append(win)
            why.append(
                f"its sliding window is active {at} and kvpress' presses compress every layer, which the window "
                "does not follow (run the built-in policies: they leave window layers to the model)"
            )
        elif len(layers) >= n:
            what.append(win)
            why.append(
                f"every layer attends through its sliding window of {w} tokens {at}: the window already bounds "
                f"the cache and leaves no full-attention layer to compress (keep the sequence within {w} positions)"
            )
        elif tv is not None and tv < WINDOW_TRANSFORMERS:
            what.append(win)
            why.append(
                f"transformers {tv[0]}.{tv[1]} sizes the masks of its sliding-window layers from the first "
                f"layer's cache; upgrade to transformers >= {WINDOW_TRANSFORMERS[0]}.{WINDOW_TRANSFORMERS[1]}"
            )
    if not why:
        return None
    return f"KV-cache eviction does not support this model's attention ({', '.join(what)}): {'; '.join(why)}"


def check_attention(config, tokens: int | None, *, kvpress: bool = False) -> None:
    """ValueError with ``attention_refusal``'s message when there is one."""
    msg = attention_refusal(config, tokens, kvpress=kvpress)
    if msg:
        raise ValueError(msg)
