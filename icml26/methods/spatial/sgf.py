"""Spatial-Grounded Fusion (SGF) of GeoThinker (Li et al., "Thinking with Geometry: Active
Geometry Integration for Spatial Reasoning", ICML 2026, arXiv 2602.06037), as the official code
does it (``QwenVGGTInteractionv2`` in Li-Hao-yuan/GeoThinker ``src/qwen_vl/model/qwen_interaction.py``;
notes in docs/geo-fusion.md):

1. X^ = LN(X), G^ = LN(G) (LayerNorm, eps 1e-6) for the image-token hidden states X and the
   geometry tokens G (one per visual token, same order, after 2x2 merging).
2. Q = X^ W_q, K = G^ W_k, V = G^ W_v (bias-free d x d, the LM's head count, no positions).
3. Frame-strict attention: query i sees key j only when frame(i) == frame(j), by an explicit
   mask built from frame ids. Differing per-frame token counts are an error (the official code
   silently falls back to global attention; here ``ValueError``).
4. Importance gating: b_j = log(sigmoid(MLP(X^_j)) + 0.1) added to every query's logit for key j
   (MLP d -> d/4 -> ReLU -> 1, read from the semantic token at j, as the code does).
5. out = tanh(gamma) W_o softmax(Q K^T / sqrt(d_h) + b + mask) V, gamma = 0 at init, X <- X + out.

:func:`attach_sgf` places SGF modules in decoder layers l < L - floor(L/4) of a transformers
decoder by forward hooks: after the self-attention residual and before the MLP, on image-token
positions only, in prefill (a decode step with a shorter sequence is left alone). Variants:
``gate=False`` (no importance bias), ``frame_strict=False`` (global cross-attention).
RECON: the optional distance-based spatial bias of the code (off in its scripts) is not built.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import torch
from torch import Tensor, nn


def sgf_layers(num_layers: int) -> list[int]:
    """Decoder layers that get SGF: l < L - floor(L/4) (21 of 28, 27 of 36; official code)."""
    if num_layers < 1:
        raise ValueError(f"num_layers must be >= 1, got {num_layers}")
    return list(range(num_layers - num_layers // 4))


def frame_mask(frame_ids_q: Tensor, frame_ids_k: Tensor, *, strict: bool = True) -> Tensor:
    """Boolean (B, Nq, Nk) mask, True where query i may attend key j (same frame when ``strict``).

    frame_ids_q: (B, Nq), frame_ids_k: (B, Nk) integers. Raises ValueError when any frame holds a
    different number of queries and keys (one geometry token per visual token)."""
    if frame_ids_q.shape[0] != frame_ids_k.shape[0]:
        raise ValueError(f"frame ids: batch {frame_ids_q.shape[0]} vs {frame_ids_k.shape[0]}")
    for b in range(frame_ids_q.shape[0]):
        fq, cq = torch.unique(frame_ids_q[b], return_counts=True)
        fk, ck = torch.unique(frame_ids_k[b], return_counts=True)
        if fq.shape != fk.shape or not torch.equal(fq, fk) or not torch.equal(cq, ck):
            raise ValueError(
                "SGF: visual and geometry tokens do not match per frame (batch item "
                f"{b}: visual {dict(zip(fq.tolist(), cq.tolist()))} vs geometry "
                f"{dict(zip(fk.tolist(), ck.tolist()))}); "
                "one geometry token per visual token is required (no silent fallback to global attention)"
            )
    if not strict:
        return torch.ones(
            frame_ids_q.shape[0],
            frame_ids_q.shape[1],
            frame_ids_k.shape[1],
            dtype=torch.bool,
            device=frame_ids_q.device,
        )
    return frame_ids_q[:, :, None] == frame_ids_k[:, None, :]


class SpatialGroundedFusion(nn.Module):
    """One SGF block (module docstring). hidden_size d must divide by num_heads.

    forward(x (B, N, d), geometry (B, N, d), frame_ids (B, N) or (N,)) -> the update (B, N, d)
    to add to x (zero at init since gamma = 0). Same order of visual and geometry tokens."""

    def __init__(
        self, hidden_size: int, num_heads: int, *, gate: bool = True, frame_strict: bool = True, eps: float = 1e-6
    ):
        super().__init__()
        if hidden_size % num_heads:
            raise ValueError(f"hidden_size {hidden_size} not divisible by num_heads {num_heads}")
        self.d, self.h = hidden_size, num_heads
        self.gate, self.frame_strict = gate, frame_strict
        self.norm_x = nn.LayerNorm(hidden_size, eps=eps)
        self.norm_g = nn.LayerNorm(hidden_size, eps=eps)
        self.q_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.k_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.v_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.o_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.importance = (
            nn.Sequential(
                nn.Linear(hidden_size, max(1, hidden_size // 4)), nn.ReLU(), nn.Linear(max(1, hidden_size // 4), 1)
            )
            if gate
            else None
        )
        self.gamma = nn.Parameter(torch.zeros(()))

    def importance_bias(self, x_norm: Tensor) -> Tensor:
        """b_j = log(sigmoid(MLP(x^_j)) + 0.1), (B, N); in [log 0.1, log 1.1]."""
        return torch.log(torch.sigmoid(self.importance(x_norm).squeeze(-1)) + 0.1)

    def attention(self, x: Tensor, geometry: Tensor, frame_ids: Tensor) -> tuple[Tensor, Tensor]:
        """(ungated output (B, N, d) before tanh(gamma), attention probabilities (B, h, N, N))."""
        if x.dim() != 3 or geometry.dim() != 3 or x.shape[-1] != self.d or geometry.shape[-1] != self.d:
            raise ValueError(
                f"SGF: expected x and geometry (B, N, {self.d}), got {tuple(x.shape)} and {tuple(geometry.shape)}"
            )
        B, N, _ = x.shape
        if geometry.shape[:2] != (B, N):
            raise ValueError(
                f"SGF: {N} visual tokens but {geometry.shape[1]} geometry tokens (batch {B} vs {geometry.shape[0]}); "
                "one geometry token per visual token is required"
            )
        if frame_ids.dim() == 1:  # one layout for the whole batch: one (1, N, N) mask
            if frame_ids.shape != (N,):
                raise ValueError(f"SGF: frame_ids shape {tuple(frame_ids.shape)}, expected ({N},) or ({B}, {N})")
            allowed = frame_mask(frame_ids[None], frame_ids[None], strict=self.frame_strict)  # (1, N, N)
        else:
            if frame_ids.shape != (B, N):
                raise ValueError(f"SGF: frame_ids shape {tuple(frame_ids.shape)}, expected ({B}, {N})")
            allowed = frame_mask(frame_ids, frame_ids, strict=self.frame_strict)  # (B, N, N)
        xn, gn = self.norm_x(x), self.norm_g(geometry)
        dh = self.d // self.h
        q = self.q_proj(xn).view(B, N, self.h, dh).transpose(1, 2)  # (B, h, N, dh)
        k = self.k_proj(gn).view(B, N, self.h, dh).transpose(1, 2)
        v = self.v_proj(gn).view(B, N, self.h, dh).transpose(1, 2)
        logits = q @ k.transpose(-1, -2) / math.sqrt(dh)  # (B, h, N, N)
        if self.importance is not None:
            logits = logits + self.importance_bias(xn)[:, None, None, :]  # key-side bias
        logits = logits.masked_fill(~allowed[:, None], float("-inf"))
        p = torch.softmax(logits, dim=-1)
        o = (p @ v).transpose(1, 2).reshape(B, N, self.d)
        return self.o_proj(o), p

    def forward(self, x: Tensor, geometry: Tensor, frame_ids: Tensor) -> Tensor:
        out, _ = self.attention(x, geometry, frame_ids)
        return torch.tanh(self.gamma) * out


# --------------------------------------------------------------------------- attaching to a decoder


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The language decoder's layer list of a transformers model (LLaMA-, Qwen2-, Qwen2-VL-style):
    the ``ModuleList`` named ``layers`` whose blocks have ``self_attn`` and ``mlp``."""
    for name, mod in model.named_modules():
        if (
            name.split(".")[-1] == "layers"
            and isinstance(mod, nn.ModuleList)
            and len(mod)
            and all(hasattr(m, "self_attn") and hasattr(m, "mlp") for m in mod)
        ):
            return mod
    raise ValueError(
        f"{type(model).__name__}: no decoder layer list (a ModuleList 'layers' of blocks with self_attn and mlp)"
    )


