"""The press: hooks on attention, prefill compression, model.generate, decoding-time compression."""

import pytest
import torch

from icml26.methods.kvcache import KVPress, cache_bytes, capture_layers, compress_captured, n_kept
from tests.methods.test_kv_scoring import tiny_llama
from icml26.core.lm_cache import cache_argument, forward as lm_forward  # noqa: E402  (runs on transformers 5.2 and >= 5.3)


def _ids(t, seed=0, vocab=128):
    return torch.randint(0, vocab, (1, t), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("method", ["capkv", "snapkv", "expected-attention", "streaming"])
def test_prefill_compression_keeps_budget_and_generate_works(method):
    from transformers import DynamicCache

    model = tiny_llama()
    ids = _ids(100)
    press = KVPress(method=method, compression_ratio=0.75, sink_tokens=4, window_tokens=8)
    cache = DynamicCache(config=model.config)
    with torch.no_grad(), press(model):
        lm_forward(model, ids, cache)
    for layer in cache.layers:
        assert layer.keys.shape[2] == n_kept(100, 0.75) == 25
    assert cache_bytes(cache) == 2 * 2 * 2 * 25 * 16 * 4  # layers * (k,v) * heads * tokens * dim * fp32
    with torch.no_grad(), press(model):
        out = model.generate(ids, max_new_tokens=6, do_sample=False)
    assert out.shape == (1, 106)
    # hooks are gone after the context: a plain forward keeps the whole cache
    cache2 = DynamicCache(config=model.config)
    with torch.no_grad():
        lm_forward(model, ids, cache2)
    assert cache2.layers[0].keys.shape[2] == 100


def test_ratio_zero_matches_full_generation():
    model = tiny_llama()
    ids = _ids(60, seed=1)
    with torch.no_grad():
        ref = model.generate(ids, max_new_tokens=8, do_sample=False)
        with KVPress(method="capkv", compression_ratio=0.0)(model):
            got = model.generate(ids, max_new_tokens=8, do_sample=False)
    assert torch.equal(ref, got)


def test_evicting_one_token_equals_deleting_it_from_a_full_cache():
    """Positions survive eviction: a compressed cache gives the same next-token logits (with
    explicit position ids) as a full cache from which that token was cut out by hand."""
    from transformers import DynamicCache

    model = tiny_llama()
    ids = _ids(40, seed=2)
    press = KVPress(method="streaming", compression_ratio=0.02, sink_tokens=4, window_tokens=0)  # drops token 4
    cache = DynamicCache(config=model.config)
    full = DynamicCache(config=model.config)
    nxt = torch.tensor([[5]])
    with torch.no_grad():
        with press(model):
            lm_forward(model, ids, cache)
        lm_forward(model, ids, full)
        assert cache.layers[0].keys.shape[2] == 39
        keep = [i for i in range(40) if i != 4]
        for layer in full.layers:
            layer.keys, layer.values = layer.keys[:, :, keep], layer.values[:, :, keep]
        got = lm_forward(model, nxt, cache, position_ids=torch.tensor([[40]])).logits[0, -1]
        ref = lm_forward(model, nxt, full, position_ids=torch.tensor([[40]])).logits[0, -1]
        uncut = DynamicCache(config=model.config)
        lm_forward(model, ids, uncut)
        other = lm_forward(model, nxt, uncut, position_ids=torch.tensor([[40]])).logits[0, -1]
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
    assert (got - other).abs().max() > 1e-4  # the eviction did change something


@pytest.mark.parametrize("method", ["capkv", "h2o", "knorm", "capkv-greedy"])
def test_hook_path_equals_capture_path(method):
    from transformers import DynamicCache

    model = tiny_llama()
    ids = _ids(50, seed=3)
    press = KVPress(method=method, compression_ratio=0.5, sink_tokens=2, window_tokens=6)
    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        with press(model):
            lm_forward(model, ids, cache)
        with capture_layers(model) as cap:
            model(ids, use_cache=True)
        other = compress_captured(press, cap, model.config)
    for a, b in zip(cache.layers, other.layers):
        torch.testing.assert_close(a.keys, b.keys)
        torch.testing.assert_close(a.values, b.values)


def test_decoding_time_compression_bounds_the_cache():
    from transformers import DynamicCache

    model = tiny_llama()
    ids = _ids(30, seed=4)
    press = KVPress(
        method="capkv",
        compression_ratio=0.0,
        decoding_budget_tokens=24,
        decoding_interval_tokens=4,
        window_tokens=8,
        sink_tokens=2,
    )
    cache = DynamicCache(config=model.config)
    with torch.no_grad(), press(model):
        out = model.generate(ids, max_new_tokens=20, do_sample=False, **{cache_argument(model): cache})
    assert out.shape[1] == 50
    n = cache.layers[0].keys.shape[2]
    assert 24 <= n <= 24 + 4
    assert press.stats["layers"] > 0


def test_bad_press_config():
    for bad in (
        dict(compression_ratio=1.0),
        dict(compression_ratio=-0.1),
        dict(method="nope"),
        dict(weight="x"),
        dict(decoding_budget_tokens=8, window_tokens=0),
        dict(kernel_size=4),
    ):
        with pytest.raises(ValueError):
            KVPress(**bad)
