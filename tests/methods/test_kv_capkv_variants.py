"""CapKV's dev-chosen pieces (query mixture, observed window statistics, score pooling, recency
share) and the evaluation's intervals, against explicit constructions and golden values."""

import dataclasses
import math

import pytest
import torch

from icml26.methods.kvcache import KVPress
from icml26.methods.kvcache import evaluate as E
from icml26.methods.kvcache import scoring as S
from tests.methods.test_kv_sources import _layer


@torch.no_grad()
def test_mixture_weight_is_the_convex_combination_of_the_two_query_populations():
    _, x = _layer()
    p = KVPress(sink_tokens=2, window_tokens=8).params
    x2, _ = S._without_sinks(x, p)
    ww = S.capkv_token_weights(x2, dataclasses.replace(p, query_source="window"))
    wf = S.capkv_token_weights(x2, dataclasses.replace(p, query_source="future-rope"))
    for lam in (0.0, 0.3, 1.0):
        wm = S.capkv_token_weights(x2, dataclasses.replace(p, query_source="mixture", window_mix=lam))
        torch.testing.assert_close(wm, lam * ww + (1 - lam) * wf)


@pytest.mark.parametrize("stat_window, n", [(0, 6), (3, 3)])
@torch.no_grad()
def test_observed_window_weights_are_the_mean_attention_of_the_window_queries(stat_window, n):
    _, x = _layer(t=40)
    p = dataclasses.replace(KVPress(sink_tokens=0, window_tokens=6).params, query_source="window", window_stats="observed",
                            stat_window=stat_window)
    w = S.capkv_token_weights(x, p)  # (B, Hkv, g, T)
    b, hkv, t, d = x.keys.shape
    g = x.n_heads // hkv
    q = S.window_queries(x, n).float()  # (B, Hq, n, D), post-RoPE: the last n queries
    ref = torch.zeros(b, x.n_heads, t)
    for h in range(x.n_heads):
        k = x.keys[0, h // g].float()
        for j in range(n):
            pos = t - n + j  # causal: query j sees keys 0..pos
            a = torch.softmax(q[0, h, j] @ k[: pos + 1].T / math.sqrt(d), -1)
            ref[0, h, : pos + 1] += a / n
    torch.testing.assert_close(w, ref.view(b, hkv, g, t), rtol=1e-5, atol=1e-7)
    assert torch.allclose(w.sum(-1), torch.ones(b, hkv, g))


def test_pool_scores_max_and_avg_match_a_loop():
    s = torch.tensor([[[0.0, 5.0, 1.0, 0.0, 0.0, 2.0, 0.0]]])
    mx = S.pool_scores(s, "max", 3)
    assert mx.tolist() == [[[5.0, 5.0, 5.0, 1.0, 2.0, 2.0, 2.0]]]
    av = S.pool_scores(s, "avg", 3)  # zero-padded ends, as SnapKV's avg_pool1d
    ref = [sum(s[0, 0, max(0, i - 1): i + 2].tolist()) / 3 for i in range(7)]
    torch.testing.assert_close(av[0, 0], torch.tensor(ref))
    assert torch.equal(S.pool_scores(s, "none", 3), s)


@torch.no_grad()
def test_pooled_capkv_keeps_whole_spans_around_its_peaks():
    _, x = _layer(t=60)
    p = dataclasses.replace(KVPress(sink_tokens=2, window_tokens=0).params, pool="max", pool_kernel=5)
    s = S.score_capkv(x, p)
    raw = S.score_capkv(x, dataclasses.replace(p, pool="none"))
    top = int(raw[0, 0, 2:].argmax()) + 2
    for j in range(max(2, top - 2), min(60, top + 3)):  # the peak's neighbours score as the peak
        assert float(s[0, 0, j]) == pytest.approx(float(raw[0, 0, top]))


@torch.no_grad()
def test_recent_share_keeps_that_share_of_the_budget_recent_and_only_for_capkv():
    _, x = _layer(t=80)
    n = 40
    idx = KVPress(method="capkv", sink_tokens=4, window_tokens=8, recent_share=0.5).select(x, n)
    assert idx.shape[-1] == n
    for h in range(idx.shape[1]):
        kept = set(idx[0, h].tolist())
        assert set(range(80 - 20, 80)) <= kept and set(range(4)) <= kept  # floor(0.5 * 40) recent + sinks
    assert S.recent_window(40, 8, 0.5) == 20 and S.recent_window(40, 8, 0.1) == 8
    # baselines ignore it (the share is CapKV's hyperparameter)
    a = KVPress(method="tova", window_tokens=8, recent_share=0.5).select(x, n)
    b = KVPress(method="tova", window_tokens=8).select(x, n)
    assert torch.equal(a, b)
    with pytest.raises(ValueError, match="recent_share"):
        KVPress(recent_share=1.0)


def test_wilson_interval_golden_values():
    lo, hi = E.wilson_interval(0, 20)
    assert lo == 0.0 and hi == pytest.approx(0.1611, abs=1e-4)
    lo, hi = E.wilson_interval(10, 20)
    assert lo == pytest.approx(0.2993, abs=1e-4) and hi == pytest.approx(0.7007, abs=1e-4)
    lo, hi = E.wilson_interval(20, 20)
    assert lo == pytest.approx(0.8389, abs=1e-4) and hi == 1.0


def test_bootstrap_interval_brackets_the_mean_and_is_exact_for_constants():
    import numpy as np

    v = np.random.default_rng(0).exponential(1.0, size=40)
    lo, hi = E.bootstrap_mean_ci(v)
    assert lo < v.mean() < hi
    se = v.std(ddof=1) / math.sqrt(len(v))  # normal approximation: half-width ~ 1.96 se
    assert (hi - lo) / 2 == pytest.approx(1.96 * se, rel=0.25)
    assert E.bootstrap_mean_ci([0.3] * 5) == (pytest.approx(0.3), pytest.approx(0.3))


def test_answer_decoding_stops_once_the_first_number_is_closed():
    assert not E._number_closed(" 846") and E._number_closed(" 84606.") and not E._number_closed(" The")
    assert E.needle_correct(" 84606.", "84606") and not E.needle_correct(" 8460.", "84606")


@torch.no_grad()
def test_question_channel_is_the_pooled_leverage_of_the_observed_window_attention():
    from icml26.ops._ref import kv as R

    _, x = _layer(t=50)
    p = KVPress(sink_tokens=2, window_tokens=8, stat_window=4, pool_kernel=5).params
    got = S.score_capkv_question(x, p)
    x2, s0 = S._without_sinks(x, p)
    w = S.capkv_token_weights(x2, dataclasses.replace(p, query_source="window", window_stats="observed"))  # (B, Hkv, g, T)
    lev = R.weighted_leverage(x2.values.float(), w.mean(2), p.ridge_ratio, True)  # one channel per KV head
    ref = S.pool_scores(lev, "max", 5)
    torch.testing.assert_close(got[..., s0:], ref)


def test_reserve_top_keeps_the_other_channels_top_first_then_fills_by_the_main_scores():
    main = torch.tensor([[[9.0, 8.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.0]]])
    other = torch.tensor([[[0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 5.0, 4.0]]])
    s = S.reserve_top(main, other, 2)
    idx = S.select_indices(s, 4)
    assert idx.tolist() == [[[0, 1, 6, 7]]]  # 2 reserved (6, 7), then the main channel's best two
    assert torch.equal(S.reserve_top(main, other, 0), main)


@torch.no_grad()
def test_question_share_reserves_that_share_of_the_budget_for_the_question_channel():
    _, x = _layer(t=80)
    n = 40
    press = KVPress(method="capkv", sink_tokens=2, window_tokens=4, question_share=0.25, stat_window=4)
    idx = press.select(x, n)
    q = S.score_capkv_question(x, press.params)
    for h in range(idx.shape[1]):
        top = set(q[0, h].topk(10).indices.tolist())  # floor(0.25 * 40) = 10
        assert top <= set(idx[0, h].tolist())
    assert idx.shape[-1] == n
