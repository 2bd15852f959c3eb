"""The MuSe C++ forward (icml26/csrc/cpu/muse_cpu.cpp) against its torch twin, every ISA level,
and the fallbacks (autograd, dtype, muse-v1, ICML26_FORCE_REF)."""

import pytest
import torch

from icml26.core import ext
from icml26.methods.attention import kernel as K
from icml26.methods.attention import muse as M


def _qkv(b, h, hk, n, d, seed=0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(b, hh, n, d, generator=g) for hh in (h, hk, hk))


@pytest.mark.parametrize("variant", K.KERNEL_VARIANTS)
@pytest.mark.parametrize("b,h,hk,n,d,bt,cq,ck,r", [(1, 3, 1, 300, 64, 64, 4, 8, 3), (2, 4, 2, 130, 12, 32, 2, 4, 2),
                                                   (1, 2, 2, 256, 16, 16, 1, 16, 100)])
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


def test_kernel_path_is_taken_only_without_autograd():
    q, k, v = _qkv(1, 2, 1, 128, 16)
    s = M.MuseSettings(block_tokens=32, query_clusters=2, key_clusters=4, retrieved_clusters=2)
    qg = q.clone().requires_grad_(True)
    out = K.attention(qg, k, v, s)  # needs a gradient: the torch twin
    out.sum().backward()
    assert qg.grad is not None and torch.isfinite(qg.grad).all()
    assert K.backend_for(q, M.MuseSettings(variant="muse-v1")) == "ref"
    assert K.backend_for(q.double(), s) == "ref"


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
