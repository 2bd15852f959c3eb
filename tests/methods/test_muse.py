"""MuSe attention (icml26.methods.attention.muse): the multipole expansion recomputed in float64,
exactness when every key is near field, causality, gradients, determinism, sparsity, settings."""

import math

import pytest
import torch

from icml26.methods.attention import muse as M


def _qkv(n=64, h=2, hk=1, d=8, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(1, h, n, d, generator=g, dtype=dtype),
        torch.randn(1, hk, n, d, generator=g, dtype=dtype),
        torch.randn(1, hk, n, d, generator=g, dtype=dtype),
    )


def _rse(a, b):
    return ((a - b) ** 2).sum().item() / (b**2).sum().item()


def _one_cluster_case(eps, d=8, bt=8, seed=1):
    """Two blocks, one query cluster and one key cluster per block: the queries of block 0 have
    mean qbar (the centroid block 1 uses, causal: from the past block), those of block 1 are
    qbar + eps * u, so the far field of block 1 is one tilted summary of block 0."""
    g = torch.Generator().manual_seed(seed)
    k = torch.randn(1, 1, 2 * bt, d, generator=g, dtype=torch.float64)
    v = torch.randn(1, 1, 2 * bt, d, generator=g, dtype=torch.float64)
    qbar = torch.randn(d, generator=g, dtype=torch.float64)
    u = torch.randn(bt, d, generator=g, dtype=torch.float64)
    u = u - u.mean(0)
    q = torch.randn(1, 1, 2 * bt, d, generator=g, dtype=torch.float64)
    q[0, 0, :bt] = qbar + q[0, 0, :bt] - q[0, 0, :bt].mean(0)  # block 0's mean: block 1's centroid
    q[0, 0, bt:] = qbar + eps * u
    return q, k, v, qbar, u


def test_oracle_far_field_recomputed_in_float64():
    bt, d = 8, 8
    q, k, v, qbar, u = _one_cluster_case(0.3, d, bt)
    s = M.MuseSettings(
        block_tokens=bt, query_clusters=1, key_clusters=1, retrieved_clusters=0, variant="muse-noretrieval"
    )
    out = M.muse_attention(q, k, v, s)
    c = 1 / math.sqrt(d)
    kf, vf = k[0, 0, :bt], v[0, 0, :bt]
    w = torch.exp(c * kf @ qbar)  # tilt toward the centroid
    L = torch.log(w.sum())
    kt, vt = (w[:, None] * kf).sum(0) / w.sum(), (w[:, None] * vf).sum(0) / w.sum()
    for i in range(bt):
        qi = q[0, 0, bt + i]
        logz_far = L + c * (qi - qbar) @ kt  # first-order cumulant expansion
        sl = c * k[0, 0, bt : bt + i + 1] @ qi  # exact causal local block
        zl = torch.exp(sl)
        want = (zl @ v[0, 0, bt : bt + i + 1] + torch.exp(logz_far) * vt) / (zl.sum() + torch.exp(logz_far))
        assert torch.allclose(out[0, 0, bt + i], want, atol=1e-12, rtol=0)
    # block 0 has no past: exact causal attention
    assert torch.allclose(out[0, 0, :bt], M.sdpa(q, k, v)[0, 0, :bt], atol=1e-12)


def test_expansion_is_exact_at_the_centroid_and_second_order_in_log_mass():
    """Far values constant (= e) and local values 0: the output is Z_far / (Z_loc + Z_far) e, so its
    error is the log-mass error of the expansion: 0 at q = qbar, O(eps^2) (halving eps: / 4)."""
    bt, d = 8, 8
    errs = []
    for eps in (0.0, 0.2, 0.1, 0.05):
        q, k, v, qbar, u = _one_cluster_case(eps, d, bt)
        v = torch.zeros_like(v)
        v[0, 0, :bt, 0] = 1.0
        s = M.MuseSettings(
            block_tokens=bt, query_clusters=1, key_clusters=1, retrieved_clusters=0, variant="muse-noretrieval"
        )
        out, ex = M.muse_attention(q, k, v, s), M.sdpa(q, k, v)
        errs.append((out[0, 0, bt:, 0] - ex[0, 0, bt:, 0]).abs().max().item())
    assert errs[0] < 1e-14
    for a, b in zip(errs[1:], errs[2:]):
        assert 3.3 < a / b < 4.7, errs
    # the value is only zeroth order: general values give an O(eps) error (halving eps: / 2)
    ev = []
    for eps in (0.1, 0.05):
        q, k, v, qbar, u = _one_cluster_case(eps, d, bt)
        s = M.MuseSettings(
            block_tokens=bt, query_clusters=1, key_clusters=1, retrieved_clusters=0, variant="muse-noretrieval"
        )
        ev.append((M.muse_attention(q, k, v, s) - M.sdpa(q, k, v)).abs().max().item())
    assert 1.6 < ev[0] / ev[1] < 2.4, ev


