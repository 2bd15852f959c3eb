"""Models whose attention eviction cannot follow are refused before any cache is compressed,
with a message naming the setting: every layer behind an active sliding window (Mistral, Qwen2
with ``use_sliding_window`` on every layer, a Gemma 3 of local layers only) and soft-capped
logits (Gemma 2); the same models run when the window is inactive at the sequence's length
(Mistral, Qwen2). Models with full-attention layers beside their window layers:
``test_kv_sliding_window.py``."""

import pytest
import torch

from icml26.methods.kvcache import KVPress
from icml26.methods.kvcache import spec

KW = dict(
    vocab_size=128,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    max_position_embeddings=512,
)


def tiny(name: str, window: int):
    import transformers as T

    torch.manual_seed(0)
    if name == "mistral":
        return T.MistralForCausalLM(T.MistralConfig(sliding_window=window, **KW)).eval()
    if name == "qwen2":
        cfg = T.Qwen2Config(use_sliding_window=True, sliding_window=window, max_window_layers=0, **KW)
        return T.Qwen2ForCausalLM(cfg).eval()
    if name == "gemma2":
        return T.Gemma2ForCausalLM(T.Gemma2Config(sliding_window=window, query_pre_attn_scalar=16, **KW)).eval()
    return T.Gemma3ForCausalLM(T.Gemma3TextConfig(sliding_window=window, query_pre_attn_scalar=16, **KW)).eval()


IDS = torch.randint(0, 128, (1, 100), generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize(
    "name, window, named",
    [
        ("mistral", 32, "sliding_window=32"),
        ("qwen2", 32, "sliding_window=32"),
        ("gemma2", 4096, "attn_logit_softcapping=50.0"),  # capped at every length
        ("gemma3", 32, "sliding_window=32"),
        ("gemma3", 4096, "sliding_window=4096"),  # transformers masks its window layers by the full length
    ],
)
def test_unsupported_attention_is_refused_naming_the_setting(name, window, named):
    model = tiny(name, window)
    press = KVPress(method="capkv-qa", compression_ratio=0.5, sink_tokens=4, window_tokens=8)
    with pytest.raises(ValueError, match="KV-cache eviction does not support") as e, torch.no_grad(), press(model):
        model.generate(IDS, max_new_tokens=2, do_sample=False)
    assert named in str(e.value)
    assert press.stats["layers"] == 0  # refused before any layer was compressed
    msg = spec.attention_refusal(model.config, 100)
    assert msg is not None and named in msg


@pytest.mark.parametrize("name", ["mistral", "qwen2"])
@pytest.mark.parametrize("method", ["capkv", "capkv-qa", "snapkv"])
def test_inactive_sliding_window_runs_prefill_and_decode(name, method):
    """A window longer than the sequence is plain attention: prefill compression keeps the budget
    and generate works; decoding-time compression keeps the cache bounded."""
    from transformers import DynamicCache

    from icml26.core.lm_cache import forward as lm_forward

    model = tiny(name, 4096)
    assert spec.attention_refusal(model.config, 100 + 8) is None
    press = KVPress(method=method, compression_ratio=0.5, sink_tokens=4, window_tokens=8)
    cache = DynamicCache(config=model.config)
    with torch.no_grad(), press(model):
        lm_forward(model, IDS, cache)
        out = model.generate(IDS, max_new_tokens=4, do_sample=False)
    assert [layer.keys.shape[2] for layer in cache.layers] == [50, 50] and out.shape == (1, 104)
    dec = KVPress(method=method, compression_ratio=0.0, sink_tokens=4, window_tokens=8, decoding_budget_tokens=32)
    with torch.no_grad(), dec(model):
        out = model.generate(IDS, max_new_tokens=20, do_sample=False, return_dict_in_generate=True)
    assert max(layer.keys.shape[2] for layer in out.past_key_values.layers) <= 32 + 16 - 1


def test_run_config_is_refused_before_the_run():
    """``evict-kv``'s preflight: the run's longest sequence against the window (InputError, exit 2)."""
    from icml26.core.errors import InputError
    from icml26.methods.kvcache.config import Config, check_model_attention, longest_sequence

    cfg = Config(methods=("capkv",), context_tokens=(1024,))
    mistral = {"model_type": "mistral", "sliding_window": 1024, "num_hidden_layers": 32}
    with pytest.raises(InputError, match=r"sliding_window=1024 \(32 layers\)"):
        check_model_attention(cfg, mistral)
    check_model_attention(cfg, {**mistral, "sliding_window": longest_sequence(cfg)})  # covers the run: runs
    check_model_attention(cfg, {**mistral, "sliding_window": None})
    decode = Config(methods=("capkv",), context_tokens=(512,), mode="decode", new_tokens=600)
    with pytest.raises(InputError, match="sliding_window=1024"):
        check_model_attention(decode, mistral)  # 512 + 600 generated tokens pass the window
    with pytest.raises(InputError, match="attn_logit_softcapping=30.0"):
        check_model_attention(cfg, {"model_type": "gemma2", "attn_logit_softcapping": 30.0})


def test_kvpress_runner_refuses_the_same_models():
    """A kvpress press run through the adapter meets the same check (no kvpress needed to refuse)."""
    from icml26.methods.kvcache.kvpress_adapter import KvpressRunner
    from icml26.methods.kvcache.press import capture_layers

    model = tiny("mistral", 32)
    with torch.no_grad(), capture_layers(model) as cap:
        model(IDS, use_cache=True)

    class Never:
        compression_ratio = 0.5

        def compress(self, *a, **k):  # pragma: no cover - the check must stop before the press runs
            raise AssertionError("the press ran on an unsupported model")

    with pytest.raises(ValueError, match="sliding_window=32"):
        KvpressRunner(Never()).compress(cap[0], 50)
