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
    p = dataclasses.replace(
        KVPress(sink_tokens=0, window_tokens=6).params,
        query_source="window",
        window_stats="observed",
        stat_window=stat_window,
    )
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
    ref = [sum(s[0, 0, max(0, i - 1) : i + 2].tolist()) / 3 for i in range(7)]
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
    w = S.capkv_token_weights(
        x2, dataclasses.replace(p, query_source="window", window_stats="observed")
    )  # (B, Hkv, g, T)
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
    press = KVPress(method="capkv-qa", sink_tokens=2, window_tokens=4, question_share=0.25, stat_window=4)
    idx = press.select(x, n)
    q = S.score_capkv_question(x, press.params)
    for h in range(idx.shape[1]):
        top = set(q[0, h].topk(10).indices.tolist())  # floor(0.25 * 40) = 10
        assert top <= set(idx[0, h].tolist())
    assert idx.shape[-1] == n


def test_adaptive_recent_is_the_heads_recency_lift_over_chance():
    # T = 40, sinks 4, window 4: free region R = [4, 36), |R| = 32; span 12 -> n = 8 candidates [28, 36), f = 1/4
    t = 40
    att = torch.zeros(1, 4, t)
    att[0, 0, 4:36] = 1.0 / 32  # no recency preference: m = f -> 0
    att[0, 0, :4] = 5.0  # mass on sinks / window does not count
    att[0, 0, 36:] = 7.0
    att[0, 1, 28:36] = 1.0 / 8  # all of R's mass on the candidates: m = 1 -> all 8
    att[0, 2, 4:28] = 0.5 / 24  # m = 1/2: rho = (1/2 - 1/4) / (3/4) = 1/3 -> floor(8/3) = 2
    att[0, 2, 28:36] = 0.5 / 8
    att[0, 3, 4:12] = 1.0 / 8  # far context only: m = 0 < f -> 0
    extra = S.adaptive_recent(att, 12, sink_tokens=4, window_tokens=4)
    assert extra.tolist() == [[0, 8, 2, 0]]
    # no room beyond the window -> 0; the whole region recent -> all of it
    assert S.adaptive_recent(att, 4, sink_tokens=4, window_tokens=4).tolist() == [[0, 0, 0, 0]]
    assert S.adaptive_recent(att, 60, sink_tokens=4, window_tokens=4).tolist() == [[32, 32, 32, 32]]
    lifted = S.reserve_recent(torch.zeros(1, 4, t), extra, 4)
    assert (lifted[0, 1] > 0).nonzero().flatten().tolist() == list(range(28, 36))
    assert (lifted[0, 2] > 0).nonzero().flatten().tolist() == [34, 35]


@torch.no_grad()
def test_recent_mode_adaptive_keeps_each_heads_recent_extra_and_the_exact_budget():
    _, x = _layer(t=80)
    n = 40
    press = KVPress(
        method="capkv-qa", sink_tokens=2, window_tokens=4, question_share=0.25, stat_window=4, recent_mode="adaptive"
    )
    idx = press.select(x, n)
    assert idx.shape[-1] == n
    p = press.params
    extra = S.adaptive_recent(S.observed_attention(x, p), n - 2 - 10, sink_tokens=2, window_tokens=4)
    q = S.score_capkv_question(x, p)
    for h in range(idx.shape[1]):
        kept = set(idx[0, h].tolist())
        assert set(range(80 - 4 - int(extra[0, h]), 80)) <= kept and {0, 1} <= kept
        assert set(q[0, h].topk(10).indices.tolist()) <= kept  # the retrieval share is still kept
    with pytest.raises(ValueError, match="recent_mode"):
        KVPress(recent_mode="sometimes")


@torch.no_grad()
def test_future_strata_weights_are_the_mean_expected_attention_over_future_positions():
    import math as _m

    _, x = _layer(t=50)
    p = dataclasses.replace(KVPress(sink_tokens=2).params, n_future_positions=6)
    x2, _ = S._without_sinks(x, p)
    one = S.capkv_token_weights(x2, p)  # future_strata=1: the single averaged rotation
    k = x2.keys.float()
    torch.testing.assert_close(S._expected_weights_strata(x2, k, dataclasses.replace(p, future_strata=1)), one)
    # one stratum per position: the mean over p in [T, T+6) of the expected attention under R_p
    got = S.capkv_token_weights(x2, dataclasses.replace(p, future_strata=6))
    b, hkv, t, d = k.shape
    g = x.n_heads // hkv
    mu0, cov0 = S.prerope_moments(x2, p)  # (B, Hq, D), (B, Hq, D, D) before RoPE
    eye = torch.eye(d)[None, None]
    ref = torch.zeros(b, hkv, g, t)
    for pos in range(50, 56):
        cos, sin = x.rotary(torch.zeros(1, 1, d), torch.tensor([[pos]]))
        r = S.rope(eye, cos.expand(1, d, d), sin.expand(1, d, d))[0, 0].T  # column j = R_p e_j
        for h in range(x.n_heads):
            mu, cov = r @ mu0[0, h], r @ cov0[0, h] @ r.T
            kk = k[0, h // g]
            logits = kk @ mu / _m.sqrt(d) + ((kk @ cov) * kk).sum(-1) / (2 * d)
            ref[0, h // g, h % g] += torch.softmax(logits, -1) / 6
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-6)
    assert not torch.allclose(got, one)
    with pytest.raises(ValueError, match="future_strata"):
        KVPress(future_strata=0)


@torch.no_grad()
def test_past_attention_on_all_queries_is_h2o_accumulated_attention_over_t():
    _, x = _layer(t=60)
    p = dataclasses.replace(KVPress(sink_tokens=0).params, stat_tokens=0)
    a = S._past_attention(x, p)  # (B, Hq, T): mean over all 60 prompt queries
    torch.testing.assert_close(S._group_mean(a, x.keys.shape[1]), S.score_h2o(x, p) / 60, rtol=1e-5, atol=1e-7)
    assert torch.allclose(a.sum(-1), torch.ones_like(a.sum(-1)))
    # the continuation weights mix it in with share past_mix
    q = KVPress(sink_tokens=2).params
    x2, _ = S._without_sinks(x, q)
    w0 = S.capkv_token_weights(x2, q)
    w1 = S.capkv_token_weights(x2, dataclasses.replace(q, past_mix=0.25))
    b, hkv, g, t = w0.shape
    torch.testing.assert_close(w1, 0.75 * w0 + 0.25 * S._past_attention(x2, q).view(b, hkv, g, t))
    with pytest.raises(ValueError, match="past_mix"):
        KVPress(past_mix=1.5)
