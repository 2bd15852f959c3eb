"""Packed INT4 / INT8 weight GEMV/GEMM: validation, then the C++ kernel
(``torch.ops.icml26.quant_gemm``, icml26/csrc/cpu/quant_cpu.cpp: AVX-512 / AVX2+FMA /
portable, chosen at run time) or the pure-torch twin ``icml26/ops/_ref/quant.py``.

``quant_linear`` uses the kernel for small batches (decode: M <= ``GEMV_MAX_ROWS``) and,
for prefill, dequantizes the weight tile by tile into a cache-resident buffer, each tile through
the BLAS matmul (``quant_linear_tiled``).
CUDA tensors go to ``icml26/ops/quant_cuda.py`` (kernel ``icml26/csrc/cuda/quant_cuda.cu``:
GEMV and small-M GEMM, fp32 / fp16 / bf16 activations), or to the reference on the GPU if
that kernel cannot be built.
"""

from __future__ import annotations

import torch
from torch import Tensor

from icml26.core import ext
from icml26.ops._ref import quant as _ref

GEMV_MAX_ROWS = 4
ISA = {0: "portable", 1: "avx2+fma", 2: "avx512f/bw"}
INT_ISA = {0: "portable", 1: "avx2 (vpmaddubsw)", 3: "avx-vnni (vpdpbusd)", 4: "avx512-vnni (vpdpbusd)"}
pack_int4 = _ref.pack_int4
unpack_int4 = _ref.unpack_int4


def backend() -> str:
    return ext.load("quant", ["cpu/quant_cpu.cpp", "cpu/quant_lean_cpu.cpp"])


def isa() -> str:
    """The instruction set the C++ kernel dispatched to (or 'ref')."""
    if backend() == "ref":
        return "ref"
    return ISA.get(int(torch.ops.icml26.quant_isa_level()), "?")


def int_isa() -> str:
    """The instruction set of the INT8-activation (integer dot product) kernel (or 'ref')."""
    if backend() == "ref":
        return "ref"
    return INT_ISA.get(int(torch.ops.icml26.quant_int_isa_level()), "?")


def int_levels() -> list[int]:
    """Integer-activation ISA levels this CPU can run (for parity tests)."""
    if backend() == "ref":
        return []
    return [lv for lv in INT_ISA if torch.ops.icml26.quant_int_level_supported(lv)]


def _check(x: Tensor, qweight: Tensor, scales: Tensor, mins: Tensor, bits: int, group_size: int) -> None:
    if not isinstance(x, Tensor) or not isinstance(qweight, Tensor):
        raise TypeError("quant_gemm: x and qweight must be tensors")
    if bits not in (4, 8):
        raise ValueError(f"quant_gemm: bits must be 4 or 8, got {bits}")
    half_ok = x.is_cuda and x.dtype in (torch.float16, torch.bfloat16)  # the CUDA kernel also takes these
    if x.dim() != 2 or (x.dtype != torch.float32 and not half_ok):
        raise ValueError(
            f"quant_gemm: x must be float32 (M, K) (or float16 / bfloat16 on CUDA), got {x.dtype} {tuple(x.shape)}"
        )
    if qweight.dtype != torch.uint8 or qweight.dim() != 2:
        raise ValueError(f"quant_gemm: qweight must be uint8 (N, K*bits/8), got {qweight.dtype} {tuple(qweight.shape)}")
    k = x.shape[1]
    if qweight.shape[1] * 8 != k * bits:
        raise ValueError(f"quant_gemm: qweight width {qweight.shape[1]} does not match K={k} at {bits} bits")
    if group_size <= 0 or k % group_size or (bits == 4 and group_size % 64):
        raise ValueError(f"quant_gemm: group_size {group_size} must divide K={k} (and be a multiple of 64 for INT4)")
    g = k // group_size
    for name, t in (("scales", scales), ("mins", mins)):
        if t.dtype != torch.float32 or tuple(t.shape) != (qweight.shape[0], g):
            raise ValueError(
                f"quant_gemm: {name} must be float32 ({qweight.shape[0]}, {g}), got {t.dtype} {tuple(t.shape)}"
            )


def quant_gemm(
    x: Tensor, qweight: Tensor, scales: Tensor, mins: Tensor, bits: int, group_size: int, *, force_ref: bool = False
) -> Tensor:
    """y = x @ W^T with W the packed weight (see module doc). x (M, K) float32 -> (M, N)."""
    _check(x, qweight, scales, mins, bits, group_size)
    if x.is_cuda and not force_ref:
        from icml26.ops import quant_cuda

        return quant_cuda.quant_gemm(x, qweight, scales, mins, bits, group_size)
    if force_ref or x.device.type != "cpu" or backend() == "ref":
        return _ref.quant_gemm(x.float(), qweight, scales, mins, bits, group_size).to(x.dtype)
    return torch.ops.icml26.quant_gemm(
        x.contiguous(), qweight.contiguous(), scales.contiguous(), mins.contiguous(), bits, group_size, -1
    )


