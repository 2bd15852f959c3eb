"""Oracle tests of the weight / activation / KV quantizers (closed forms recomputed by hand)."""

import pytest
import torch

from icml26.methods.quantization import quantizers as Q


def test_symmetric_per_channel_oracle():
    w = torch.tensor([[0.7, -1.4, 0.35, 0.0], [2.0, 1.0, -0.5, 0.25]])
    q, s, z = Q.quantize_weight(w, 4, sym=True, group_size=0)
    # scale = max|w| / 7 (rounded to fp16), zero = 8
    exp_s = (w.abs().amax(1) / 7).half().float()
    assert torch.allclose(s[:, 0], exp_s)
    assert torch.all(z == 8)
    exp_q = torch.clamp(torch.round(w / exp_s[:, None]) + 8, 0, 15)
    assert torch.equal(q.float(), exp_q)
    # row 0: -1.4 / 0.2 = -7 -> code 1; 0.7 / 0.2 = 3.5 -> round half to even 4 -> 12
    assert q[0, 1].item() == 1
    wd = Q.dequantize_weight(q, s, z)
    assert torch.allclose(wd, exp_s[:, None] * (exp_q - 8))


def test_asymmetric_group_oracle():
    torch.manual_seed(0)
    w = torch.randn(3, 12)
    q, s, z = Q.quantize_weight(w, 3, sym=False, group_size=4)
    assert s.shape == (3, 3) and z.shape == (3, 3)
    wg = w.reshape(3, 3, 4)
    lo = wg.amin(-1).clamp(max=0)
    hi = wg.amax(-1).clamp(min=0)
    exp_s = ((hi - lo) / 7).half().float()
    assert torch.allclose(s, exp_s)
    assert torch.equal(z, torch.round(-lo / exp_s).clamp(0, 7))
    err = (Q.dequantize_weight(q, s, z) - w).abs()
    assert torch.all(err <= exp_s.repeat_interleave(4, 1) * 0.5 + 1e-6) or err.max() < exp_s.max()
    assert q.max() <= 7 and q.min() >= 0


def test_round_trip_error_bound_and_bits():
    torch.manual_seed(1)
    w = torch.randn(64, 128)
    errs = []
    for bits in (2, 4, 8):
        fq = Q.fake_quant_weight(w, bits, sym=True)
        errs.append((fq - w).pow(2).mean().item())
        s = (w.abs().amax(1, keepdim=True) / (2 ** (bits - 1) - 1)).half().float()
        assert torch.all((fq - w).abs() <= s / 2 + 1e-6)
    assert errs[0] > errs[1] > errs[2]


def test_clip_search_never_worse():
    torch.manual_seed(2)
    w = torch.randn(32, 256)
    w[0, 0] = 12.0  # an outlier makes clipping pay off
    e0 = (Q.fake_quant_weight(w, 4, clip_search=False) - w).pow(2).sum(1)
    e1 = (Q.fake_quant_weight(w, 4, clip_search=True) - w).pow(2).sum(1)
    assert torch.all(e1 <= e0 + 1e-6)
    assert e1[0] < 0.9 * e0[0]


def test_per_token_dynamic_and_static_per_tensor():
    x = torch.tensor([[[0.0, 1.0, 2.0, 3.0], [-4.0, 0.0, 4.0, 8.0]]])
    y = Q.fake_quant_per_token(x, 2, sym=False)
    # row 0: range [0, 3], 2 bits -> scale 1, exact
    assert torch.allclose(y[0, 0], x[0, 0])
    # row 1: range [-4, 8] -> scale 4, zero 1: values on the grid {-4, 0, 4, 8}
    assert torch.allclose(y[0, 1], x[0, 1])
    obs = Q.RangeObserver()
    obs.update(x[0, 0])
    obs.update(x[0, 1])
    s, z = obs.qparams(8, sym=False)
    assert torch.isclose(s, torch.tensor(12 / 255).half().float())
    ys = Q.fake_quant_per_tensor(x, s, z, 8)
    assert (ys - x).abs().max() <= s / 2 + 1e-6


def test_kv_quant_per_head_token():
    torch.manual_seed(3)
    k = torch.randn(1, 2, 5, 16)
    kq = Q.fake_quant_kv(k, 4)
    s = ((k.amax(-1).clamp(min=0) - k.amin(-1).clamp(max=0)) / 15).half().float()
    assert torch.all((kq - k).abs() <= s[..., None] * 0.5 + 1e-6)
    assert Q.fake_quant_kv(k, 16) is k


def test_ste_gradient_is_identity():
    x = torch.randn(4, 8, requires_grad=True)
    Q.fake_quant_per_token(x, 4).sum().backward()
    assert torch.allclose(x.grad, torch.ones_like(x))
    w = torch.randn(4, 8, requires_grad=True)
    Q.fake_quant_weight(w, 4, train=True).sum().backward()
    assert torch.allclose(w.grad, torch.ones_like(w))


def test_bad_bits_raise():
    with pytest.raises(ValueError):
        Q.quantize_weight(torch.randn(2, 4), 1)
    with pytest.raises(ValueError):
        Q.quantize_weight(torch.randn(2, 6), 4, group_size=4)