@pytest.mark.parametrize("variant", ["muse", "block"])
def test_exact_when_every_key_is_near_field(variant):
    q, k, v = _qkv(n=100, h=4, hk=2)
    s = M.MuseSettings(block_tokens=16, query_clusters=4, key_clusters=4, retrieved_clusters=1000, variant=variant)
    out, plan = M.muse_attention(q, k, v, s, return_plan=True)
    assert torch.allclose(out, M.sdpa(q, k, v), atol=1e-12)
    assert M.sparsity(100, plan.exact_pairs) == pytest.approx(0.0, abs=1e-12)


def test_singleton_key_clusters_make_the_far_field_exact():
    q, k, v = _qkv(n=96, h=2, hk=1)
    s = M.MuseSettings(
        block_tokens=16, query_clusters=2, key_clusters=16, retrieved_clusters=0, variant="muse-noretrieval"
    )
    assert torch.allclose(M.muse_attention(q, k, v, s), M.sdpa(q, k, v), atol=1e-12)


@pytest.mark.parametrize("variant", M.VARIANTS)
def test_no_future_key_or_value_contributes(variant):
    q, k, v = _qkv(n=80, h=2, hk=1)
    s = M.MuseSettings(block_tokens=16, query_clusters=2, key_clusters=4, retrieved_clusters=2, variant=variant)
    base = M.muse_attention(q, k, v, s)
    g = torch.Generator().manual_seed(7)
    for t in (0, 5, 15, 16, 37, 63, 78):
        k2, v2 = k.clone(), v.clone()
        k2[:, :, t + 1 :] += 3 * torch.randn(k2[:, :, t + 1 :].shape, generator=g, dtype=k.dtype)
        v2[:, :, t + 1 :] += 3 * torch.randn(v2[:, :, t + 1 :].shape, generator=g, dtype=v.dtype)
        out = M.muse_attention(q, k2, v2, s)
        assert torch.equal(out[:, :, : t + 1], base[:, :, : t + 1]), (variant, t)
    # everything (queries too) from the next block boundary on: outputs before it unchanged
    q2, k2, v2 = q.clone(), k.clone(), v.clone()
    for x in (q2, k2, v2):
        x[:, :, 48:] = torch.randn(x[:, :, 48:].shape, generator=g, dtype=x.dtype)
    assert torch.equal(M.muse_attention(q2, k2, v2, s)[:, :, :48], base[:, :, :48])


@pytest.mark.parametrize("variant", M.VARIANTS)
def test_gradcheck_tiny(variant):
    q, k, v = _qkv(n=24, h=2, hk=1, d=4, seed=3)
    s = M.MuseSettings(
        block_tokens=8,
        query_clusters=2,
        key_clusters=2,
        retrieved_clusters=1,
        variant=variant,
        detach_query_centroids=False,
    )
    _, plan = M.muse_attention(q, k, v, s, return_plan=True)  # assignments and retrieved sets are constants
    inputs = tuple(x.clone().requires_grad_(True) for x in (q, k, v))
    assert torch.autograd.gradcheck(
        lambda a, b, c: M.muse_attention(a, b, c, s, plan=plan), inputs, eps=1e-6, atol=1e-6, fast_mode=True
    )


def test_gradients_reach_keys_and_values_through_the_summaries():
    q, k, v = _qkv(n=64, h=2, hk=1)
    s = M.MuseSettings(
        block_tokens=16, query_clusters=2, key_clusters=4, retrieved_clusters=0, variant="muse-noretrieval"
    )
    k = k.clone().requires_grad_(True)
    v = v.clone().requires_grad_(True)
    out = M.muse_attention(q, k, v, s)
    out[:, :, 48:].sum().backward()  # the last block sees blocks 0-2 only through summaries
    assert k.grad[:, :, :48].abs().sum() > 0 and v.grad[:, :, :48].abs().sum() > 0


