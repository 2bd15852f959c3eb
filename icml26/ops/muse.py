"""MuSe forward and backward: the C++ kernel (icml26/csrc/cpu/muse_cpu.cpp,
``torch.ops.icml26.muse_forward`` / ``muse_backward``; AVX2+FMA / portable, chosen at run time)
or its torch twin ``icml26.ops._ref.muse.muse_attention``; both causal by construction (query
centroids from the previous block, per-token assignment and retrieval; docs/muse.md).

The kernel covers ``muse``, ``muse-noretrieval`` and ``block`` for float32 CPU tensors:
clustering, tilted summaries of the past key clusters only, retrieval, far field, local block,
merge; and, through ``MuseFunction`` (a ``torch.autograd.Function``), the backward of all of it
(the forward is recomputed block by block; cluster orders and retrieved sets are constants, the
query centroids detached). Anything else (``detach_query_centroids=False`` with a gradient,
another dtype or device, ``muse-v1``, ``ICML26_FORCE_REF=1``, no compiler) runs the twin,
which is also the test oracle (tests/methods/test_muse_kernel.py).
"""

from __future__ import annotations

import torch
from torch import Tensor

from icml26.core import ext
from icml26.ops._ref import muse as M
from icml26.ops._ref.muse import (  # noqa: F401  (the twin's public names, for icml26.methods.attention.muse)
    VARIANTS,
    MuseSettings,
    Plan,
    balanced_order,
    make_plan,
    muse_attention,
    sdpa,
    sparsity,
)
from icml26.ops._ref.muse import attention as ref_attention  # noqa: F401  (method name -> (out, sparsity))

ISA = {0: "portable", 1: "avx2+fma"}
KERNEL_VARIANTS = ("muse", "muse-noretrieval", "block")


def backend() -> str:
    return ext.load("muse", ["cpu/muse_cpu.cpp"])


def isa() -> str:
    """The instruction set the C++ kernel dispatched to (or 'ref')."""
    if backend() == "ref":
        return "ref"
    return ISA.get(int(torch.ops.icml26.muse_isa_level()), "?")


def _kernel_ok(q: Tensor, k: Tensor, v: Tensor, s: M.MuseSettings) -> bool:
    if s.variant not in KERNEL_VARIANTS:
        return False
    if (
        torch.is_grad_enabled()
        and (q.requires_grad or k.requires_grad or v.requires_grad)
        and not s.detach_query_centroids
    ):
        return False  # the kernel's backward treats the query centroids as constants
    if any(t.device.type != "cpu" or t.dtype != torch.float32 for t in (q, k, v)):
        return False
    return backend() != "ref"


def backend_for(q: Tensor, s: M.MuseSettings) -> str:
    """Which path ``attention`` takes for q and settings s: 'ext-cpu' or 'ref'."""
    return "ext-cpu" if _kernel_ok(q, q[:, :1], q[:, :1], s) else "ref"


def attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    s: M.MuseSettings,
    *,
    scale: float | None = None,
    force_ref: bool = False,
    level: int = -1,
) -> Tensor:
    """Causal approximate attention of variant ``s.variant``: q (B, H, N, D), k, v (B, Hkv, N, D)
    -> (B, H, N, D). ``level`` forces an ISA level of the kernel (-1 = best; tests)."""
    if q.dim() != 4 or k.shape != v.shape or q.shape[1] % max(1, k.shape[1]):
        raise ValueError(
            f"attention: expected q (B, H, N, D), k, v (B, Hkv, N, D), got {tuple(q.shape)}, {tuple(k.shape)}"
        )
    if force_ref or not _kernel_ok(q, k, v, s):
        return M.muse_attention(q, k, v, s, scale=scale)
    n, d = q.shape[2], q.shape[-1]
    c = float(scale) if scale is not None else d**-0.5
    variant = KERNEL_VARIANTS.index(s.variant)
    pad = (-n) % s.block_tokens  # zero rows at the end, as the twin
    if pad:
        q, k, v = (torch.nn.functional.pad(x, (0, 0, 0, pad)) for x in (q, k, v))
    args = (c, s.block_tokens, s.query_clusters, s.key_clusters, s.lloyd_iters, s.retrieval, variant, level)
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        out = MuseFunction.apply(q.contiguous(), k.contiguous(), v.contiguous(), args)
    else:
        out = torch.ops.icml26.muse_forward(q.contiguous(), k.contiguous(), v.contiguous(), *args)
    return out[:, :, :n] if pad else out


class MuseFunction(torch.autograd.Function):
    """The C++ forward and backward as one autograd node: q (B, H, N, D), k, v (B, Hkv, N, D)
    float32 contiguous CPU, N a multiple of the block; ``args`` = (scale, block_tokens,
    query_clusters, key_clusters, lloyd_iters, retrieved, variant index, ISA level). Saves q, k,
    v, the output and its row log-sum-exp (B, H, N); the backward recomputes orders, summaries
    and retrieved sets."""

    @staticmethod
    def forward(ctx, q, k, v, args):
        out, lse = torch.ops.icml26.muse_forward_lse(q, k, v, *args)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.args = args
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = torch.ops.icml26.muse_backward(q, k, v, out, lse, dout.contiguous(), *ctx.args)
        return dq, dk, dv, None


def exact_pairs(q: Tensor, k: Tensor, s: M.MuseSettings) -> float:
    """Exact query-key pairs per head of ``attention`` on these shapes (see muse.exact_pairs_shape)."""
    return M.exact_pairs_shape(q.shape[2], s)


def exact_pairs_shape(n: int, s: M.MuseSettings) -> float:
    return M.exact_pairs_shape(n, s)
