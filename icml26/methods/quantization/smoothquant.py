"""SmoothQuant baseline (Xiao et al., ICML 2023, arXiv 2211.10438).

Per input channel j of a linear: s_j = max|X_j|^alpha / max|W_j|^(1 - alpha) (paper Eq. 4),
X <- X diag(s)^-1, W <- W diag(s). The division is merged into the op that produces X:
the RMSNorm gain for q/k/v and gate/up (as in the reference implementation for LLaMA),
and the rows of up_proj for down_proj (exact in SwiGLU). max|X_j| comes from the same
calibration batches every method uses.
"""

from __future__ import annotations

import torch
from torch import Tensor

from icml26.methods.quantization.qmodel import layers


@torch.no_grad()
def act_channel_max(model, batches: list[Tensor]) -> list[dict[str, Tensor]]:
    """Per layer: max |x_j| at the inputs of q_proj ("attn"), gate_proj ("mlp") and down_proj ("down")."""
    stats: list[dict[str, Tensor]] = [{} for _ in layers(model)]
    hooks = []

    def make(i, key):
        def hook(mod, args):
            a = args[0].detach().abs().reshape(-1, args[0].shape[-1]).amax(0).float()
            prev = stats[i].get(key)
            stats[i][key] = a if prev is None else torch.maximum(prev, a)

        return hook

    for i, layer in enumerate(layers(model)):
        hooks.append(layer.self_attn.q_proj.register_forward_pre_hook(make(i, "attn")))
        hooks.append(layer.mlp.gate_proj.register_forward_pre_hook(make(i, "mlp")))
        hooks.append(layer.mlp.down_proj.register_forward_pre_hook(make(i, "down")))
    try:
        for ids in batches:
            model(input_ids=ids)
    finally:
        for h in hooks:
            h.remove()
    return stats


def _scales(xmax: Tensor, ws: list[Tensor], alpha: float) -> Tensor:
    wmax = torch.stack([w.abs().amax(0) for w in ws]).amax(0).clamp(min=1e-5)
    return (xmax.clamp(min=1e-5) ** alpha / wmax ** (1 - alpha)).clamp(min=1e-5)


@torch.no_grad()
def smooth(model, batches: list[Tensor], alpha: float = 0.5) -> None:
    """Apply SmoothQuant in place (function-preserving in floating point)."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"smoothquant alpha must be in [0, 1], got {alpha}")
    stats = act_channel_max(model, batches)
    for layer, st in zip(layers(model), stats):
        att = layer.self_attn
        s = _scales(st["attn"], [att.q_proj.weight, att.k_proj.weight, att.v_proj.weight], alpha)
        layer.input_layernorm.weight.div_(s)
        for lin in (att.q_proj, att.k_proj, att.v_proj):
            lin.weight.mul_(s[None, :])
        mlp = layer.mlp
        s = _scales(st["mlp"], [mlp.gate_proj.weight, mlp.up_proj.weight], alpha)
        layer.post_attention_layernorm.weight.div_(s)
        for lin in (mlp.gate_proj, mlp.up_proj):
            lin.weight.mul_(s[None, :])
        s = _scales(st["down"], [mlp.down_proj.weight], alpha)
        mlp.up_proj.weight.div_(s[:, None])
        mlp.down_proj.weight.mul_(s[None, :])