def quant_gemm_i8act(
    x: Tensor,
    qweight: Tensor,
    scales: Tensor,
    mins: Tensor,
    group_size: int,
    *,
    bits: int = 4,
    act_bits: int = 8,
    force_ref: bool = False,
) -> Tensor:
    """INT4 / INT8 packed weights x activations quantized per block of 64 inside the kernel,
    integer dot products: ``act_bits`` 8 = INT8 codes (llama.cpp's Q8 activations; VNNI where
    the CPU has it), 16 = 15-bit codes held as two int8 halves (twice the integer work, ~100x
    smaller activation error). x (M, K) float32 -> (M, N)."""
    _check(x, qweight, scales, mins, bits, group_size)
    if act_bits not in (8, 16):
        raise ValueError(f"quant_gemm_i8act: act_bits must be 8 or 16, got {act_bits}")
    if x.shape[1] % 64 or group_size % 64:
        raise ValueError(f"quant_gemm_i8act: K={x.shape[1]} and group_size={group_size} must be multiples of 64")
    if x.is_cuda and not force_ref:
        from icml26.ops import quant_cuda

        return quant_cuda.quant_gemm_i8act(x, qweight, scales, mins, group_size, bits, act_bits)
    if force_ref or x.device.type != "cpu" or backend() == "ref":
        return _ref.quant_gemm_i8act(x.float(), qweight, scales, mins, group_size, bits, act_bits).to(x.dtype)
    return torch.ops.icml26.quant_gemm_i8act(
        x.contiguous(), qweight.contiguous(), scales.contiguous(), mins.contiguous(), group_size, -1, bits, act_bits
    )


def quant_linear(
    x: Tensor,
    qweight: Tensor,
    scales: Tensor,
    mins: Tensor,
    bits: int,
    group_size: int,
    *,
    checked: bool = False,
    act_int8: bool = False,
    int_act: int = 0,
) -> Tensor:
    """Linear layer on (..., K) input: kernel GEMV for few rows, dequantize + BLAS otherwise.

    ``checked=True`` (packed layers validated their buffers once at load time) skips the
    per-call validation of the weight tensors, which matters at decode. ``int_act`` (8 or 16;
    ``act_int8=True`` means 8) runs the decode GEMV with activations quantized per 64-block to
    INT8 or 15-bit integer codes (integer dot products; needs group_size % 64 == 0); 0 keeps
    fp32 activations. CUDA input: ``quant_cuda.linear`` (the CUDA kernel for <= 16 rows, exact
    activations of x's dtype; ``int_act`` is a CPU option and not used there)."""
    if x.is_cuda:
        from icml26.ops import quant_cuda

        return quant_cuda.linear(x, qweight, scales, mins, bits, group_size)
    if act_int8 and not int_act:
        int_act = 8
    shp = x.shape
    x2 = x.reshape(-1, shp[-1]).float()
    if x2.shape[0] <= GEMV_MAX_ROWS:
        if int_act and group_size % 64 == 0:
            if checked and x2.device.type == "cpu" and backend() != "ref":
                y = torch.ops.icml26.quant_gemm_i8act(
                    x2.contiguous(), qweight, scales, mins, group_size, -1, bits, int_act
                )
            else:
                y = quant_gemm_i8act(x2.contiguous(), qweight, scales, mins, group_size, bits=bits, act_bits=int_act)
        elif checked and x2.device.type == "cpu" and backend() != "ref":
            y = torch.ops.icml26.quant_gemm(x2.contiguous(), qweight, scales, mins, bits, group_size, -1)
        else:
            y = quant_gemm(x2.contiguous(), qweight, scales, mins, bits, group_size)
    elif x2.device.type == "cpu" and backend() != "ref" and (bits == 8 or shp[-1] % 64 == 0):
        y = torch.ops.icml26.quant_linear_tiled(
            x2.contiguous(), qweight, scales, mins, bits, group_size, _tile_rows(shp[-1])
        )
    else:
        y = x2 @ _ref.dequant(qweight, scales, mins, bits, group_size).T
    return y.reshape(*shp[:-1], y.shape[-1])


def _tile_rows(k: int) -> int:
    """Rows of the prefill tile: about 256 KiB of fp32 weights (an L2-resident buffer)."""
    return max(16, (256 * 1024) // (4 * k))


def quant_linear_tiled(x: Tensor, qweight: Tensor, scales: Tensor, mins: Tensor, bits: int, group_size: int) -> Tensor:
    """Prefill GEMM x (M, K) @ W^T with the weight dequantized tile by tile (C++); twin: ``_ref.quant_gemm``."""
    _check(x, qweight, scales, mins, bits, group_size)
    if backend() == "ref":
        return _ref.quant_gemm(x, qweight, scales, mins, bits, group_size)
    return torch.ops.icml26.quant_linear_tiled(
        x.contiguous(), qweight, scales, mins, bits, group_size, _tile_rows(x.shape[-1])
    )


def lean_ops() -> tuple:
    """(add_rmsnorm, silu_mul, attn_decode) of the lean decode runtime: the C++ ops
    (icml26/csrc/cpu/quant_lean_cpu.cpp) or their pure-torch twins. No validation beyond the
    C++ checks: the runtime builds its own inputs."""
    if backend() == "ref":
        return _ref.lean_add_rmsnorm, _ref.lean_silu_mul, _ref.lean_attn_decode
    return (
        torch.ops.icml26.lean_add_rmsnorm.default,
        torch.ops.icml26.lean_silu_mul.default,
        torch.ops.icml26.lean_attn_decode.default,
    )
