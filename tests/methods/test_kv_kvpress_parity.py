"""Same selections as kvpress where configured alike (skips when kvpress is absent).

kvpress 0.5.5 pins transformers<5.3, so it is not in the project venv; run this test from a
venv that has it (docs/evict-kv.md):
    python -m venv /tmp/kvpress-venv && /tmp/kvpress-venv/bin/pip install kvpress==0.5.5
    echo $PWD/.venv/lib/python3.11/site-packages > /tmp/kvpress-venv/lib/python3.11/site-packages/zz.pth
    PYTHONPATH=$PWD /tmp/kvpress-venv/bin/python -m pytest -q tests/methods/test_kv_kvpress_parity.py
"""

import pytest
import torch


kvpress = pytest.importorskip("kvpress", reason="needs kvpress: pip install kvpress==0.5.5 in a separate venv (see docs/evict-kv.md)")

from icml26.methods.kvcache import KVPress  # noqa: E402
from icml26.methods.kvcache.kvpress_adapter import KvpressRunner, as_kvpress  # noqa: E402
from icml26.methods.kvcache.press import capture_layers  # noqa: E402
from tests.methods.test_kv_scoring import tiny_llama  # noqa: E402

CASES = [
    # (ours, theirs)
    (dict(method="capkv", weight="exp-cos", tau=5.0, query_source="future-rope", n_future_positions=512, sink_tokens=4,
          window_tokens=0, ridge_ratio=1.0, ridge_absolute=True, gqa="per-head", stat_tokens=0, question_share=0.0), ("CapPress", {})),
    (dict(method="snapkv", sink_tokens=0, window_tokens=16, kernel_size=5), ("SnapKVPress", {"window_size": 16, "kernel_size": 5})),
    (dict(method="expected-attention", query_source="future-rope", sink_tokens=4, window_tokens=0), ("ExpectedAttentionPress", {})),
    (dict(method="knorm", sink_tokens=0, window_tokens=0), ("KnormPress", {})),
    (dict(method="streaming", sink_tokens=4, window_tokens=0), ("StreamingLLMPress", {"n_sink": 4})),
    (dict(method="tova", sink_tokens=0, window_tokens=1), ("TOVAPress", {})),
]


def _sets(keys_kept, keys_all):
    """Kept positions per head, recovered by matching kept keys to the full cache."""
    out = []
    for h in range(keys_all.shape[1]):
        d = torch.cdist(keys_kept[0, h], keys_all[0, h])
        out.append(sorted(d.argmin(-1).tolist()))
    return out


@pytest.mark.parametrize("ours, theirs", CASES, ids=[c[1][0] for c in CASES])
@pytest.mark.parametrize("ratio", [0.5, 0.75])
def test_same_selection_as_kvpress(ours, theirs, ratio):
    model = tiny_llama(layers=2, seed=1)
    model.config._attn_implementation = "sdpa"
    ids = torch.randint(0, 128, (1, 96), generator=torch.Generator().manual_seed(5))
    with torch.no_grad(), capture_layers(model) as cap:
        model(ids, use_cache=True)
    mine = KVPress(compression_ratio=ratio, **ours)
    other = KvpressRunner(getattr(kvpress, theirs[0])(compression_ratio=ratio, **theirs[1]), model)
    for x in cap:
        n = max(1, int(x.keys.shape[2] * (1 - ratio)))
        k1, _ = mine.compress(x, n)
        k2, _ = other.compress(x, n)
        assert k1.shape == k2.shape
        assert _sets(k1, x.keys) == _sets(k2, x.keys)


def test_adapter_runs_inside_kvpress_hooks():
    from transformers import DynamicCache

    model = tiny_llama(layers=2)
    ids = torch.randint(0, 128, (1, 80), generator=torch.Generator().manual_seed(6))
    press = KVPress(method="capkv", compression_ratio=0.5, sink_tokens=2, window_tokens=8)
    with torch.no_grad(), capture_layers(model) as cap:
        model(ids, use_cache=True)
    cache = DynamicCache(config=model.config)
    with torch.no_grad(), as_kvpress(press)(model):
        model(ids, past_key_values=cache, use_cache=True)
    for layer, x in zip(cache.layers, cap):
        k, _ = press.compress(x, 40)
        assert layer.keys.shape[2] == 40
        assert _sets(layer.keys, x.keys) == _sets(k, x.keys)
