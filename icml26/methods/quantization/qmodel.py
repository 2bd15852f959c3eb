"""Simulated (fake-quant) execution of a quantized LLaMA-architecture model.

``QuantLinear`` replaces ``nn.Linear`` and keeps the parameter name ``weight`` so that
``torch.func.functional_call`` can substitute merged (transformed) weights while the
transforms are trained. Its forward is, for input x (..., K):

1. optional online Hadamard ``x <- x @ H_K`` (QuaRot / FPTQuant down-projection transform);
2. optional dynamic per-token scaling ``x <- x / r_t`` (FPTQuant S_n, ``r_t`` = RMS of the
   residual stream of token t, set by hooks on the decoder layers);
3. activation quantization (dynamic per-token, or static per-tensor with calibrated range);
4. ``y = x @ fq(W)^T`` with the weight fake-quantized per channel / per group;
5. ``y <- y * r_t`` (undo step 2; exact in floating point).

KV-cache quantization: an attention function registered with transformers'
``AttentionInterface`` quantizes post-RoPE keys and the values per (token, head)
before scaled-dot-product attention.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from icml26.methods.quantization import hadamard as had
from icml26.methods.quantization import quantizers as Q

LINEARS = (
    "self_attn.q_proj",
    "self_attn.k_proj",
    "self_attn.v_proj",
    "self_attn.o_proj",
    "mlp.gate_proj",
    "mlp.up_proj",
    "mlp.down_proj",
)


@dataclass(frozen=True)
class QSpec:
    """Quantization setting. bits >= 16 means "not quantized"."""

    wbits: int = 4
    abits: int = 16
    kvbits: int = 16
    w_sym: bool = True
    group_size: int = 0  # 0 = per output channel
    w_clip_search: bool = True
    a_sym: bool = False
    act_granularity: str = "per-token"  # per-token (dynamic) | per-tensor (static)
    a_clip_ratio: float = 1.0
    kv_clip_ratio: float = 1.0
    head_bits: int = 8  # lm_head / embedding weights (per channel), activations kept FP

    @property
    def name(self) -> str:
        s = f"W{self.wbits}A{self.abits}" if self.wbits < 16 or self.abits < 16 else "W16A16"
        return s + (f"KV{self.kvbits}" if self.kvbits < 16 else "")


class QuantLinear(nn.Module):
    def __init__(self, lin: nn.Linear, spec: QSpec, *, quant_act: bool = True, wbits: int | None = None):
        super().__init__()
        self.in_features, self.out_features = lin.in_features, lin.out_features
        self.weight = lin.weight
        self.bias = lin.bias
        self.spec = spec
        self.wbits = spec.wbits if wbits is None else wbits
        self.abits = spec.abits if quant_act else 16
        self.online_hadamard = False
        self.dyn_scale = False
        self.token_scale: Tensor | None = None
        self.observer: Q.RangeObserver | None = None
        self.register_buffer("act_scale", None)
        self.register_buffer("act_zero", None)
        self.train_quant = False  # STE on weights, recompute every call
        self._wq: tuple[int, Tensor] | None = None
        # ((wbits, group_size, w_sym), weight already on that grid), e.g. from GPTQ: used as is
        self.fixed_weight: tuple[tuple, Tensor] | None = None

    def extra_repr(self) -> str:
        return (
            f"{self.in_features}->{self.out_features}, w{self.wbits} a{self.abits}, "
            f"had={self.online_hadamard}, dyn={self.dyn_scale}"
        )

    def quant_weight(self, w: Tensor) -> Tensor:
        sp = self.spec
        return Q.fake_quant_weight(
            w,
            self.wbits,
            sym=sp.w_sym,
            group_size=sp.group_size,
            clip_search=sp.w_clip_search and not self.train_quant,
            train=self.train_quant,
        )

    def _weight(self) -> Tensor:
        w = self.weight
        if self.wbits >= 16:
            return w
        fw = self.fixed_weight
        if fw is not None and fw[0] == (self.wbits, self.spec.group_size, self.spec.w_sym):
            return fw[1]
        if self.train_quant or torch.is_grad_enabled() and w.requires_grad:
            return self.quant_weight(w)
        key = (w._version, w.data_ptr(), self.wbits, self.spec.group_size, self.spec.w_sym)
        if self._wq is None or self._wq[0] != key:
            self._wq = (key, self.quant_weight(w.detach()))
        return self._wq[1]

    def forward(self, x: Tensor) -> Tensor:
        if self.online_hadamard:
            x = had.apply(x)
        s = self.token_scale if self.dyn_scale else None
        if s is not None:
            x = x / s
        if self.observer is not None:
            self.observer.update(x)
        x = Q.fake_quant_act(
            x,
            self.abits,
            self.spec.act_granularity,
            sym=self.spec.a_sym,
            clip_ratio=self.spec.a_clip_ratio,
            scale=self.act_scale,
            zero=self.act_zero,
        )
        y = F.linear(x, self._weight(), self.bias)
        if s is not None:
            y = y * s
        return y


# ----------------------------------------------------------------------------- KV cache
_KV_NAME = "icml26_kvquant"


def _kv_attention(module, query, key, value, attention_mask, **kwargs):

    bits = getattr(module, "kv_bits", 16)
    if bits < 16:
        clip = getattr(module, "kv_clip_ratio", 1.0)
        key = Q.fake_quant_kv(key, bits, clip_ratio=clip)
        value = Q.fake_quant_kv(value, bits, clip_ratio=clip)
    return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)


def _register_kv() -> None:

    AttentionInterface.register(_KV_NAME, _kv_attention)


# ----------------------------------------------------------------------------- model surgery
def layers(model) -> list:
    return list(model.model.layers)


def _get(mod, dotted: str):
    for p in dotted.split("."):
        mod = getattr(mod, p)
    return mod


def _set(mod, dotted: str, value) -> None:
    parts = dotted.split(".")
    for p in parts[:-1]:
        mod = getattr(mod, p)
    setattr(mod, parts[-1], value)


def quantize_model(model, spec: QSpec, *, online_down_hadamard: bool = False, dyn_scale: bool = False) -> None:
    """Replace every decoder linear with a QuantLinear (in place); set KV quantization;
    quantize lm_head (and embeddings, see :func:`quantize_embeddings`) to ``head_bits``."""
    for layer in layers(model):
        for name in LINEARS:
            lin = _get(layer, name)
            if isinstance(lin, QuantLinear):
                continue
            ql = QuantLinear(lin, spec)
            if name == "mlp.down_proj":
                ql.online_hadamard = online_down_hadamard
            if name in ("self_attn.o_proj", "mlp.down_proj"):
                ql.dyn_scale = dyn_scale
            _set(layer, name, ql)
        layer.self_attn.kv_bits = spec.kvbits
        layer.self_attn.kv_clip_ratio = spec.kv_clip_ratio
    if spec.kvbits < 16:
        _register_kv()
        model.config._attn_implementation = _KV_NAME
        for m in model.modules():
            if hasattr(m, "config") and hasattr(m.config, "_attn_implementation"):
                m.config._attn_implementation = _KV_NAME
    if dyn_scale:
        install_dyn_scale_hooks(model)
    if spec.head_bits < 16:
        quantize_embeddings(model, spec.head_bits)


@torch.no_grad()
def quantize_embeddings(model, bits: int) -> None:
    """Round-to-nearest symmetric per-row quantization of the input embedding and lm_head
    (weights only; tied weights stay tied)."""
    emb = model.get_input_embeddings()
    head = model.get_output_embeddings()
    tied = head.weight.data_ptr() == emb.weight.data_ptr()
    emb.weight.copy_(Q.fake_quant_weight(emb.weight, bits, sym=True, group_size=0))
    if not tied:
        head.weight.copy_(Q.fake_quant_weight(head.weight, bits, sym=True, group_size=0))


def _dyn_scale_hook(norm, args) -> None:
    """Forward pre-hook on an RMSNorm: the per-token RMS of its input, for the linear that closes
    the block. The target is an attribute of the norm (not a closure), so a deep copy of the model
    keeps each hook pointing at its own copy's linear."""
    target, x = norm._icml26_dyn_target, args[0]
    r = torch.sqrt(x.detach().pow(2).mean(-1, keepdim=True) + norm.variance_epsilon)
    target.token_scale = r


