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
    full = ops.quant_linear(x.reshape(2, 3, 256), qw, s, mins, 4, 64)           # prefill path
    rows = torch.cat([ops.quant_linear(x[i:i + 1], qw, s, mins, 4, 64) for i in range(6)])  # GEMV path
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


@pytest.mark.parametrize("n,k,gs,m", [(96, 576, 576, 1), (64, 1536, 128, 2), (5, 64, 64, 1)])
def test_int8_activation_path(n, k, gs, m):
    _, qw, s, mins, x = _case(4, n, k, gs, m, seed=3)
    exact = ref.quant_gemm(x, qw, s, mins, 4, gs)
    want = ref.quant_gemm_i8act(x, qw, s, mins, gs)
    # INT8 per-64 activations: close to the fp32-activation result
    assert ((want - exact).abs().max() / exact.abs().max()).item() < 2e-2
    q, xs = ref.quantize_act_int8(x)
    assert q.abs().max() <= 127 and torch.allclose(xs, x.reshape(m, -1, 64).abs().amax(-1) / 127)
    if ops.backend() == "ref":
        pytest.skip("C++ extension unavailable")
    for level in (-1, 0):
        got = torch.ops.icml26.quant_gemm_i8act(x, qw, s, mins, gs, level)
        assert torch.allclose(got, want, rtol=1e-4, atol=1e-4 * want.abs().max().item())
    got = ops.quant_linear(x, qw, s, mins, 4, gs, act_int8=True)
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-4 * want.abs().max().item())
