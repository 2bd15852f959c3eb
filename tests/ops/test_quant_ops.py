"""Packed INT4/INT8 kernels: the C++ extension (every ISA level available here) against the
pure-torch twin, packing round trips and input validation."""

import pytest
import torch

from icml26.ops import quant as ops
from icml26.ops._ref import quant as ref


def _case(bits, n, k, gs, m, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randint(0, 2**bits, (n, k), generator=g, dtype=torch.uint8)
    qw = ref.pack_int4(q) if bits == 4 else q
    s = torch.rand(n, k // gs, generator=g) * 0.05 + 1e-3
    mins = -s * torch.randint(0, 2**bits, (n, k // gs), generator=g).float()
    x = torch.randn(m, k, generator=g)
    return q, qw, s, mins, x


def test_pack_unpack_round_trip_and_layout():
    q = torch.arange(128, dtype=torch.uint8).reshape(1, 128) % 16
    p = ref.pack_int4(q)
    assert p.shape == (1, 64)
    # byte j of a 64-block: code j in the low nibble, code 32 + j in the high nibble
    assert p[0, 0].item() == (q[0, 0].item() | (q[0, 32].item() << 4))
    assert torch.equal(ref.unpack_int4(p), q)


def test_ref_dequant_oracle():
    q, qw, s, mins, x = _case(4, 8, 128, 64, 2)
    w = ref.dequant(qw, s, mins, 4, 64)
    exp = q.float() * s.repeat_interleave(64, 1) + mins.repeat_interleave(64, 1)
    assert torch.allclose(w, exp)
    assert torch.allclose(ref.quant_gemm(x, qw, s, mins, 4, 64), x @ exp.T, atol=1e-5)


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("n,k,gs,m", [(96, 576, 576, 1), (64, 1536, 128, 1), (33, 192, 64, 3), (7, 128, 128, 2)])
def test_ext_matches_ref_every_isa(bits, n, k, gs, m):
    if ops.backend() == "ref":
        pytest.skip("C++ extension unavailable (compiler missing); ref path is what runs")
    _, qw, s, mins, x = _case(bits, n, k, gs, m)
    want = ref.quant_gemm(x, qw, s, mins, bits, gs)
    for level in (-1, 0, 1):
        got = torch.ops.icml26.quant_gemm(x, qw, s, mins, bits, gs, level)
        assert torch.allclose(got, want, rtol=1e-4, atol=1e-4 * want.abs().max().item())
    assert ops.isa() in ("portable", "avx2+fma", "avx512f/bw")


def test_quant_linear_gemv_and_prefill_agree():
    _, qw, s, mins, x = _case(4, 48, 256, 64, 6)
    w = ref.dequant(qw, s, mins, 4, 64)
    full = ops.quant_linear(x.reshape(2, 3, 256), qw, s, mins, 4, 64)  # prefill path
    rows = torch.cat([ops.quant_linear(x[i : i + 1], qw, s, mins, 4, 64) for i in range(6)])  # GEMV path
    assert torch.allclose(full.reshape(6, 48), x @ w.T, atol=1e-4)
    assert torch.allclose(rows, x @ w.T, atol=1e-4)


def test_validation_errors():
    _, qw, s, mins, x = _case(4, 8, 128, 64, 1)
    with pytest.raises(ValueError):
        ops.quant_gemm(x, qw, s, mins, 3, 64)
    with pytest.raises(ValueError):
        ops.quant_gemm(x[:, :64], qw, s, mins, 4, 64)
    with pytest.raises(ValueError):
        ops.quant_gemm(x, qw, s, mins, 4, 32)
    with pytest.raises(ValueError):
        ops.quant_gemm(x.double(), qw, s, mins, 4, 64)
    with pytest.raises(ValueError):
        ops.quant_gemm(x, qw, s[:, :1], mins, 4, 64)


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("n,k,gs,m", [(96, 576, 576, 1), (64, 1536, 128, 2), (5, 64, 64, 1), (7, 128, 64, 3)])
def test_integer_activation_paths(bits, n, k, gs, m):
    """INT4/INT8 weights x INT8 or 15-bit activations: kernel at every integer ISA level this CPU
    runs (portable, AVX2 vpmaddubsw, AVX-VNNI / AVX512-VNNI vpdpbusd where present) vs the twin."""
    _, qw, s, mins, x = _case(bits, n, k, gs, m, seed=3)
    x[:, 3] = 60.0  # an outlier channel, as in real LLM activations
    exact = ref.quant_gemm(x, qw, s, mins, bits, gs)
    want8 = ref.quant_gemm_i8act(x, qw, s, mins, gs, bits, 8)
    want16 = ref.quant_gemm_i8act(x, qw, s, mins, gs, bits, 16)
    e8 = ((want8 - exact).norm() / exact.norm()).item()
    e16 = ((want16 - exact).norm() / exact.norm()).item()
    # INT8 per-64 activations lose the small channels next to the outlier; 15-bit codes do not
    assert e16 < 1e-3 and e16 < e8 / 20
    q, xs = ref.quantize_act_int8(x)
    assert q.abs().max() <= 127 and torch.allclose(xs, x.reshape(m, -1, 64).abs().amax(-1) / 127)
    q16, xs16 = ref.quantize_act_int16(x)
    assert q16.abs().max() <= 16383
    if ops.backend() == "ref":
        pytest.skip("C++ extension unavailable")
    levels = ops.int_levels()
    assert 0 in levels
    for want, ab in ((want8, 8), (want16, 16)):
        for level in [-1] + levels:
            got = torch.ops.icml26.quant_gemm_i8act(x, qw, s, mins, gs, level, bits, ab)
            assert torch.allclose(got, want, rtol=1e-4, atol=1e-4 * want.abs().max().item()), (ab, level)
        got = ops.quant_linear(x, qw, s, mins, bits, gs, int_act=ab)
        assert torch.allclose(got, want, rtol=1e-4, atol=1e-4 * want.abs().max().item())
        assert torch.allclose(
            ops.quant_gemm_i8act(x, qw, s, mins, gs, bits=bits, act_bits=ab),
            want,
            rtol=1e-4,
            atol=1e-4 * want.abs().max().item(),
        )
    assert ops.int_isa() in ops.INT_ISA.values()
    with pytest.raises(ValueError):
        ops.quant_gemm_i8act(x, qw, s, mins, gs, bits=bits, act_bits=4)


def test_unsupported_integer_level_is_refused():
    if ops.backend() == "ref":
        pytest.skip("C++ extension unavailable")
    _, qw, s, mins, x = _case(4, 8, 128, 64, 1)
    missing = [lv for lv in ops.INT_ISA if lv not in ops.int_levels()]
    for lv in missing:
        with pytest.raises(RuntimeError):
            torch.ops.icml26.quant_gemm_i8act(x, qw, s, mins, 64, lv, 4, 8)


def test_lean_ops_match_ref():
    """The fused decode ops (RMSNorm + residual add, SiLU * up, RoPE + cache write + GQA attention)."""
    g = torch.Generator().manual_seed(1)
    add, silu, attn = ops.lean_ops()
    x = torch.randn(1, 96, generator=g)
    d = torch.randn(1, 96, generator=g)
    w = torch.rand(96, generator=g) + 0.5
    x1, x2 = x.clone(), x.clone()
    assert torch.allclose(add(x1, d, w, 1e-5), ref.lean_add_rmsnorm(x2, d, w, 1e-5), atol=1e-5)
    assert torch.allclose(x1, x + d) and torch.allclose(x2, x + d)
    gu = torch.randn(2, 64, generator=g) * 4
    assert torch.allclose(silu(gu), ref.lean_silu_mul(gu), atol=1e-5)
    H, Hk, D, T = 6, 2, 16, 20
    qkv = torch.randn(1, (H + 2 * Hk) * D, generator=g)
    cos, sin = torch.randn(T, D, generator=g), torch.randn(T, D, generator=g)
    kc, vc = torch.randn(Hk, T, D, generator=g), torch.randn(Hk, T, D, generator=g)
    kc2, vc2 = kc.clone(), vc.clone()
    got = attn(qkv, cos, sin, kc, vc, 7, H, Hk, D**-0.5)
    want = ref.lean_attn_decode(qkv, cos, sin, kc2, vc2, 7, H, Hk, D**-0.5)
    assert torch.allclose(got, want, atol=1e-5)
    assert torch.allclose(kc, kc2, atol=1e-6) and torch.equal(vc, vc2)
    # the twin is HF's rotate_half RoPE and repeat_kv attention
    x = qkv.reshape(H + 2 * Hk, D)
    s_true = torch.cat([-sin[7, : D // 2], sin[7, D // 2 :]])  # sin_signed -> plain sin
    rot = lambda v: v * cos[7] + torch.cat([-v[..., D // 2 :], v[..., : D // 2]], -1) * s_true  # noqa: E731
    assert torch.allclose(kc2[:, 7], rot(x[H : H + Hk]), atol=1e-6)
    q = rot(x[:H])
    k = torch.cat([kc2[:, :7], kc2[:, 7:8]], 1).repeat_interleave(H // Hk, 0)
    v = vc2[:, :8].repeat_interleave(H // Hk, 0)
    p = torch.softmax((q[:, None] @ k.transpose(1, 2)) * D**-0.5, -1)
    assert torch.allclose(want, (p @ v).reshape(1, H * D), atol=1e-5)


@pytest.mark.parametrize("bits,group_size", [(4, 1024), (4, 64), (8, 1024), (8, 128)])
def test_prefill_tiled_gemm_matches_twin(bits, group_size):
    """Prefill path (M > GEMV_MAX_ROWS): tile-wise dequantize + BLAS equals the twin's dequantize + matmul;
    K = 1024 gives 64-row tiles, so N = 200 spans four tiles, the last one partial."""
    from icml26.ops import quant as ops
    from icml26.ops._ref import quant as ref

    g = torch.Generator().manual_seed(bits + group_size)
    n, k, m = 200, 1024, 37
    codes = torch.randint(0, 2**bits, (n, k), generator=g, dtype=torch.uint8)
    qweight = ref.pack_int4(codes) if bits == 4 else codes
    scales = torch.rand(n, k // group_size, generator=g) * 0.1
    mins = -torch.rand(n, k // group_size, generator=g)
    x = torch.randn(m, k, generator=g)
    want = ref.quant_gemm(x, qweight, scales, mins, bits, group_size)
    got = ops.quant_linear_tiled(x, qweight, scales, mins, bits, group_size)
    assert ops._tile_rows(k) == 64 and got.shape == (m, n)
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-4 * want.abs().max().item())
    y = ops.quant_linear(x[None], qweight, scales, mins, bits, group_size)  # what PackedLinear calls
    assert torch.allclose(y[0], want, rtol=1e-5, atol=1e-4 * want.abs().max().item())
