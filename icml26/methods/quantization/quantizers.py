"""Uniform integer quantizers for weights, activations and the KV cache.

All quantizers use the affine grid ``w ~= scale * (q - zero)`` with integer codes
``q in [0, 2**bits - 1]``:

- symmetric:  ``zero = 2**(bits-1)`` (fixed), ``scale = clip * max|w| / (2**(bits-1) - 1)``;
  codes are clamped to ``[-2**(bits-1), 2**(bits-1) - 1] + zero``.
- asymmetric: ``scale = clip * (max w - min w) / (2**bits - 1)``, ``zero = round(-min w / scale)``.

Scales are rounded to float16 (``scale.half().float()``) because that is how they are
stored in the packed model, so fake-quantization here and the packed INT4/INT8 kernels
compute the same weights.

Weights: per output channel (``group_size=0``) or in groups of ``group_size`` input
channels; an optional MSE search over clipping ratios per row/group.
Activations: dynamic per-token (one scale per row of the last dim) or static per-tensor
(a scale calibrated once). KV cache: dynamic per (token, head), asymmetric.
Straight-through estimator (STE) for training: ``x + (fq(x) - x).detach()``.
"""

from __future__ import annotations

import torch
from torch import Tensor

_EPS = 1e-8


def _check_bits(bits: int) -> None:
    if not isinstance(bits, int) or not 2 <= bits <= 8:
        raise ValueError(f"bits must be an integer in [2, 8], got {bits!r}")


def _fp16_round(scale: Tensor) -> Tensor:
    return scale.clamp(min=1e-7).to(torch.float16).to(torch.float32).clamp(min=1e-7)


