"""Same selections as kvpress where configured alike.

kvpress 0.5.5 pins transformers<5.3, so it lives in a peer venv of its own (``make peers``,
icml26.core.peers). There the tests below run on this checkout's code; from the project venv,
``test_in_the_kvpress_peer`` runs them there (with our cache-API and press tests), which is
what ``make test-peers`` (and CI) does:
    make peers && make test-peers
"""

import subprocess
from pathlib import Path

import pytest
import torch

try:
    import kvpress
except ImportError:  # the project venv: the tests run in the peer venv (test_in_the_kvpress_peer)
    kvpress = None

ROOT = Path(__file__).resolve().parents[2]
# run in the kvpress peer: these parity tests, and our code that touches transformers' cache API
PEER_TESTS = [
    "tests/methods/test_kv_kvpress_parity.py",
    "tests/core/test_lm_cache.py",
    "tests/methods/test_kv_press.py",
    "tests/methods/test_kv_headmask.py",
    "tests/methods/test_kv_decode.py",
]

from icml26.methods.kvcache import KVPress  # noqa: E402
from icml26.methods.kvcache.kvpress_adapter import KvpressRunner, as_kvpress  # noqa: E402
from icml26.methods.kvcache.press import capture_layers  # noqa: E402
from tests.methods.test_kv_scoring import tiny_llama  # noqa: E402

