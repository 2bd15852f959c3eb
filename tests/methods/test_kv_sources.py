"""CapKV's query sources and GQA pooling on a tiny random LLaMA (oracles: explicit constructions)."""

import dataclasses

import torch

from icml26.methods.kvcache import KVPress, capture_layers
from icml26.methods.kvcache import scoring as S
from icml26.ops._ref import kv as R
from tests.methods.test_kv_scoring import tiny_llama


def _layer(t=70, seed=3):
    model = tiny_llama()
    ids = torch.randint(0, 128, (1, t), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad(), capture_layers(model) as cap:
        model(ids, use_cache=True)
    return model, cap[1]


def test_averaged_rope_matrix_is_the_mean_of_the_rotations():
    model, x = _layer()
    d = x.head_dim
    r = S.averaged_rope_matrix(x.rotary, 70, 33, d, "cpu", torch.float32)
    # explicit: rotate the basis vectors at every position and average
    eye = torch.eye(d)[None, None]  # (1, 1, D, D) rows = basis vectors
    mats = []
    for p in range(70, 103):
        cos, sin = x.rotary(torch.zeros(1, 1, d), torch.tensor([[p]]))
        mats.append(S.rope(eye, cos.expand(1, d, d), sin.expand(1, d, d))[0, 0].T)  # column j = R_p e_j
    torch.testing.assert_close(r, torch.stack(mats).mean(0), rtol=1e-5, atol=1e-6)


def test_joint_is_the_sum_of_the_two_channels_and_pool_uses_the_group_mean_weight():
    _, x = _layer()
    p = KVPress(sink_tokens=2, window_tokens=8).params
    joint = S.score_capkv(x, dataclasses.replace(p, query_source="joint"))
    win = S.score_capkv(x, dataclasses.replace(p, query_source="window"))
    fr = S.score_capkv(x, dataclasses.replace(p, query_source="future-rope"))
    torch.testing.assert_close(joint[..., 2:], win[..., 2:] + fr[..., 2:])
    # gqa=pool: one leverage per KV head with the mean weight of its query heads
    x2, s0 = S._without_sinks(x, p)
    w = S.capkv_token_weights(x2, p)  # (B, Hkv, g, T)
    ref = R.weighted_leverage(x2.values.float(), w.mean(2), p.ridge_ratio, True)
    torch.testing.assert_close(fr[..., s0:], ref)
    # mixture: the average of the two sources' weights
    wm = S.capkv_token_weights(x2, dataclasses.replace(p, query_source="mixture"))
    ww = S.capkv_token_weights(x2, dataclasses.replace(p, query_source="window"))
    torch.testing.assert_close(wm, (w + ww) / 2)


@torch.no_grad()
def test_future_rope_subsample_matches_all_queries_when_short_and_is_the_strided_subset_when_long():
    _, x = _layer(t=90)
    p = KVPress().params
    mu0, cov0 = S.query_statistics(x, dataclasses.replace(p, stat_tokens=0))
    mu1, cov1 = S.query_statistics(x, dataclasses.replace(p, stat_tokens=200))  # T' < 200: all queries
    torch.testing.assert_close(mu0, mu1)
    mu2, cov2 = S.query_statistics(x, dataclasses.replace(p, stat_tokens=30))  # a strided subsample
    h = x.hidden[:, p.sink_tokens :]
    idx = torch.linspace(0, h.shape[1] - 1, 30).round().long()
    q = S.prerope_queries(x.module, h[:, idx]).float()
    r = S.averaged_rope_matrix(x.rotary, 90, p.n_future_positions, x.head_dim, "cpu", torch.float32)
    torch.testing.assert_close(mu2, q.mean(2) @ r.T)
    c = q - q.mean(2, keepdim=True)
    torch.testing.assert_close(cov2, r @ (c.transpose(-1, -2) @ c / 30) @ r.T)


@torch.no_grad()
def test_queries_saved_from_the_forward_equal_recomputed_ones():
    _, x = _layer()
    assert x.q_proj_out is not None  # captured from the prefill's own q_proj call
    p = KVPress(sink_tokens=2, window_tokens=8).params
    y = dataclasses.replace(x, q_proj_out=None)  # recompute from the hidden states
    for src in ("future-rope", "window"):
        q = dataclasses.replace(p, query_source=src)
        torch.testing.assert_close(S.score_capkv(x, q), S.score_capkv(y, q), rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(S.score_snapkv(x, p), S.score_snapkv(y, p), rtol=1e-5, atol=1e-7)


def test_grouped_expected_weights_equal_the_generic_formula():
    g = torch.Generator().manual_seed(0)
    k = torch.randn(1, 2, 30, 8, generator=g)
    mu = torch.randn(1, 2, 3, 8, generator=g)
    a = torch.randn(1, 2, 3, 8, 8, generator=g)
    cov = a @ a.transpose(-1, -2) / 8  # symmetric PSD, like a covariance
    p = KVPress(weight="expected").params
    torch.testing.assert_close(S._expected_weights_grouped(k, mu, cov), S.capkv_weights(k.unsqueeze(2), mu, cov, p))
