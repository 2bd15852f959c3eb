"""GPTQ weight quantization (Frantar, Ashkboos, Hoefler, Alistarh 2022; arXiv 2210.17323),
written after the paper's Algorithm 1, as a weight-only baseline in the quantize harness.

Per linear y = x W^T, W (N out, K in), calibration inputs X (K, n tokens), GPTQ minimises
||W X - Q X||^2 column by column:

 1. H = 2 X X^T / n (Eq. 1's Hessian; running mean); dead columns: H_jj <- 1, W[:, j] <- 0
 2. optional act-order: columns by decreasing H_jj (Sec. 5)
 3. dampening H <- H + lambda I, lambda = 0.01 * mean(diag H) (Sec. 4, step 3)
 4. Hinv = Cholesky(H^-1)^T, upper triangular (Algorithm 1, line 2)
 5. per block of B = 128 columns (Algorithm 1, lines 3-15), per column j:
      q_j = quant(w_j); e_j = (w_j - q_j) / Hinv[j, j]; W[:, j:i+B] -= e_j Hinv[j, j:i+B];
    then W[:, i+B:] -= E Hinv[i:i+B, i+B:]; finally undo the act-order permutation.

Grid: scale and zero of every row / group come ONCE from the original weight with RTN's
quantizer (``quantizers.weight_qparams``, the reference code's ``static_groups``), so GPTQ and
RTN share a grid and differ only in rounding; with a diagonal H GPTQ is exactly RTN.
Layers are quantized sequentially (inputs of layer l from the GPTQ-quantized layers 0..l-1);
a layer's seven linears take their Hessians from one FP pass of the layer; activations and KV
stay FP during this calibration.
"""

from __future__ import annotations

import torch
from torch import Tensor

from icml26.methods.quantization import qmodel as QM
from icml26.methods.quantization import quantizers as Q


class HessianAccumulator:
    """Running H = 2/n * sum_t x_t x_t^T over calibration tokens. x: (..., K)."""

    def __init__(self, k: int) -> None:
        self.H = torch.zeros(k, k, dtype=torch.float64)
        self.n = 0

    def add(self, x: Tensor) -> None:
        x = x.detach().reshape(-1, x.shape[-1]).to(torch.float64)  # (t, K)
        t = x.shape[0]
        self.H *= self.n / (self.n + t)
        self.n += t
        x = x * (2.0 / self.n) ** 0.5
        self.H += x.T @ x


