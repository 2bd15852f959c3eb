"""Lean batch-1 decode runtime for LLaMA-architecture models (FP32 or packed INT4/INT8).

``LeanLM`` keeps only the arithmetic of a LLaMA decoder (the Hugging Face forward spends most
of a decode step outside the matmuls) and calls the packed kernels (``icml26.ops.quant``):

* a static, preallocated KV cache ``(L, H_kv, T_max, D)``; RoPE from cos / sin tables
  computed once by the model's own rotary module;
* decode (one token): per layer add + RMSNorm -> one fused q|k|v GEMV -> RoPE + cache write +
  GQA attention (one C++ op) -> o GEMV -> add + RMSNorm -> one fused gate|up GEMV ->
  SiLU(gate) * up -> down GEMV (icml26/csrc/cpu/quant_lean_cpu.cpp; twins in ops/_ref);
* prefill and the other cases: the same arithmetic with plain torch ops (SDPA, causal mask);
  packed linears take the tile-wise dequantize + BLAS path (``ops.quant.quant_linear``).

Fusing q/k/v (gate/up) concatenates packed rows, scales and offsets: quantization is per
output row (or group along K), so the fused GEMV is exactly the concatenation. The per-layer
pre-steps of ``PackedLinear`` / ``QuantLinear`` are kept (online Hadamard, simulated A4/A8,
KV fake quantization, S_n where it is not an identity), so the logits equal the HF path with
the same weights. Refused (ValueError): biases, q/k norms, non-SiLU MLPs, batch > 1.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from icml26.methods.quantization import hadamard as had
from icml26.methods.quantization import quantizers as Q
from icml26.methods.quantization.pack import PackedEmbedding, PackedHead, PackedLinear
from icml26.methods.quantization.qmodel import QuantLinear
from icml26.ops import quant as ops

GEMV_MAX_ROWS = 4


@dataclass
class ActQuant:
    """Simulated activation quantization in front of a linear (bits >= 16: none)."""

    bits: int = 16
    granularity: str = "per-token"
    sym: bool = False
    clip_ratio: float = 1.0
    scale: Tensor | None = None
    zero: Tensor | None = None

    def key(self) -> tuple:
        s = None if self.scale is None else (float(self.scale), float(self.zero))
        return (self.bits, self.granularity, self.sym, self.clip_ratio, s)

    def __call__(self, x: Tensor) -> Tensor:
        return Q.fake_quant_act(
            x, self.bits, self.granularity, sym=self.sym, clip_ratio=self.clip_ratio, scale=self.scale, zero=self.zero
        )


class Lin:
    """One linear (or several fused by rows) of the lean runtime: x (M, K) -> (M, N)."""

    def __init__(
        self,
        *,
        weight: Tensor | None = None,
        qweight: Tensor | None = None,
        scales: Tensor | None = None,
        mins: Tensor | None = None,
        bits: int = 32,
        group_size: int = 0,
        int_act: int = 0,
        act: ActQuant | None = None,
        hadamard: bool = False,
    ):
        self.weight = None if weight is None else weight.detach().float().contiguous()
        self.qweight, self.scales, self.mins = qweight, scales, mins
        self.bits, self.group_size, self.int_act = bits, group_size, int_act
        self.act = act or ActQuant()
        self.hadamard = hadamard
        self.out_features = self.weight.shape[0] if self.weight is not None else qweight.shape[0]
        self._gemv = None
        if self.weight is None:
            if ops.backend() != "ref":
                if int_act and group_size % 64 == 0:
                    op = torch.ops.icml26.quant_gemm_i8act.default
                    q, s, m, b, g, ab = qweight, scales, mins, bits, group_size, int_act
                    self._gemv = lambda x: op(x, q, s, m, g, -1, b, ab)
                else:
                    op = torch.ops.icml26.quant_gemm.default
                    q, s, m, b, g = qweight, scales, mins, bits, group_size
                    self._gemv = lambda x: op(x, q, s, m, b, g, -1)

    @property
    def nbytes(self) -> int:
        ts = [self.weight] if self.weight is not None else [self.qweight, self.scales, self.mins]
        return sum(t.numel() * t.element_size() for t in ts)

    def fusable(self, other: Lin) -> bool:
        if (self.weight is None) != (other.weight is None) or self.hadamard != other.hadamard:
            return False
        if self.act.key() != other.act.key():
            return False
        if self.weight is not None:
            return self.weight.shape[1] == other.weight.shape[1]
        return (self.bits, self.group_size, self.int_act, self.qweight.shape[1]) == (
            other.bits,
            other.group_size,
            other.int_act,
            other.qweight.shape[1],
        )

    @staticmethod
    def cat(parts: list[Lin]) -> Lin:
        a = parts[0]
        if a.weight is not None:
            return Lin(weight=torch.cat([p.weight for p in parts]), act=a.act, hadamard=a.hadamard)
        return Lin(
            qweight=torch.cat([p.qweight for p in parts]).contiguous(),
            scales=torch.cat([p.scales for p in parts]).contiguous(),
            mins=torch.cat([p.mins for p in parts]).contiguous(),
            bits=a.bits,
            group_size=a.group_size,
            int_act=a.int_act,
            act=a.act,
            hadamard=a.hadamard,
        )

    def __call__(self, x: Tensor) -> Tensor:
        if self.hadamard:
            x = had.apply(x)
        if self.act.bits < 16:
            x = self.act(x)
        if self.weight is not None:
            return F.linear(x, self.weight)
        if self._gemv is not None and x.shape[0] <= GEMV_MAX_ROWS:
            return self._gemv(x.contiguous())

        return ops.quant_linear(
            x, self.qweight, self.scales, self.mins, self.bits, self.group_size, checked=True, int_act=self.int_act
        )


def _lin_from(mod) -> Lin:
    """Lin from nn.Linear, QuantLinear (fake-quant weights, FP32 runtime) or PackedLinear."""

    if getattr(mod, "bias", None) is not None:
        raise ValueError("lean runtime: linear layers with bias are not supported")
    if isinstance(mod, PackedHead):
        return Lin(
            qweight=mod.qweight,
            scales=mod.scales,
            mins=mod.mins,
            bits=8,
            group_size=mod.in_features,
            int_act=mod.int_act,
        )
    if isinstance(mod, nn.Linear):
        return Lin(weight=mod.weight)
    if isinstance(mod, (PackedLinear, QuantLinear)):
        sp = mod.spec
        act = ActQuant(mod.abits, sp.act_granularity, sp.a_sym, sp.a_clip_ratio, mod.act_scale, mod.act_zero)
        if mod.abits < 16 and sp.act_granularity != "per-token" and mod.act_scale is None:
            act = ActQuant()
        if isinstance(mod, QuantLinear):
            with torch.no_grad():
                w = mod._weight()
            return Lin(weight=w, act=act, hadamard=mod.online_hadamard)
        return Lin(
            qweight=mod.qweight,
            scales=mod.scales,
            mins=mod.mins,
            bits=mod.bits,
            group_size=mod.group_size,
            int_act=mod.int_act,
            act=act,
            hadamard=mod.online_hadamard,
        )
    raise ValueError(f"lean runtime: unsupported linear {type(mod).__name__}")


def _fuse(parts: list[Lin]) -> tuple[list[Lin], bool]:
    if all(parts[0].fusable(p) for p in parts[1:]):
        return [Lin.cat(parts)], True
    return parts, False


class _Layer:
    def __init__(self, layer, eps: float):
        at, mlp = layer.self_attn, layer.mlp
        if hasattr(at, "q_norm") or hasattr(at, "k_norm"):
            raise ValueError("lean runtime: q/k norms (Gemma-style attention) are not supported")
        self.ln1 = layer.input_layernorm.weight.detach().float().contiguous()
        self.ln2 = layer.post_attention_layernorm.weight.detach().float().contiguous()
        self.eps = eps
        q, k, v = _lin_from(at.q_proj), _lin_from(at.k_proj), _lin_from(at.v_proj)
        self.sizes_qkv = [q.out_features, k.out_features, v.out_features]
        self.qkv, self.qkv_fused = _fuse([q, k, v])
        self.o = _lin_from(at.o_proj)
        g, u = _lin_from(mlp.gate_proj), _lin_from(mlp.up_proj)
        self.inter = g.out_features
        self.gu, self.gu_fused = _fuse([g, u])
        self.down = _lin_from(mlp.down_proj)
        self.kv_bits = int(getattr(at, "kv_bits", 16))
        self.kv_clip = float(getattr(at, "kv_clip_ratio", 1.0))
        # S_n only changes anything with static per-tensor activation ranges (see module doc)
        self.dyn_o = (
            bool(getattr(at.o_proj, "dyn_scale", False))
            and self.o.act.bits < 16
            and self.o.act.granularity != "per-token"
        )
        self.dyn_down = (
            bool(getattr(mlp.down_proj, "dyn_scale", False))
            and self.down.act.bits < 16
            and self.down.act.granularity != "per-token"
        )

    def linears(self) -> list[Lin]:
        return [*self.qkv, self.o, *self.gu, self.down]


class LeanLM:
    """Batch-1 LLaMA decoder with a static KV cache; see the module doc.

    ``LeanLM(hf_model, max_len)`` takes a float HF ``LlamaForCausalLM`` (FP32 runtime), one
    wrapped by ``qmodel.quantize_model`` (fake-quant weights, FP32 runtime) or one loaded by
    ``pack.load_quantized`` (packed INT4/INT8 kernels)."""

    def __init__(self, model, max_len: int = 512):
        cfg = model.config
        if getattr(cfg, "hidden_act", "silu") != "silu":
            raise ValueError(f"lean runtime: hidden_act {cfg.hidden_act!r} is not supported (LLaMA SiLU MLP only)")
        if getattr(cfg, "attention_bias", False) or getattr(cfg, "mlp_bias", False):
            raise ValueError("lean runtime: biases are not supported")
        self.n_heads = cfg.num_attention_heads
        self.n_kv = cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.n_heads
        self.hidden = cfg.hidden_size
        self.max_len = int(max_len)
        self.vocab = cfg.vocab_size
        eps = cfg.rms_norm_eps
        base = model.model
        self.layers = [_Layer(layer, eps) for layer in base.layers]
        self.norm = base.norm.weight.detach().float().contiguous()
        self.eps = eps
        emb = base.embed_tokens

        if isinstance(emb, PackedEmbedding):
            self._emb = ("int8", emb.qweight, emb.scales)
        else:
            self._emb = ("fp", emb.weight.detach().float(), None)
        self.head = _lin_from(model.lm_head)
        # RoPE tables from the model's own rotary module (any rope type it implements)
        pos = torch.arange(self.max_len)[None]
        with torch.no_grad():
            cos, sin = base.rotary_emb(torch.zeros(1, dtype=torch.float32), pos)
        self.cos = cos[0].float().contiguous()  # (T, D)
        h = self.head_dim // 2
        s = sin[0].float()
        self.sin_signed = torch.cat([-s[:, :h], s[:, h:]], -1).contiguous()
        self.scale = 1.0 / math.sqrt(self.head_dim)
        L, D = len(self.layers), self.head_dim
        self.k_cache = torch.zeros(L, self.n_kv, self.max_len, D)
        self.v_cache = torch.zeros(L, self.n_kv, self.max_len, D)
        self._kc = [self.k_cache[i] for i in range(L)]  # contiguous per-layer views
        self._vc = [self.v_cache[i] for i in range(L)]
        self.pos = 0

        self._addnorm, self._silu_mul, self._attn = ops.lean_ops()
        # the fused decode step needs fused q|k|v and gate|up, no KV quantization and no S_n
        self.fast = all(
            layer.qkv_fused and layer.gu_fused and layer.kv_bits >= 16 and not layer.dyn_o and not layer.dyn_down
            for layer in self.layers
        )

    # ------------------------------------------------------------------ sizes
    def weight_bytes(self) -> int:
        """Bytes of the weights the runtime reads (linears, head, embedding table, norms)."""
        seen, total = set(), 0
        lins = [lin for layer in self.layers for lin in layer.linears()] + [self.head]
        ts = []
        for lin in lins:
            ts += [lin.weight] if lin.weight is not None else [lin.qweight, lin.scales, lin.mins]
        ts += [t for t in self._emb[1:] if t is not None]
        ts += [layer.ln1 for layer in self.layers] + [layer.ln2 for layer in self.layers] + [self.norm]
        for t in ts:
            key = (t.data_ptr(), t.numel())
            if key not in seen:
                seen.add(key)
                total += t.numel() * t.element_size()
        return total

    def fused(self) -> dict:
        return {
            "qkv": all(layer.qkv_fused for layer in self.layers),
            "gate_up": all(layer.gu_fused for layer in self.layers),
        }

    # ------------------------------------------------------------------ forward
    def reset(self) -> None:
        self.pos = 0

    def embed(self, ids: Tensor) -> Tensor:
        kind, w, s = self._emb
        if kind == "int8":
            return (w.index_select(0, ids).float() - 128.0) * s.index_select(0, ids)
        return w.index_select(0, ids)

    def _rope(self, x: Tensor, p0: int, t: int) -> Tensor:
        """x (T, n, D) at positions p0..p0+T-1 -> rotated (HF's q*cos + rotate_half(q)*sin)."""
        cos = self.cos[p0 : p0 + t, None]
        sin = self.sin_signed[p0 : p0 + t, None]
        return torch.addcmul(x * cos, torch.roll(x, self.head_dim // 2, -1), sin)

    @torch.no_grad()
    def forward(self, ids: Tensor) -> Tensor:
        """Next-token logits (T, V) for ``ids`` (T,) appended at the current cache position."""
        ids = ids.reshape(-1)
        t = ids.shape[0]
        p0 = self.pos
        if p0 + t > self.max_len:
            raise ValueError(f"lean runtime: {p0 + t} tokens exceed the static cache of {self.max_len}")
        if t == 1 and self.fast:
            return self._decode_step(ids)
        return self._forward_torch(ids, t, p0)

    def _decode_step(self, ids: Tensor) -> Tensor:
        """One token through the fused ops: per layer add+RMSNorm, q|k|v GEMV, RoPE + cache
        write + attention (one op), o GEMV, add+RMSNorm, gate|up GEMV, SiLU*mul, down GEMV."""
        p = self.pos
        addnorm, silu_mul, attn = self._addnorm, self._silu_mul, self._attn
        H, Hk, sc = self.n_heads, self.n_kv, self.scale
        cos, sin = self.cos, self.sin_signed
        x = self.embed(ids).contiguous()  # (1, d), a fresh tensor: the residual stream, updated in place
        delta = None
        for li, layer in enumerate(self.layers):
            h = addnorm(x, delta, layer.ln1, layer.eps)
            a = attn(layer.qkv[0](h), cos, sin, self._kc[li], self._vc[li], p, H, Hk, sc)
            h = addnorm(x, layer.o(a), layer.ln2, layer.eps)
            delta = layer.down(silu_mul(layer.gu[0](h)))
        h = addnorm(x, delta, self.norm, self.eps)
        self.pos = p + 1
        return self.head(h)

    def _forward_torch(self, ids: Tensor, t: int, p0: int) -> Tensor:
        """Any number of tokens with plain torch ops (prefill; decode with KV quantization or S_n)."""
        H, Hk, D = self.n_heads, self.n_kv, self.head_dim
        nq, nk = H * D, Hk * D
        x = self.embed(ids)  # (T, d)
        causal = t > 1
        for li, layer in enumerate(self.layers):
            h = F.rms_norm(x, (self.hidden,), layer.ln1, layer.eps)
            if layer.qkv_fused:
                qkv = layer.qkv[0](h)
                q, k, v = qkv[:, :nq], qkv[:, nq : nq + nk], qkv[:, nq + nk :]
            else:
                q, k, v = (lin(h) for lin in layer.qkv)
            qk = self._rope(torch.cat([q, k], 1).view(t, H + Hk, D), p0, t)
            q, k = qk[:, :H], qk[:, H:]
            v = v.reshape(t, Hk, D)
            if layer.kv_bits < 16:
                k = Q.fake_quant_kv(k, layer.kv_bits, clip_ratio=layer.kv_clip)
                v = Q.fake_quant_kv(v, layer.kv_bits, clip_ratio=layer.kv_clip)
            kc, vc = self._kc[li], self._vc[li]  # (Hk, T_max, D)
            kc[:, p0 : p0 + t] = k.transpose(0, 1)
            vc[:, p0 : p0 + t] = v.transpose(0, 1)
            a = F.scaled_dot_product_attention(
                q.transpose(0, 1)[None],
                kc[None, :, : p0 + t],
                vc[None, :, : p0 + t],
                is_causal=causal and p0 == 0,
                enable_gqa=H != Hk,
                attn_mask=None if not causal or p0 == 0 else self._mask(p0, t),
            )
            a = a[0].transpose(0, 1).reshape(t, nq)
            if layer.dyn_o:
                r = torch.sqrt(x.pow(2).mean(-1, keepdim=True) + layer.eps)
                x = x + layer.o(a / r) * r
            else:
                x = x + layer.o(a)
            h = F.rms_norm(x, (self.hidden,), layer.ln2, layer.eps)
            if layer.gu_fused:
                gu = layer.gu[0](h)
                g, u = gu[:, : layer.inter], gu[:, layer.inter :]
            else:
                g, u = (lin(h) for lin in layer.gu)
            m = F.silu(g) * u
            if layer.dyn_down:
                r = torch.sqrt(x.pow(2).mean(-1, keepdim=True) + layer.eps)
                x = x + layer.down(m / r) * r
            else:
                x = x + layer.down(m)
        self.pos = p0 + t
        x = F.rms_norm(x, (self.hidden,), self.norm, self.eps)
        return self.head(x)

    def _mask(self, p0: int, t: int) -> Tensor:
        """Boolean mask (t, p0 + t): query i (position p0 + i) sees keys 0..p0 + i."""
        return torch.ones(t, p0 + t, dtype=torch.bool).tril(p0)

    @torch.no_grad()
    def generate(self, prompt: Tensor, n_new: int) -> dict:
        """Greedy decoding: prefill ``prompt`` (T,), then ``n_new`` tokens one at a time.

        Returns tokens, the logits of every step (list of (V,) tensors: prompt's last, then
        each decoded token's), prefill seconds and decode seconds per token."""
        self.reset()
        t0 = time.perf_counter()
        logits = self.forward(prompt.reshape(-1))[-1]
        t1 = time.perf_counter()
        toks, steps = [], [logits]
        nxt = logits.argmax()
        for _ in range(n_new):
            toks.append(int(nxt))
            logits = self.forward(nxt.reshape(1))[0]
            steps.append(logits)
            nxt = logits.argmax()
        t2 = time.perf_counter()
        return {"tokens": toks, "logits": steps, "prefill_s": t1 - t0, "decode_s_per_token": (t2 - t1) / max(n_new, 1)}
