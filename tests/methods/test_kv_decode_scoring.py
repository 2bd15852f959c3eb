"""CapKV's decoding-time scoring: the low-rank window weights and the batched two-channel
leverage give the scores and the selections of the covariance form and the two separate
channels (``scoring._expected_weights_window``, ``scoring.score_capkv_channels``)."""

import dataclasses

import pytest
import torch

from icml26.methods.kvcache import KVPress, capture_layers
from icml26.methods.kvcache import scoring as S
from tests.methods.test_kv_scoring import tiny_llama


def _decode_layers(seed=0, t=72, window=8):
    """Every layer of a tiny LLaMA after a t-token prefill, as the press sees it while decoding:
    the cache and the buffer of the last ``window`` post-RoPE queries (no hidden states)."""
    model = tiny_llama(layers=2, seed=seed)
    ids = torch.randint(0, 128, (1, t), generator=torch.Generator().manual_seed(seed + 10))
    with torch.no_grad(), capture_layers(model) as cap:
        model(ids, use_cache=True)
    return [
        S.LayerInputs(
            keys=x.keys,
            values=x.values,
            module=x.module,
            queries=S.window_queries(x, window).detach(),
            layer_idx=x.layer_idx,
        )
        for x in cap
    ]


def test_window_weights_from_the_queries_equal_the_covariance_form():
    """k^T Sigma k with Sigma = C^T C / n (the window's Gaussian) computed as ||C k||^2 / n."""
    g = torch.Generator().manual_seed(0)
    b, hkv, grp, n, t, d = 1, 3, 3, 16, 40, 64
    k = torch.randn(b, hkv, t, d, generator=g)
    q = torch.randn(b, hkv, grp, n, d, generator=g) * 2.0 + 0.5
    got = S._expected_weights_window(k, q)
    mu, cov = S._moments(q.view(b, hkv * grp, n, d), True)
    want = S._expected_weights_grouped(k, mu.view(b, hkv, grp, d), cov.view(b, hkv, grp, d, d))
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-7)
    assert got.shape == (b, hkv, grp, t)
    torch.testing.assert_close(got.sum(-1), torch.ones(b, hkv, grp))


@pytest.mark.parametrize(
    "opts", [{}, {"gqa": "per-head"}, {"weight": "exp-cos"}, {"pool": "max"}, {"query_source": "joint"}]
)
def test_two_channels_in_one_pass_equal_the_separate_scores(opts):
    p = S.ScoreParams(window_tokens=8, stat_window=6, sink_tokens=2, **opts)
    for x in _decode_layers(seed=1):
        cont, ques = S.score_capkv_channels(x, p)
        torch.testing.assert_close(cont, S.score_capkv(x, p), rtol=1e-5, atol=1e-7)
        torch.testing.assert_close(ques, S.score_capkv_question(x, p), rtol=1e-5, atol=1e-7)


def test_decoding_selection_is_unchanged(monkeypatch):
    """The press' decoding-time selection with both speed-ups = the one the covariance form and
    two separate leverages give (the code before them): same kept tokens in every layer and head."""
    press = KVPress(
        method="capkv-qa",
        compression_ratio=0.0,
        decoding_budget_tokens=40,
        decoding_interval_tokens=8,
        window_tokens=8,
        stat_window=6,
        sink_tokens=2,
    )
    layers = _decode_layers(seed=2, t=48)
    new = [press.select(x, 40) for x in layers]
    with monkeypatch.context() as m:
        from icml26.methods.kvcache import capkv as C

        m.setattr(C, "_window_count", lambda x, p: 10**9)  # always the (D x D) covariance
        m.setattr(S, "score_capkv_channels", lambda x, p: (S.score_capkv(x, p), S.score_capkv_question(x, p)))
        old = [press.select(x, 40) for x in layers]
    for a, b in zip(new, old):
        assert a.shape == (1, 2, 40)
        assert torch.equal(a, b)
    # the low-rank branch is what ran (stat_window 6 < head_dim 16), and it is not vacuous: another window differs
    assert S._window_count(layers[0], press.params) == 6 < layers[0].head_dim
    other = dataclasses.replace(layers[0], queries=layers[1].queries)
    assert not torch.equal(press.select(other, 40), new[0])


@pytest.fixture(scope="module")
def tiny_lm_folder(tmp_path_factory):
    """A tiny random LLaMA with SmolLM2's tokenizer (so the real haystacks and needles apply)."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from icml26.core.data.lm import model_path

    d = tmp_path_factory.mktemp("tiny-lm")
    tok = AutoTokenizer.from_pretrained(str(model_path("llama")), local_files_only=True)
    tok.save_pretrained(str(d))
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        tie_word_embeddings=True,
        max_position_embeddings=1024,
    )
    LlamaForCausalLM(cfg).save_pretrained(str(d))
    return d


@pytest.mark.slow  # about 15 s of CPU (the tokenizer folder, three runs)
def test_resumed_decode_run_measures_what_an_uninterrupted_one_does(tiny_lm_folder):
    """The benchmark resumes per (haystack, policy, budget): with the saved records and the full
    cache's generations given back, ``run_decode`` runs only what is missing, and those
    measurements equal an uninterrupted run's (the reference distributions do not depend on
    whether the full cache generated in the same call)."""
    from icml26.methods.kvcache import evaluate as E
    from icml26.methods.kvcache.decode import run_decode

    cfg = E.Config(
        mode="decode",
        model=str(tiny_lm_folder),
        methods=("capkv", "streaming"),
        context_tokens=(128,),
        needle_depths=(0.5,),
        samples=2,
        decoding_budgets=(40, 56),
        new_tokens=20,
        timed_tokens=4,
        decoding_interval_tokens=8,
        window_tokens=8,
    )
    key = lambda r: (r["sample_index"], r["method"], r["decoding_budget_tokens"])
    refs: dict = {}
    whole = {key(r): r for r in run_decode(cfg, references=refs) if r["kind"] == "sample"}
    assert len(whole) == 2 * 5 and sorted(refs) == [0, 1] and all(len(g) == 20 for g in refs.values())
    assert whole[(0, "capkv", 40)]["kl"] > 0  # not a vacuous comparison
    done = {k for k in whole if not (k[0] == 1 and k[1] != "full") and k != (0, "streaming", 56)}
    again = {
        key(r): r
        for r in run_decode(cfg, done=done, references={i: list(g) for i, g in refs.items()})
        if r["kind"] == "sample"
    }
    assert set(again) == set(whole) - done
    for k, r in again.items():
        for f in ("kl", "top1_agreement", "answer", "needle_match", "peak_cache_bytes"):
            assert r[f] == whole[k][f], (k, f)
    # a haystack whose full-cache record is missing generates again (and yields it)
    redo = {
        key(r)
        for r in run_decode(cfg, done=set(whole) - {(1, "full", 0)}, references=dict(refs))
        if r["kind"] == "sample"
    }
    assert redo == {(1, "full", 0)}