def _grouped(w: Tensor, group_size: int) -> Tensor:
    """(N, K) -> (N, G, gs) with G = K // gs (gs = K when group_size is 0)."""
    n, k = w.shape
    gs = k if group_size in (0, None) or group_size >= k else group_size
    if k % gs:
        raise ValueError(f"group_size {group_size} does not divide the input dimension {k}")
    return w.reshape(n, k // gs, gs)


def qparams(xmin: Tensor, xmax: Tensor, bits: int, sym: bool) -> tuple[Tensor, Tensor]:
    """Scale and zero-point from ranges (any matching shapes). Returns float tensors."""
    _check_bits(bits)
    if sym:
        amax = torch.maximum(xmax.abs(), xmin.abs())
        scale = _fp16_round(amax / (2 ** (bits - 1) - 1))
        zero = torch.full_like(scale, float(2 ** (bits - 1)))
    else:
        xmin = torch.minimum(xmin, torch.zeros_like(xmin))
        xmax = torch.maximum(xmax, torch.zeros_like(xmax))
        scale = _fp16_round((xmax - xmin) / (2**bits - 1))
        zero = torch.round(-xmin / scale).clamp(0, 2**bits - 1)
    return scale, zero


def quantize(x: Tensor, scale: Tensor, zero: Tensor, bits: int) -> Tensor:
    """Integer codes in [0, 2**bits - 1] (as float). scale/zero broadcast against x."""
    return torch.clamp(torch.round(x / scale) + zero, 0, 2**bits - 1)


def dequantize(q: Tensor, scale: Tensor, zero: Tensor) -> Tensor:
    return scale * (q - zero)


def fake_quant(x: Tensor, scale: Tensor, zero: Tensor, bits: int) -> Tensor:
    if torch.is_grad_enabled() and (x.requires_grad or scale.requires_grad):
        return dequantize(quantize(x, scale, zero, bits), scale, zero)
    q = x / scale  # inference: the same arithmetic on one buffer (about 2x faster on activations)
    q.round_().add_(zero).clamp_(0, 2**bits - 1).sub_(zero).mul_(scale)
    return q


def ste(x: Tensor, xq: Tensor) -> Tensor:
    """Straight-through estimator: forward ``xq``, gradient of identity (``xq`` itself when no
    gradient is recorded)."""
    if not (torch.is_grad_enabled() and x.requires_grad):
        return xq
    return x + (xq - x).detach()


# ----------------------------------------------------------------------------- weights
def weight_qparams(
    w: Tensor,
    bits: int,
    *,
    sym: bool = True,
    group_size: int = 0,
    clip_search: bool = False,
    clip_grid: int = 20,
    clip_min: float = 0.6,
) -> tuple[Tensor, Tensor]:
    """Per-channel / per-group scale and zero of a weight matrix.

    w: (N, K) out x in. Returns scale, zero of shape (N, G), G = K // group_size (1 per channel).
    clip_search: pick per row/group the clipping ratio in [clip_min, 1] that minimises the
    squared reconstruction error (the usual "MSE clipping" of GPTQ/QuaRot implementations)."""
    if w.dim() != 2:
        raise ValueError(f"weight must be 2-D (out, in), got shape {tuple(w.shape)}")
    wg = _grouped(w.detach().float(), group_size)  # (N, G, gs)
    wmin, wmax = wg.amin(-1), wg.amax(-1)
    scale, zero = qparams(wmin, wmax, bits, sym)
    if clip_search:
        best = ((fake_quant(wg, scale[..., None], zero[..., None], bits) - wg) ** 2).sum(-1)
        for i in range(1, clip_grid):
            r = 1.0 - (1.0 - clip_min) * i / (clip_grid - 1)
            s, z = qparams(wmin * r, wmax * r, bits, sym)
            err = ((fake_quant(wg, s[..., None], z[..., None], bits) - wg) ** 2).sum(-1)
            better = err < best
            best = torch.where(better, err, best)
            scale = torch.where(better, s, scale)
            zero = torch.where(better, z, zero)
    return scale, zero


def quantize_weight(
    w: Tensor, bits: int, *, sym: bool = True, group_size: int = 0, clip_search: bool = False
) -> tuple[Tensor, Tensor, Tensor]:
    """Integer codes (N, K) uint8 plus scale, zero (N, G) float32."""
    scale, zero = weight_qparams(w, bits, sym=sym, group_size=group_size, clip_search=clip_search)
    wg = _grouped(w.detach().float(), group_size)
    q = quantize(wg, scale[..., None], zero[..., None], bits).reshape(w.shape).to(torch.uint8)
    return q, scale, zero


def dequantize_weight(q: Tensor, scale: Tensor, zero: Tensor) -> Tensor:
    """Inverse of :func:`quantize_weight`: (N, K) float32."""
    n, k = q.shape
    g = scale.shape[1]
    return (scale[..., None] * (q.float().reshape(n, g, k // g) - zero[..., None])).reshape(n, k)


def fake_quant_weight(
    w: Tensor, bits: int, *, sym: bool = True, group_size: int = 0, clip_search: bool = False, train: bool = False
) -> Tensor:
    """Quantize-dequantize a weight (N, K); with ``train`` the gradient flows by STE
    (scales computed from the detached weight)."""
    if bits >= 16:
        return w
    scale, zero = weight_qparams(w, bits, sym=sym, group_size=group_size, clip_search=clip_search)
    wg = _grouped(w, group_size)
    wq = fake_quant(wg, scale[..., None], zero[..., None], bits).reshape(w.shape)
    return ste(w, wq) if train else wq


# ----------------------------------------------------------------------------- activations
def fake_quant_per_token(x: Tensor, bits: int, *, sym: bool = False, clip_ratio: float = 1.0) -> Tensor:
    """Dynamic per-token quantization: one (scale, zero) per row of the last dim. STE gradient."""
    if bits >= 16:
        return x
    xd = x.detach()
    scale, zero = qparams(xd.amin(-1, keepdim=True) * clip_ratio, xd.amax(-1, keepdim=True) * clip_ratio, bits, sym)
    return ste(x, fake_quant(x, scale, zero, bits))


def fake_quant_per_tensor(x: Tensor, scale: Tensor, zero: Tensor, bits: int) -> Tensor:
    """Static per-tensor quantization with a calibrated (scale, zero). STE gradient."""
    if bits >= 16:
        return x
    return ste(x, fake_quant(x, scale, zero, bits))


def fake_quant_act(
    x: Tensor,
    bits: int,
    granularity: str,
    *,
    sym: bool = False,
    clip_ratio: float = 1.0,
    scale: Tensor | None = None,
    zero: Tensor | None = None,
) -> Tensor:
    """Simulated activation quantization in front of a linear: dynamic per-token, or static
    per-tensor with a calibrated (scale, zero); unchanged when bits >= 16 or a static range is
    not calibrated yet (scale None). Shared by QuantLinear, PackedLinear and the lean runtime."""
    if bits >= 16:
        return x
    if granularity == "per-token":
        return fake_quant_per_token(x, bits, sym=sym, clip_ratio=clip_ratio)
    if scale is not None:
        return fake_quant_per_tensor(x, scale, zero, bits)
    return x


def fake_quant_kv(x: Tensor, bits: int, *, clip_ratio: float = 1.0) -> Tensor:
    """KV-cache quantization: x (B, H, T, D), asymmetric, one (scale, zero) per (b, h, t)."""
    return fake_quant_per_token(x, bits, sym=False, clip_ratio=clip_ratio)


class RangeObserver:
    """Running min/max of a tensor (static per-tensor calibration)."""

    def __init__(self) -> None:
        self.xmin: Tensor | None = None
        self.xmax: Tensor | None = None

    def update(self, x: Tensor) -> None:
        lo, hi = x.detach().amin().float(), x.detach().amax().float()
        self.xmin = lo if self.xmin is None else torch.minimum(self.xmin, lo)
        self.xmax = hi if self.xmax is None else torch.maximum(self.xmax, hi)

    def qparams(self, bits: int, sym: bool, clip_ratio: float = 1.0) -> tuple[Tensor, Tensor]:
        if self.xmin is None:
            raise RuntimeError("observer saw no data")
        return qparams(self.xmin * clip_ratio, self.xmax * clip_ratio, bits, sym)