def install_dyn_scale_hooks(model) -> None:
    """FPTQuant S_n: store the per-token RMS of the residual stream entering each RMSNorm
    on the linear that closes the block (o_proj for attention, down_proj for the MLP)."""
    for layer in layers(model):
        if getattr(layer, "_icml26_dyn", False):
            continue
        for norm, target in (
            (layer.input_layernorm, layer.self_attn.o_proj),
            (layer.post_attention_layernorm, layer.mlp.down_proj),
        ):
            norm._icml26_dyn_target = target
            norm.register_forward_pre_hook(_dyn_scale_hook)
        layer._icml26_dyn = True


def set_spec(model, spec: QSpec) -> None:
    """Switch an already wrapped model to another setting (weights re-quantized lazily)."""
    for _, m in quant_linears(model):
        m.spec = spec
        m.wbits, m.abits = spec.wbits, spec.abits
        m.act_scale = m.act_zero = None
    for layer in layers(model):
        layer.self_attn.kv_bits = spec.kvbits
        layer.self_attn.kv_clip_ratio = spec.kv_clip_ratio
    if spec.kvbits < 16:
        _register_kv()
    impl = _KV_NAME if spec.kvbits < 16 else "sdpa"
    for m in model.modules():
        if hasattr(m, "config") and hasattr(m.config, "_attn_implementation"):
            m.config._attn_implementation = impl


def quant_linears(model) -> list[tuple[str, QuantLinear]]:
    return [(n, m) for n, m in model.named_modules() if isinstance(m, QuantLinear)]


def set_train_quant(model, on: bool) -> None:
    for _, m in quant_linears(model):
        m.train_quant = on
        m._wq = None


@torch.no_grad()
def calibrate_static(model, batches: list[Tensor], spec: QSpec) -> None:
    """Static per-tensor activation ranges from calibration batches (min/max, times a_clip_ratio)."""
    if spec.abits >= 16 or spec.act_granularity != "per-tensor":
        return
    qls = [m for _, m in quant_linears(model) if m.abits < 16]
    for m in qls:
        m.observer = Q.RangeObserver()
        m.act_scale = None
    for ids in batches:
        model(input_ids=ids)
    for m in qls:
        s, z = m.observer.qparams(m.abits, spec.a_sym, spec.a_clip_ratio)
        m.act_scale, m.act_zero = s, z
        m.observer = None
