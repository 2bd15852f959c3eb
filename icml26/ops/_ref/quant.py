"""Pure-torch twin of the packed INT4/INT8 kernels (fallback and test oracle).

Layout (shared with icml26/csrc/cpu/quant_cpu.cpp): ``w[n, k] = scale[n, g] * q[n, k] + minv[n, g]``
with ``g = k // group_size``; INT8 codes one per byte; INT4 codes two per byte where, in
every block of 64 weights, byte j holds code 64b + j (low nibble) and 64b + 32 + j (high).
"""

from __future__ import annotations

import torch
from torch import Tensor


def pack_int4(q: Tensor) -> Tensor:
    """(N, K) codes in [0, 15] (K % 64 == 0) -> (N, K/2) uint8."""
    n, k = q.shape
    b = q.to(torch.uint8).reshape(n, k // 64, 2, 32)
    return (b[:, :, 0] | (b[:, :, 1] << 4)).reshape(n, k // 2)


def unpack_int4(p: Tensor) -> Tensor:
    """(N, K/2) uint8 -> (N, K) uint8 codes."""
    n, kh = p.shape
    b = p.reshape(n, kh // 32, 1, 32)
    return torch.cat([b & 0x0F, b >> 4], 2).reshape(n, kh * 2)


def dequant(qweight: Tensor, scales: Tensor, mins: Tensor, bits: int, group_size: int) -> Tensor:
    """Packed weight -> (N, K) float32."""
    q = unpack_int4(qweight) if bits == 4 else qweight
    n, k = q.shape
    g = k // group_size
    w = q.float().reshape(n, g, group_size) * scales.reshape(n, g, 1) + mins.reshape(n, g, 1)
    return w.reshape(n, k)


def quant_gemm(x: Tensor, qweight: Tensor, scales: Tensor, mins: Tensor, bits: int, group_size: int) -> Tensor:
    """x (M, K) float32 -> x @ W^T (M, N)."""
    return x @ dequant(qweight, scales, mins, bits, group_size).T


def quantize_act_int8(x: Tensor) -> tuple[Tensor, Tensor]:
    """x (M, K), K % 64 == 0 -> (int8 codes (M, K), scales (M, K/64)): per 64-block, max|x| / 127."""
    m, k = x.shape
    xb = x.reshape(m, k // 64, 64)
    s = xb.abs().amax(-1) / 127.0
    inv = torch.where(s > 0, 1.0 / s, torch.zeros_like(s))
    q = torch.round(xb * inv[..., None]).to(torch.int8)
    return q.reshape(m, k), s


def quantize_act_int16(x: Tensor) -> tuple[Tensor, Tensor]:
    """x (M, K), K % 64 == 0 -> (15-bit codes (M, K) int32 in [-16383, 16383], scales (M, K/64)):
    per 64-block, max|x| / 16383 (the kernel holds each code as 128 * hi + lo, two int8)."""
    m, k = x.shape
    xb = x.reshape(m, k // 64, 64)
    s = xb.abs().amax(-1) / 16383.0
    inv = torch.where(s > 0, 1.0 / s, torch.zeros_like(s))
    q = torch.round(xb * inv[..., None]).to(torch.int32)
    return q.reshape(m, k), s


def quant_gemm_i8act(
    x: Tensor, qweight: Tensor, scales: Tensor, mins: Tensor, group_size: int, bits: int = 4, act_bits: int = 8
) -> Tensor:
    """Packed INT4 / INT8 weights x activations quantized per 64-block to INT8 (``act_bits`` 8) or
    to 15-bit codes (``act_bits`` 16); the offset term uses the exact x."""
    q, s = quantize_act_int8(x) if act_bits == 8 else quantize_act_int16(x)
    xd = (q.float().reshape(x.shape[0], -1, 64) * s[..., None]).reshape(x.shape)
    n = qweight.shape[0]
    k = x.shape[1]
    g = k // group_size
    codes = (unpack_int4(qweight) if bits == 4 else qweight).float().reshape(n, g, group_size) * scales.reshape(n, g, 1)
    y = xd @ codes.reshape(n, k).T
    xsum = x.reshape(x.shape[0], g, group_size).sum(-1)  # (M, G)
    return y + xsum @ mins.reshape(n, g).T


# ----------------------------------------------------------------------------- lean decode runtime
def lean_add_rmsnorm(x: Tensor, delta: Tensor | None, w: Tensor, eps: float) -> Tensor:
    """x += delta (in place, if given); returns w * x / sqrt(mean(x^2) + eps) over the last dim."""
    if delta is not None:
        x.add_(delta)
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def lean_silu_mul(gu: Tensor) -> Tensor:
    """gu (M, 2I) -> silu(gu[:, :I]) * gu[:, I:]."""
    i = gu.shape[1] // 2
    return torch.nn.functional.silu(gu[:, :i]) * gu[:, i:]


def lean_attn_decode(
    qkv: Tensor,
    cos: Tensor,
    sin_signed: Tensor,
    kc: Tensor,
    vc: Tensor,
    pos: int,
    n_heads: int,
    n_kv: int,
    scale: float,
) -> Tensor:
    """One decode token: RoPE on q, k (row ``pos`` of the tables), write k, v to the caches
    (Hkv, T_max, D) at ``pos``, GQA softmax attention over 0..pos. qkv (1, (H + 2 Hkv) D) -> (1, H D)."""
    d = kc.shape[2]
    x = qkv.reshape(n_heads + 2 * n_kv, d)
    qk = x[: n_heads + n_kv]
    r = qk * cos[pos] + torch.roll(qk, d // 2, -1) * sin_signed[pos]
    kc[:, pos] = r[n_heads:]
    vc[:, pos] = x[n_heads + n_kv :]
    q = r[:n_heads].reshape(n_kv, n_heads // n_kv, d) * scale
    p = torch.softmax(q @ kc[:, : pos + 1].transpose(1, 2), -1)
    return (p @ vc[:, : pos + 1]).reshape(1, n_heads * d)
