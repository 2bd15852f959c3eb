"""The KV cache handed to a transformers causal LM (icml26.core.lm_cache): no deprecation warning
on any forward of quantize's and evict-kv's decode loops, and the cached decode equals a decode
that recomputes the whole sequence. Runs in the project venv (transformers >= 5.3: ``cache``) and
in the kvpress peer venv (transformers 5.2: ``past_key_values``), see test_kv_kvpress_parity."""

import warnings

import torch

from tests.methods.test_kv_scoring import tiny_llama


def _no_deprecation(fn, capfd):
    """Run ``fn`` recording every warning; fail on a deprecation warning or log line."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        out = fn()
    msgs = [f"{w.category.__name__}: {w.message}" for w in seen if "deprecat" in str(w.message).lower()]
    assert not msgs, msgs
    err = capfd.readouterr().err
    assert "deprecated" not in err, err
    return out


def _greedy_without_cache(model, prompt, n):
    ids = prompt
    for _ in range(n):
        nxt = model(input_ids=ids, use_cache=False).logits[:, -1].argmax(-1, keepdim=True)
        ids = torch.cat([ids, nxt], 1)
    return ids[0, prompt.shape[1] :]


def test_quantize_greedy_decode_uses_the_cache_api(capfd):
    from icml26.methods.quantization.evaluate import greedy

    model = tiny_llama(layers=2, seed=3)
    prompts = [torch.randint(0, 128, (1, 12), generator=torch.Generator().manual_seed(s)) for s in (0, 1)]
    with torch.no_grad():
        got = _no_deprecation(lambda: greedy(model, prompts, 6), capfd)
        for p, g in zip(prompts, got):
            assert torch.equal(g, _greedy_without_cache(model, p, 6))


def test_evict_kv_forward_uses_the_cache_api(capfd):
    from icml26.core.lm_cache import new_cache
    from icml26.methods.kvcache.evaluate import _forward

    model = tiny_llama(layers=2, seed=4)
    ids = torch.randint(0, 128, (20,), generator=torch.Generator().manual_seed(2)).tolist()
    with torch.no_grad():
        full = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0].float()
        cache = new_cache(model)

        def run():
            a = _forward(model, ids[:14], cache, 0)
            b = _forward(model, ids[14:], cache, 14)  # continues from the 14 cached positions
            return torch.cat([a, b])

        got = _no_deprecation(run, capfd)
    assert cache.get_seq_length() == 20
    torch.testing.assert_close(got, full, rtol=1e-4, atol=1e-4)