@torch.no_grad()
def gptq_quantize(
    W: Tensor,
    H: Tensor,
    bits: int,
    *,
    sym: bool = True,
    group_size: int = 0,
    clip_search: bool = False,
    block_size: int = 128,
    percdamp: float = 0.01,
    act_order: bool = False,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """GPTQ of one weight matrix (Algorithm 1 of arXiv 2210.17323).

    W: (N, K) out x in; H: (K, K) = 2 X X^T / n of the layer's inputs.
    Returns (Wq (N, K) float32 dequantized, codes (N, K) uint8, scale (N, G), zero (N, G)),
    with Wq == dequantize_weight(codes, scale, zero) exactly and (scale, zero) the same as
    RTN's ``quantizers.weight_qparams(W, ...)``.
    """
    if W.dim() != 2 or H.shape != (W.shape[1], W.shape[1]):
        raise ValueError(f"W must be (N, K) and H (K, K); got {tuple(W.shape)} and {tuple(H.shape)}")
    N, K = W.shape
    W0 = W.detach().float()
    scale, zero = Q.weight_qparams(W0, bits, sym=sym, group_size=group_size, clip_search=clip_search)  # (N, G)
    G = scale.shape[1]
    gs = K // G
    W = W0.clone()  # float32, as the reference code
    H = H.detach().clone().double()  # Cholesky in float64
    # step 2: dead columns
    dead = torch.diag(H) == 0
    H[dead, dead] = 1.0
    W[:, dead] = 0.0
    # step 3: act-order
    perm = torch.argsort(torch.diag(H), descending=True) if act_order else torch.arange(K)
    W, H = W[:, perm], H[perm][:, perm]
    col_group = (perm // gs).tolist()  # (K,) group of each (permuted) column
    # step 4: dampening
    damp = percdamp * torch.mean(torch.diag(H))
    H += damp * torch.eye(K, dtype=H.dtype)
    # step 5: upper Cholesky factor of H^-1
    L = torch.linalg.cholesky(H)
    Hinv = torch.linalg.cholesky(torch.cholesky_inverse(L), upper=True).float()  # (K, K) upper
    codes = torch.zeros(N, K)
    # step 6: blocks of B columns, lazy batch updates
    for i1 in range(0, K, block_size):
        i2 = min(i1 + block_size, K)
        W1 = W[:, i1:i2].clone()  # (N, B)
        E1 = torch.zeros_like(W1)
        Hinv1 = Hinv[i1:i2, i1:i2]
        for j in range(i2 - i1):
            w = W1[:, j]
            g = col_group[i1 + j]
            s, z = scale[:, g], zero[:, g]
            q = Q.quantize(w, s, z, bits)
            codes[:, i1 + j] = q
            err = (w - Q.dequantize(q, s, z)) / Hinv1[j, j]
            W1[:, j + 1 :].addr_(err, Hinv1[j, j + 1 :], alpha=-1.0)
            E1[:, j] = err
        W[:, i2:] -= E1 @ Hinv[i1:i2, i2:]
    # step 7: undo the permutation
    inv = torch.argsort(perm)
    codes = codes[:, inv].to(torch.uint8)
    Wq = Q.dequantize_weight(codes, scale, zero)
    return Wq, codes, scale, zero


class _Stop(Exception):
    pass


@torch.no_grad()
def quantize_model_gptq(
    model,
    batches: list[Tensor],
    *,
    bits: int,
    sym: bool = True,
    group_size: int = 0,
    clip_search: bool = False,
    block_size: int = 128,
    percdamp: float = 0.01,
    act_order: bool = False,
) -> dict[str, Tensor]:
    """Sequential GPTQ over the decoder layers of a model whose linears are
    ``qmodel.QuantLinear``. Returns {module name: dequantized GPTQ weight (N, K)}, and
    installs each on its QuantLinear (``fixed_weight``) so that the next layers'
    calibration inputs come from the already-quantized earlier layers.

    batches: calibration token ids, each (1, T)."""

    key = (bits, group_size, sym)
    layers = QM.layers(model)
    inps: list[Tensor] = []
    kws: list[dict] = []

    def catch(mod, args, kwargs):
        h = args[0] if args else kwargs.pop("hidden_states")
        inps.append(h)
        kws.append({k: v for k, v in kwargs.items() if k != "hidden_states"})
        raise _Stop

    hnd = layers[0].register_forward_pre_hook(catch, with_kwargs=True)
    try:
        for ids in batches:
            try:
                model(input_ids=ids, use_cache=False)
            except _Stop:
                pass
    finally:
        hnd.remove()

    def out_of(o):
        return o[0] if isinstance(o, (tuple, list)) else o

    result: dict[str, Tensor] = {}
    names = {id(m): n for n, m in model.named_modules()}
    for layer in layers:
        qls = [QM._get(layer, n) for n in QM.LINEARS]
        saved_bits = [m.wbits for m in qls]
        acc = {}
        hooks = []
        for m in qls:
            m.wbits = 16  # the layer itself runs in floating point while its Hessians are taken
            acc[id(m)] = HessianAccumulator(m.in_features)
            hooks.append(m.register_forward_pre_hook(lambda mod, args, acc=acc: acc[id(mod)].add(args[0])))
        try:
            for h, kw in zip(inps, kws):
                layer(h, **kw)
        finally:
            for hk in hooks:
                hk.remove()
        for m, b in zip(qls, saved_bits):
            Wq, _, _, _ = gptq_quantize(
                m.weight,
                acc[id(m)].H,
                bits,
                sym=sym,
                group_size=group_size,
                clip_search=clip_search,
                block_size=block_size,
                percdamp=percdamp,
                act_order=act_order,
            )
            Wq = Wq.to(m.weight.dtype)
            m.fixed_weight = (key, Wq)
            m.wbits = b
            result[names[id(m)]] = Wq
        inps = [out_of(layer(h, **kw)) for h, kw in zip(inps, kws)]
    return result