def test_deterministic():
    q, k, v = _qkv(n=200, h=3, hk=1, dtype=torch.float32)
    s = M.MuseSettings(block_tokens=32, query_clusters=4, key_clusters=8, retrieved_clusters=3)
    assert torch.equal(M.muse_attention(q, k, v, s), M.muse_attention(q.clone(), k.clone(), v.clone(), s))


def test_gqa_equals_repeated_kv_heads():
    q, k, v = _qkv(n=64, h=4, hk=2)
    s = M.MuseSettings(block_tokens=16, query_clusters=2, key_clusters=4, retrieved_clusters=2)
    a = M.muse_attention(q, k, v, s)
    b = M.muse_attention(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), s)
    assert torch.allclose(a, b, atol=1e-12)


def test_balanced_clusters_are_equal_size_and_separate_clear_groups():
    g = torch.Generator().manual_seed(0)
    centers = torch.tensor([[5.0, 0], [-5, 0], [0, 5], [0, -5]])
    lab = torch.arange(64) % 4
    x = centers[lab] + 0.3 * torch.randn(64, 2, generator=g)
    order = M.balanced_order(x, 4, 3)
    assert sorted(order.tolist()) == list(range(64))
    groups = lab[order].reshape(4, 16)
    assert all(len(set(gr.tolist())) == 1 for gr in groups)  # each cluster is one true group


def test_sparsity_contract_by_hand():
    # N=64, B=16, 4 key clusters of 4 keys, r=2: local 4 * 16*17/2 = 544; blocks 1-3: 16 queries * 2 * 4
    s = M.MuseSettings(block_tokens=16, query_clusters=2, key_clusters=4, retrieved_clusters=2)
    assert M.exact_pairs_shape(64, s) == 544 + 3 * 128
    assert M.sparsity(64, M.exact_pairs_shape(64, s)) == pytest.approx(1 - 928 / 2080)
    q, k, v = _qkv(n=64)
    _, plan = M.muse_attention(q, k, v, s, return_plan=True)
    assert plan.exact_pairs == 928
    # block is matched on the same number; v1 / noretrieval compute the local blocks only
    assert (
        M.exact_pairs_shape(
            64, M.MuseSettings(block_tokens=16, query_clusters=2, key_clusters=4, retrieved_clusters=2, variant="block")
        )
        == 928
    )
    assert (
        M.exact_pairs_shape(64, M.MuseSettings(block_tokens=16, query_clusters=2, key_clusters=4, variant="muse-v1"))
        == 544
    )


@pytest.mark.parametrize(
    "kw",
    [
        dict(query_clusters=3),
        dict(key_clusters=64, block_tokens=32),
        dict(block_tokens=1),
        dict(lloyd_iters=-1),
        dict(retrieved_clusters=-2),
        dict(variant="moba"),
    ],
)
def test_bad_settings_raise(kw):
    with pytest.raises(ValueError):
        M.MuseSettings(**kw)


def test_bad_shapes_raise():
    q, k, v = _qkv(n=32, h=3, hk=2)
    with pytest.raises(ValueError):
        M.muse_attention(q, k, v)


def test_eval_splits_are_disjoint_and_follow_the_split_rule(tmp_path):
    """``eval_split=val`` windows (to choose settings) come from other documents than the test
    windows: 400 numbered documents, runs of 16 per the split rule (18 train, 1 val, 1 test)."""
    from icml26.methods.attention import harness as H

    f = tmp_path / "docs.txt"
    f.write_text("\n\n".join(f"document {i:03d} " + "x" * 3990 for i in range(400)), encoding="utf-8")
    seen = {}
    for split in ("val", "test"):
        s = H.split_text(split, 10**7, str(f))
        seen[split] = {int(line.split()[1]) for line in s.split("\n\n")}
    assert seen["val"] == set(range(288, 304)) and seen["test"] == set(range(304, 320))
    assert H.Config(eval_split="val").eval_split == "val"
    with pytest.raises(ValueError, match="eval_split"):
        H.Config(eval_split="train")