@dataclass
class SGFAttachment:
    """What :func:`attach_sgf` returns: the SGF modules (``modules[str(layer)]``), the hooks, and
    the geometry context. ``set_geometry`` before a forward pass; ``detach()`` removes every hook."""

    modules: nn.ModuleDict
    layers: list[int]
    handles: list = field(default_factory=list)
    geometry: Tensor | None = None  # (B, N_img, d)
    frame_ids: Tensor | None = None  # (N_img,) shared by the batch, or (B, N_img)
    image_mask: Tensor | None = None  # (B, T) bool
    _layer_input: dict = field(default_factory=dict)

    def set_geometry(self, geometry: Tensor, frame_ids: Tensor, image_mask: Tensor) -> None:
        """geometry: (B, N, d) one token per image token, in sequence order; frame_ids (B, N) or (N,);
        image_mask: (B, T) or (T,) bool, True at the N image-token positions of each sequence."""
        if image_mask.dim() == 1:
            image_mask = image_mask[None].expand(geometry.shape[0], -1)
        if geometry.dim() != 3:
            raise ValueError(f"geometry must be (B, N, d), got {tuple(geometry.shape)}")
        counts = image_mask.sum(1)
        if not torch.all(counts == geometry.shape[1]):
            raise ValueError(
                f"SGF: {counts.tolist()} image tokens per sequence but {geometry.shape[1]} geometry tokens"
            )
        if frame_ids.dim() == 2 and bool((frame_ids == frame_ids[:1]).all()):
            frame_ids = frame_ids[0]  # the same layout in every sequence: one mask for the batch
        self.geometry, self.frame_ids, self.image_mask = geometry, frame_ids, image_mask.bool()

    def clear(self) -> None:
        self.geometry = self.frame_ids = self.image_mask = None

    def detach(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles.clear()
        self._layer_input.clear()
        self.clear()

    def __enter__(self) -> "SGFAttachment":
        return self

    def __exit__(self, *exc) -> None:
        self.detach()


def attach_sgf(
    model: nn.Module,
    layers: Sequence[int] | None = None,
    *,
    gate: bool = True,
    frame_strict: bool = True,
    hidden_size: int | None = None,
    num_heads: int | None = None,
) -> SGFAttachment:
    """Attach SGF to the decoder layers ``layers`` of ``model`` (default :func:`sgf_layers`) by forward hooks.

    A pre-hook on each chosen decoder layer keeps its input h; a hook on its ``self_attn`` returns
    attn + SGF(h + attn) at the image positions, so the MLP reads X + SGF(X) for X = h + attn (the
    official placement). hidden_size / num_heads default to the model config's. The SGF modules
    are created on the model's device and dtype, not registered in the model (train them via
    ``attachment.modules``). Raises ValueError on a layer index out of range."""
    dec = decoder_layers(model)
    L = len(dec)
    layers = sgf_layers(L) if layers is None else [int(i) for i in layers]
    bad = [i for i in layers if not 0 <= i < L]
    if bad:
        raise ValueError(f"attach_sgf: layers {bad} out of range 0..{L - 1}")
    cfg = getattr(model, "config", None)
    cfg = getattr(cfg, "text_config", None) or cfg
    d = hidden_size or getattr(cfg, "hidden_size", None)
    h = num_heads or getattr(cfg, "num_attention_heads", None)
    if d is None or h is None:
        raise ValueError("attach_sgf: give hidden_size and num_heads (the model config has none)")
    p = next(model.parameters())
    mods = nn.ModuleDict(
        {str(i): SpatialGroundedFusion(d, h, gate=gate, frame_strict=frame_strict) for i in layers}
    ).to(device=p.device, dtype=p.dtype)
    att = SGFAttachment(mods, list(layers))

    for i in layers:
        block = dec[i]

        def pre(module, args, kwargs, _i=i):
            hs = args[0] if args else kwargs["hidden_states"]
            att._layer_input[_i] = hs

        def post(module, args, kwargs, output, _i=i):
            if att.geometry is None:
                return output
            hs = att._layer_input.pop(_i, None)
            attn = output[0] if isinstance(output, tuple) else output
            if hs is None or att.image_mask is None or hs.shape[1] != att.image_mask.shape[1]:
                return output  # decode step (shorter sequence) or no context: SGF acts in prefill only
            x = hs + attn  # post-attention residual stream (B, T, d)
            B = x.shape[0]
            xi = x[att.image_mask].view(B, -1, x.shape[-1])  # (B, N, d) image tokens in order
            delta = att.modules[str(_i)](xi, att.geometry.to(x.dtype), att.frame_ids)
            full = torch.zeros_like(attn)
            full = full.masked_scatter(att.image_mask[..., None].expand_as(full), delta.to(attn.dtype))
            new = attn + full
            return (new, *output[1:]) if isinstance(output, tuple) else new

        att.handles.append(block.register_forward_pre_hook(pre, with_kwargs=True))
        att.handles.append(block.self_attn.register_forward_hook(post, with_kwargs=True))
    return att
