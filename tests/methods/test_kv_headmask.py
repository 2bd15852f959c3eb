"""Head-adaptive budgets: allocation rule and the masked padded cache (oracle: per-head loops)."""

import math

import pytest
import torch

from icml26.methods.kvcache import KVPress, capture_layers, compress_captured, n_kept
from icml26.methods.kvcache import scoring as S
from icml26.methods.kvcache.headmask import cache_masks, masked_attention
from icml26.methods.kvcache.press import cache_bytes
from tests.methods.test_kv_scoring import tiny_llama
from icml26.core.lm_cache import forward as lm_forward  # noqa: E402  (runs on transformers 5.2 and >= 5.3)


def test_adaptive_keeps_the_layer_budget_and_protects_sinks_window():
    g = torch.Generator().manual_seed(0)
    scores = torch.rand(2, 3, 40, generator=g)
    scores[:, 0] *= 10  # head 0 has the large scores: it should get more of the budget
    idx, keep = S.select_adaptive(scores, 12, sink_tokens=2, window_tokens=3, floor=0.2)
    assert int(keep.sum()) == 2 * 3 * 12  # total budget of the layer is exactly H * n_keep per batch row
    counts = keep.sum(-1)
    assert bool((counts[:, 0] > counts[:, 1]).all()) and bool((counts[:, 0] > counts[:, 2]).all())
    assert bool((counts >= 5 + math.floor(0.2 * 7)).all())  # sinks + window + the floor share
    for b in range(2):
        for h in range(3):
            kept = idx[b, h][keep[b, h]].tolist()
            assert kept == sorted(set(kept)) and {0, 1, 37, 38, 39} <= set(kept)
            free = [i for i in range(2, 37)]
            # within a head the kept free tokens are its top scores
            chosen = [i for i in kept if 2 <= i < 37]
            rest = [i for i in free if i not in chosen]
            if chosen and rest:
                assert min(scores[b, h, chosen]) >= max(scores[b, h, rest])


def test_adaptive_floor_one_is_uniform():
    scores = torch.rand(1, 4, 30, generator=torch.Generator().manual_seed(1))
    idx, keep = S.select_adaptive(scores, 10, sink_tokens=2, window_tokens=2, floor=1.0)
    assert bool(keep.all())
    assert torch.equal(idx, S.select_indices(scores, 10, sink_tokens=2, window_tokens=2))


def test_masked_attention_equals_attention_over_the_kept_entries_only():
    torch.manual_seed(0)
    b, hkv, g, tq, t0, tnew, d = 1, 2, 2, 3, 10, 3, 8
    q = torch.randn(b, hkv * g, tq, d)
    k = torch.randn(b, hkv, t0 + tnew, d)
    v = torch.randn(b, hkv, t0 + tnew, d)
    keep = torch.rand(b, hkv, t0) > 0.4
    keep[..., 0] = True

    class M(torch.nn.Module):
        pass

    mod = M()
    mod._icml26_keep = keep
    out, _ = masked_attention(None)(mod, q, k, v, None, scaling=1 / math.sqrt(d))  # causal over the new tokens
    for h in range(hkv * g):
        kh = h // g
        for i in range(tq):
            cols = [j for j in range(t0) if keep[0, kh, j]] + [t0 + j for j in range(tnew) if j <= i]
            att = torch.softmax(q[0, h, i] @ k[0, kh, cols].T / math.sqrt(d), -1)
            torch.testing.assert_close(out[0, i, h], att @ v[0, kh, cols], rtol=1e-5, atol=1e-5)


def test_adaptive_press_hooks_equal_capture_and_generate():
    from transformers import DynamicCache

    model = tiny_llama()
    ids = torch.randint(0, 128, (1, 60), generator=torch.Generator().manual_seed(5))
    press = KVPress(method="capkv", compression_ratio=0.5, sink_tokens=2, window_tokens=6, head_budget="adaptive")
    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        with press(model):
            lm_forward(model, ids, cache)
            out = model.generate(ids, max_new_tokens=5, do_sample=False)
        with capture_layers(model) as cap:
            model(ids, use_cache=True)
        other = compress_captured(press, cap, model.config)
        for a, b in zip(cache.layers, other.layers):
            torch.testing.assert_close(a.keys, b.keys)
            torch.testing.assert_close(a.values, b.values)
        n_bytes = (cache_bytes(other, kept_only=True), cache_bytes(other))
        # the padded cache with masks gives the same next-token logits in both paths
        nxt = torch.tensor([[7]])
        with cache_masks(model, other):
            got = lm_forward(model, nxt, other, position_ids=torch.tensor([[60]])).logits[0, -1]
        # a uniform allocation with the same total changes the result (the allocation matters)
        uni = compress_captured(
            KVPress(method="capkv", compression_ratio=0.5, sink_tokens=2, window_tokens=6), cap, model.config
        )
        ref_u = lm_forward(model, nxt, uni, position_ids=torch.tensor([[60]])).logits[0, -1]
    assert out.shape == (1, 65)
    assert n_bytes[0] == 2 * 2 * 2 * n_kept(60, 0.5) * 16 * 4  # layers * (k,v) * heads * budget * dim * fp32
    assert n_bytes[1] > n_bytes[0]  # the dense layout holds the padding too
    assert torch.isfinite(got).all() and (got - ref_u).abs().max() > 1e-5
    # masks are removed with the context: no module keeps one
    assert not any(hasattr(l.self_attn, "_icml26_keep") for l in model.model.layers)


def test_adaptive_bad_config():
    for bad in (
        dict(head_budget="x"),
        dict(head_floor=1.5),
        dict(head_budget="adaptive", decoding_budget_tokens=8),
        dict(head_budget="adaptive", method="capkv-greedy"),
    ):
        with pytest.raises(ValueError):
            KVPress(**bad)


def test_adaptive_multi_token_forward_over_layers_of_different_lengths():
    """Teacher-forcing several tokens after an adaptive cache (layers padded to different lengths)
    equals feeding them one by one."""
    model = tiny_llama()
    ids = torch.randint(0, 128, (1, 60), generator=torch.Generator().manual_seed(7))
    cont = torch.randint(0, 128, (1, 4), generator=torch.Generator().manual_seed(8))
    press = KVPress(method="snapkv", compression_ratio=0.6, sink_tokens=2, window_tokens=4, head_budget="adaptive")
    with torch.no_grad():
        with capture_layers(model) as cap:
            model(ids, use_cache=True)
        a = compress_captured(press, cap, model.config)
        b = compress_captured(press, cap, model.config)
        assert len({l.keys.shape[2] for l in a.layers}) > 1 or a.icml26_keep  # padded
        with cache_masks(model, a):
            many = lm_forward(model, cont, a, position_ids=torch.arange(60, 64)[None]).logits[0]
        one = []
        with cache_masks(model, b):
            for i in range(4):
                one.append(
                    lm_forward(model, cont[:, i : i + 1], b, position_ids=torch.tensor([[60 + i]])).logits[0, -1]
                )
    torch.testing.assert_close(many, torch.stack(one), rtol=1e-4, atol=1e-4)