CASES = [
    # (ours, theirs)
    (
        dict(
            method="capkv",
            weight="exp-cos",
            tau=5.0,
            query_source="future-rope",
            n_future_positions=512,
            sink_tokens=4,
            window_tokens=0,
            ridge_ratio=1.0,
            ridge_absolute=True,
            gqa="per-head",
            stat_tokens=0,
            question_share=0.0,
        ),
        ("CapPress", {}),
    ),
    (
        dict(method="snapkv", sink_tokens=0, window_tokens=16, kernel_size=5),
        ("SnapKVPress", {"window_size": 16, "kernel_size": 5}),
    ),
    (  # the pooling width of capkv-qa's retrieval channel, as the benchmark's snapkv@kernel_size=13 row
        dict(method="snapkv", sink_tokens=0, window_tokens=16, kernel_size=13),
        ("SnapKVPress", {"window_size": 16, "kernel_size": 13}),
    ),
    (
        dict(method="expected-attention", query_source="future-rope", sink_tokens=4, window_tokens=0),
        ("ExpectedAttentionPress", {}),
    ),
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
def same_selection_as_kvpress(ours, theirs, ratio):
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


def adapter_runs_inside_kvpress_hooks():
    from icml26.core.lm_cache import forward, new_cache

    model = tiny_llama(layers=2)
    ids = torch.randint(0, 128, (1, 80), generator=torch.Generator().manual_seed(6))
    press = KVPress(method="capkv", compression_ratio=0.5, sink_tokens=2, window_tokens=8)
    with torch.no_grad(), capture_layers(model) as cap:
        model(ids, use_cache=True)
    cache = new_cache(model)
    with torch.no_grad(), as_kvpress(press)(model):
        forward(model, ids, cache)
    for layer, x in zip(cache.layers, cap):
        k, _ = press.compress(x, 40)
        assert layer.keys.shape[2] == 40
        assert _sets(layer.keys, x.keys) == _sets(k, x.keys)


def decoding_press_chunks_equal_steps():
    """kvpress' DecodingPress as the decode harness runs it: chunks of ``interval`` tokens with
    ``compression_interval=1`` give the same distributions and caches as one token per step with
    ``compression_interval=interval`` (its own counting), and the cache is cut to ``target_size``."""
    from icml26.methods.kvcache import decode as D
    from tests.methods.test_kv_decode import _prefill

    model = tiny_llama(layers=2, seed=3)
    ids = torch.randint(0, 128, (1, 60), generator=torch.Generator().manual_seed(8))
    cap, _, first = _prefill(model, ids)
    gen = torch.randint(0, 128, (40,), generator=torch.Generator().manual_seed(9)).tolist()
    from transformers import DynamicCache

    def fresh():
        c = DynamicCache(config=model.config)
        for x in cap:
            c.update(x.keys.clone(), x.values.clone(), x.layer_idx)
        return c

    out = {}
    for base in ("KnormPress", "CapPress", "StreamingLLMPress"):
        for mode, (ci, chunk) in {"chunks": (1, 8), "steps": (8, 1)}.items():
            press = D.kvpress_decoding(f"DecodingPress/{base}", 24, ci)
            cache = fresh()
            with torch.no_grad(), press(model):
                logp, peak = D.teacher_forced(model, cache, gen, 60, lambda n, c=chunk: c)
            out[mode] = (logp, peak, cache.layers[0].keys.shape[2])
        torch.testing.assert_close(out["chunks"][0], out["steps"][0], atol=2e-5, rtol=1e-4)
        assert out["chunks"][2] == out["steps"][2] == 24  # 40 = 5 intervals: compressed to target_size last
        assert (
            out["chunks"][1] == out["steps"][1] == 2 * 2 * 2 * 16 * 4 * (60 + 8)
        )  # the prompt is kept until the first interval


def in_the_kvpress_peer():
    """From the project venv: PEER_TESTS in the kvpress peer venv, all run and pass (none skipped)."""
    from conftest import need_peer

    from icml26.core.peers import peer_env

    py = need_peer("kvpress")
    r = subprocess.run(
        [str(py), "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *PEER_TESTS],
        cwd=ROOT,
        env=peer_env("kvpress"),
        capture_output=True,
        text=True,
        timeout=1800,
    )
    tail = r.stdout[-3000:] + r.stderr[-2000:]
    assert r.returncode == 0, tail
    last = r.stdout.strip().splitlines()[-1]
    assert " passed" in last and "skipped" not in last and "failed" not in last, tail


def finch_reads_the_question_span():
    """kvpress' question-aware FinchPress through the adapter: its window is the question's span
    (what its delimiter hook would find), keys keep their positions, the budget is kvpress' rule,
    and the window's tokens are all kept."""
    from icml26.methods.kvcache.kvpress_adapter import kvpress_press

    model = tiny_llama(layers=2, seed=1)
    ids = torch.randint(0, 128, (1, 96), generator=torch.Generator().manual_seed(5))
    with torch.no_grad(), capture_layers(model) as cap:
        model(ids, use_cache=True)
    press = kvpress_press("FinchPress", 0.5)
    assert press.rerotate_keys is False
    runner = KvpressRunner(press, model, question_tokens=12)
    assert press.window_size == 12
    for x in cap:
        k, _ = runner.compress(x, 48)
        kept = _sets(k, x.keys)
        assert all(len(h) == 48 and set(range(84, 96)) <= set(h) for h in kept)
    with pytest.raises(ValueError, match="question"):
        KvpressRunner(kvpress_press("FinchPress", 0.5), model, question_tokens=0)


def finch_has_no_decoding_press():
    """kvpress' DecodingPress wraps a ScorerPress only: ``kvpress:DecodingPress/FinchPress`` is
    refused before the run (one line naming why); a ScorerPress inside it passes."""
    from icml26.core.errors import InputError
    from icml26.methods.kvcache.config import Config, check_kvpress_methods

    check_kvpress_methods(Config(mode="decode", methods=("kvpress:DecodingPress/KnormPress",)))
    with pytest.raises(InputError, match="FinchPress is not one"):
        check_kvpress_methods(Config(mode="decode", methods=("kvpress:DecodingPress/FinchPress",)))


if kvpress is not None:  # the kvpress venv: the parity tests themselves
    test_same_selection_as_kvpress = same_selection_as_kvpress
    test_adapter_runs_inside_kvpress_hooks = adapter_runs_inside_kvpress_hooks
    test_decoding_press_chunks_equal_steps = decoding_press_chunks_equal_steps
    test_finch_reads_the_question_span = finch_reads_the_question_span
    test_finch_has_no_decoding_press = finch_has_no_decoding_press
else:  # the project venv: run them (and PEER_TESTS) in the peer venv; `make test-peers`
    test_in_the_kvpress_peer = pytest.mark.peer(in_the_kvpress_peer)
