"""The MuSe C++ forward (icml26/csrc/cpu/muse_cpu.cpp) against its torch twin, every ISA level,
and the fallbacks (autograd, dtype, muse-v1, ICML26_FORCE_REF)."""

import pytest
import torch

from icml26.core import ext
from icml26.methods.attention import muse as M
from icml26.ops import muse as K


def _qkv(b, h, hk, n, d, seed=0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(b, hh, n, d, generator=g) for hh in (h, hk, hk))


@pytest.mark.parametrize("variant", K.KERNEL_VARIANTS)
@pytest.mark.parametrize(
    "b,h,hk,n,d,bt,cq,ck,r",
    [(1, 3, 1, 300, 64, 64, 4, 8, 3), (2, 4, 2, 130, 12, 32, 2, 4, 2), (1, 2, 2, 256, 16, 16, 1, 16, 100)],
)
def test_ext_matches_ref_every_isa(variant, b, h, hk, n, d, bt, cq, ck, r):
    if K.backend() == "ref":
        pytest.skip("C++ extension unavailable (compiler missing); the ref path is what runs")
    q, k, v = _qkv(b, h, hk, n, d)
    s = M.MuseSettings(block_tokens=bt, query_clusters=cq, key_clusters=ck, retrieved_clusters=r, variant=variant)
    with torch.no_grad():
        want = K.attention(q, k, v, s, force_ref=True)
        for level in (-1, 0, 1):
            got = K.attention(q, k, v, s, level=level)
            assert got.shape == want.shape
            assert torch.allclose(got, want, atol=2e-5, rtol=1e-4), (level, (got - want).abs().max().item())
    assert K.isa() in ("portable", "avx2+fma")


def test_autograd_takes_the_kernel_backward_unless_centroids_get_gradients():
    if K.backend() == "ref":
        pytest.skip("C++ extension unavailable (compiler missing); the ref path is what runs")
    q, k, v = _qkv(1, 2, 1, 128, 16)
    s = M.MuseSettings(block_tokens=32, query_clusters=2, key_clusters=4, retrieved_clusters=2)
    qg = q.clone().requires_grad_(True)
    out = K.attention(qg, k, v, s)
    assert _through_kernel(out)
    out.sum().backward()
    assert qg.grad is not None and torch.isfinite(qg.grad).all()
    s2 = M.MuseSettings(
        block_tokens=32, query_clusters=2, key_clusters=4, retrieved_clusters=2, detach_query_centroids=False
    )
    out2 = K.attention(qg, k, v, s2)  # gradients through the centroids: only the torch twin has them
    assert not _through_kernel(out2)
    assert K.backend_for(q, M.MuseSettings(variant="muse-v1")) == "ref"
    assert K.backend_for(q.double(), s) == "ref"


def _through_kernel(out) -> bool:
    """Whether the autograd graph of ``out`` holds the C++ kernel's node (MuseFunction)."""
    todo, seen = [out.grad_fn], set()
    while todo:
        f = todo.pop()
        if f is None or f in seen:
            continue
        seen.add(f)
        if "MuseFunction" in type(f).__name__:
            return True
        todo.extend(n for n, _ in f.next_functions)
    return False


def _twin_grads(q, k, v, s, dout):
    """Autograd gradients of the torch twin in float64, with the cluster orders and retrieved
    sets of the float32 forward (the kernel's)."""
    _, plan = M.muse_attention(q, k, v, s, return_plan=True)
    xs = [x.double().requires_grad_(True) for x in (q, k, v)]
    out = M.muse_attention(*xs, s, plan=plan)
    (out * dout.double()).sum().backward()
    return out.detach(), [x.grad for x in xs]


@pytest.mark.parametrize("variant", K.KERNEL_VARIANTS)
@pytest.mark.parametrize(
    "b,h,hk,n,d,bt,cq,ck,r",
    [(1, 2, 1, 96, 8, 16, 2, 4, 2), (2, 4, 2, 130, 12, 32, 2, 4, 2), (1, 3, 3, 200, 16, 32, 4, 8, 5)],
)
def test_kernel_backward_matches_twin_autograd(variant, b, h, hk, n, d, bt, cq, ck, r):
    if K.backend() == "ref":
        pytest.skip("C++ extension unavailable (compiler missing); the ref path is what runs")
    q, k, v = _qkv(b, h, hk, n, d, seed=1)
    dout = _qkv(b, h, hk, n, d, seed=2)[0]
    s = M.MuseSettings(block_tokens=bt, query_clusters=cq, key_clusters=ck, retrieved_clusters=r, variant=variant)
    want_out, want = _twin_grads(q, k, v, s, dout)
    for level in (0, 1):
        xs = [x.clone().requires_grad_(True) for x in (q, k, v)]
        out = K.attention(*xs, s, level=level)
        assert _through_kernel(out)
        (out * dout).sum().backward()
        assert torch.allclose(out.double(), want_out, atol=1e-5, rtol=1e-5)
        for name, x, w in zip("qkv", xs, want):
            err = (x.grad.double() - w).abs().max().item()
            assert err <= 2e-5 * w.abs().max().item() + 1e-6, (level, name, err)


def test_kernel_backward_is_causal():
    """A loss on the first 64 tokens gives exactly zero gradient to every later key and value."""
    if K.backend() == "ref":
        pytest.skip("C++ extension unavailable (compiler missing); the ref path is what runs")
    q, k, v = _qkv(1, 2, 1, 160, 16, seed=4)
    s = M.MuseSettings(block_tokens=32, query_clusters=2, key_clusters=4, retrieved_clusters=2)
    xs = [x.clone().requires_grad_(True) for x in (q, k, v)]
    out = K.attention(*xs, s)
    out[:, :, :64].pow(2).sum().backward()
    assert xs[1].grad[:, :, :64].abs().sum() > 0 and xs[2].grad[:, :, :64].abs().sum() > 0
    assert torch.equal(xs[1].grad[:, :, 64:], torch.zeros_like(xs[1].grad[:, :, 64:]))
    assert torch.equal(xs[2].grad[:, :, 64:], torch.zeros_like(xs[2].grad[:, :, 64:]))
    assert torch.equal(xs[0].grad[:, :, 64:], torch.zeros_like(xs[0].grad[:, :, 64:]))


def test_force_ref_env(monkeypatch):
    q, k, v = _qkv(1, 2, 1, 100, 8)
    s = M.MuseSettings(block_tokens=16, query_clusters=2, key_clusters=4, retrieved_clusters=2)
    monkeypatch.setenv("ICML26_FORCE_REF", "1")
    ext.reset("muse")
    try:
        assert K.backend() == "ref"
        with torch.no_grad():
            assert torch.equal(K.attention(q, k, v, s), M.muse_attention(q, k, v, s))
    finally:
        monkeypatch.delenv("ICML26_FORCE_REF")
        ext.reset("muse")
