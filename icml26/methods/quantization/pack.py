"""Packed storage of a quantized model and its real INT4/INT8 execution.

Saved folder (``save_quantized``): a Hugging Face folder with ``config.json`` (the model
config plus ``quantization_config``), the tokenizer, and ``model.safetensors`` holding
  <linear>.qweight  uint8, INT4 two codes per byte (icml26/ops/_ref/quant.py layout) or INT8
  <linear>.scales   float16 (N, G)          <linear>.zeros  uint8 (N, G), asymmetric only
  <linear>.act_scale / .act_zero  float32 scalars, static activation quantization only
  embed_tokens / lm_head .qweight (INT8, per row) + .scales when head_bits = 8
  every other tensor (RMSNorm gains) in float32.
``load_quantized`` rebuilds the model with ``PackedLinear`` modules that run the packed
weights through ``icml26.ops.quant`` (C++ GEMV for decode, dequantize + BLAS for prefill).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import Tensor, nn
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from icml26.core.atomic import atomic_dir
from icml26.core.errors import InputError
from icml26.methods.quantization import hadamard as had
from icml26.methods.quantization import qmodel as QM
from icml26.methods.quantization import quantizers as Q
from icml26.methods.quantization.qmodel import LINEARS, QSpec, QuantLinear, _get, _set, install_dyn_scale_hooks, layers
from icml26.ops import quant as ops

FORMAT = "icml26-packed-v1"
DECODE_INT_ACT = 16  # integer activations of the decode GEMV (see PackedLinear.int_act)


def is_packed_folder(name_or_path: str) -> bool:
    """True for a folder written by ``quantize --out`` in this format (config.json's quantization_config)."""
    f = Path(name_or_path).expanduser() / "config.json"
    if not f.is_file():
        return False
    try:
        qc = json.loads(f.read_text(encoding="utf-8")).get("quantization_config") or {}
    except (OSError, ValueError):
        return False
    return qc.get("format") == FORMAT


def _groups(k: int, group_size: int) -> int:
    return 1 if group_size in (0, None) or group_size >= k else k // group_size


def packed_size_bytes(model, spec: QSpec) -> int:
    """Bytes of the tensors ``save_quantized`` writes for this model and setting."""
    total, seen = 0, set()
    for name, m in model.named_modules():
        if isinstance(m, QuantLinear):
            n, k = m.out_features, m.in_features
            g = _groups(k, spec.group_size)
            total += n * k * m.wbits // 8 + n * g * 2 + (0 if spec.w_sym else n * g)
            if m.abits < 16 and spec.act_granularity == "per-tensor":
                total += 8
            seen.add(m.weight.data_ptr())
    for emb in (model.get_input_embeddings(), model.get_output_embeddings()):
        p = emb.weight
        if p.data_ptr() in seen:
            continue
        seen.add(p.data_ptr())
        v, d = p.shape
        total += (
            v * d * spec.head_bits // 8 + (v * 2 if spec.head_bits < 16 else 0) if spec.head_bits < 16 else v * d * 4
        )
    for p in model.parameters():
        if p.data_ptr() not in seen:
            seen.add(p.data_ptr())
            total += p.numel() * 4
    return total


def _pack_weight(w: Tensor, bits: int, sym: bool, group_size: int, clip_search: bool) -> dict[str, Tensor]:

    q, scale, zero = Q.quantize_weight(w, bits, sym=sym, group_size=group_size, clip_search=clip_search)
    out = {"qweight": ops.pack_int4(q) if bits == 4 else q, "scales": scale.to(torch.float16)}
    if not sym:
        out["zeros"] = zero.to(torch.uint8)
    return out


@torch.no_grad()
def save_quantized(
    model,
    tok,
    path: str | Path,
    spec: QSpec,
    *,
    method: str,
    extras: dict,
    fp_perplexity: float | None = None,
    perplexity: float | None = None,
) -> Path:
    """Write the packed model folder (atomic: built in a temp folder, then renamed)."""

    if spec.wbits not in (4, 8):
        raise ValueError(f"only 4- and 8-bit weights are packed, got {spec.wbits}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tensors: dict[str, Tensor] = {}
    done = set()
    for name, m in model.named_modules():
        if isinstance(m, QuantLinear):
            if m.in_features % 64 and spec.wbits == 4:
                raise ValueError(f"{name}: in_features {m.in_features} is not a multiple of 64 (INT4 packing)")
            for k, t in _pack_weight(m.weight, m.wbits, spec.w_sym, spec.group_size, spec.w_clip_search).items():
                tensors[f"{name}.{k}"] = t.contiguous()
            if m.act_scale is not None:
                tensors[f"{name}.act_scale"] = m.act_scale.reshape(1).float()
                tensors[f"{name}.act_zero"] = m.act_zero.reshape(1).float()
            done.add(f"{name}.weight")
    emb, head = model.get_input_embeddings(), model.get_output_embeddings()
    tied = emb.weight.data_ptr() == head.weight.data_ptr()
    emb_name = next(n for n, mm in model.named_modules() if mm is emb)
    head_name = next(n for n, mm in model.named_modules() if mm is head)
    for nm, mod in ((emb_name, emb), (head_name, head)):
        if nm == head_name and tied:
            done.add(f"{nm}.weight")
            continue
        if spec.head_bits < 16:
            for k, t in _pack_weight(mod.weight, spec.head_bits, True, 0, False).items():
                tensors[f"{nm}.{k}"] = t.contiguous()
        else:
            tensors[f"{nm}.weight"] = mod.weight.detach().float().contiguous()
        done.add(f"{nm}.weight")
    for n, p in model.named_parameters():
        if n not in done:
            tensors[n] = p.detach().float().contiguous()
    qcfg = {
        "format": FORMAT,
        "method": method,
        "wbits": spec.wbits,
        "abits": spec.abits,
        "kvbits": spec.kvbits,
        "w_sym": spec.w_sym,
        "group_size": spec.group_size,
        "a_sym": spec.a_sym,
        "act_granularity": spec.act_granularity,
        "a_clip_ratio": spec.a_clip_ratio,
        "kv_clip_ratio": spec.kv_clip_ratio,
        "head_bits": spec.head_bits,
        "tied_embeddings": tied,
        "online_down_hadamard": bool(extras.get("online_down_hadamard")),
        "dyn_scale": bool(extras.get("dyn_scale")),
        "transforms": list(extras.get("transforms") or []),
        "w_clip_search": bool(spec.w_clip_search and spec.wbits < 16),
        "fp_perplexity": fp_perplexity,
        "perplexity": perplexity,
        "size_bytes": int(sum(t.numel() * t.element_size() for t in tensors.values())),
    }

    with atomic_dir(path) as tmp:
        cfg = model.config.to_dict()
        cfg["tie_word_embeddings"] = tied
        cfg.pop("_attn_implementation", None)
        cfg["quantization_config"] = qcfg
        (tmp / "config.json").write_text(json.dumps(cfg, indent=2, default=str), encoding="utf-8")
        save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": FORMAT})
        if tok is not None:
            tok.save_pretrained(str(tmp))
    return path


class PackedLinear(nn.Module):
    """A linear layer whose weight lives packed (INT4/INT8) and runs through icml26.ops.quant."""

    def __init__(self, t: dict[str, Tensor], in_features: int, bits: int, spec: QSpec):
        super().__init__()
        n = t["qweight"].shape[0]
        self.in_features, self.out_features, self.bits = in_features, n, bits
        g = t["scales"].shape[1]
        self.group_size = in_features // g
        scales = t["scales"].float()
        zero = t["zeros"].float() if "zeros" in t else torch.full_like(scales, float(2 ** (bits - 1)))
        self.register_buffer("qweight", t["qweight"].contiguous())
        self.register_buffer("scales", scales.contiguous())
        self.register_buffer("mins", (-scales * zero).contiguous())
        self.register_buffer("act_scale", t.get("act_scale"))
        self.register_buffer("act_zero", t.get("act_zero"))
        self.spec = spec
        self.abits = 16
        self.online_hadamard = False
        self.dyn_scale = False
        self.token_scale: Tensor | None = None
        self.train_quant = False

        ops._check(torch.zeros(1, in_features), self.qweight, self.scales, self.mins, bits, self.group_size)
        self._checked = True
        # decode GEMV (<= 4 rows) with integer activations per 64-block: 16 = 15-bit codes (default,
        # relative output error ~1e-4), 8 = INT8 (VNNI-able, but ~5% error on SmolLM2's outlier
        # channels), 0 = exact fp32 activations (slower kernel)
        self.int_act = DECODE_INT_ACT if self.group_size % 64 == 0 and in_features % 64 == 0 else 0

    def forward(self, x: Tensor) -> Tensor:

        if self.online_hadamard:
            x = had.apply(x)
        s = self.token_scale if self.dyn_scale else None
        if s is not None:
            x = x / s
        x = Q.fake_quant_act(
            x,
            self.abits,
            self.spec.act_granularity,
            sym=self.spec.a_sym,
            clip_ratio=self.spec.a_clip_ratio,
            scale=self.act_scale,
            zero=self.act_zero,
        )
        y = ops.quant_linear(
            x,
            self.qweight,
            self.scales,
            self.mins,
            self.bits,
            self.group_size,
            checked=self._checked,
            int_act=self.int_act,
        )
        if s is not None:
            y = y * s
        return y


class PackedEmbedding(nn.Module):
    def __init__(self, t: dict[str, Tensor]):
        super().__init__()
        self.register_buffer("qweight", t["qweight"].contiguous())
        self.register_buffer("scales", t["scales"].float().reshape(-1, 1).contiguous())
        self.num_embeddings, self.embedding_dim = t["qweight"].shape

    def forward(self, ids: Tensor) -> Tensor:
        return (self.qweight[ids].float() - 128.0) * self.scales[ids]


class PackedHead(nn.Module):
    """lm_head from INT8 rows (shared with the embedding when tied)."""

    def __init__(self, qweight: Tensor, scales: Tensor):
        super().__init__()
        self.register_buffer("qweight", qweight)
        self.register_buffer("scales", scales.float().reshape(-1, 1).contiguous())
        self.register_buffer("mins", (-128.0 * self.scales).contiguous())
        self.in_features = qweight.shape[1]

        ops._check(torch.zeros(1, self.in_features), self.qweight, self.scales, self.mins, 8, self.in_features)
        # decode GEMV with fp32 activations: exact, and for INT8 codes (one cheap u8 -> fp32
        # conversion per weight) measured faster here than the 15-bit integer path
        self.int_act = 0

    def forward(self, x: Tensor) -> Tensor:

        return ops.quant_linear(
            x, self.qweight, self.scales, self.mins, 8, self.in_features, checked=True, int_act=self.int_act
        )


def load_quantized(path: str | Path):
    """(model, tokenizer, quantization_config) from a folder written by ``save_quantized``."""

    path = Path(path)
    cfgf = path / "config.json"
    if not cfgf.is_file() or not (path / "model.safetensors").is_file():
        raise InputError(f"{str(path)!r} is not a quantized model folder (needs config.json and model.safetensors)")
    raw = json.loads(cfgf.read_text(encoding="utf-8"))
    qc = raw.get("quantization_config") or {}
    if qc.get("format") != FORMAT:
        raise InputError(f"{str(path)!r}: config.json has no {FORMAT} quantization_config")
    spec = QSpec(
        wbits=qc["wbits"],
        abits=qc["abits"],
        kvbits=qc["kvbits"],
        w_sym=qc["w_sym"],
        group_size=qc["group_size"],
        a_sym=qc["a_sym"],
        act_granularity=qc["act_granularity"],
        a_clip_ratio=qc["a_clip_ratio"],
        kv_clip_ratio=qc["kv_clip_ratio"],
        head_bits=qc["head_bits"],
    )
    config = AutoConfig.from_pretrained(str(path), local_files_only=True)
    config.tie_word_embeddings = bool(qc["tied_embeddings"])
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    sd = load_file(str(path / "model.safetensors"))
    groups: dict[str, dict[str, Tensor]] = {}
    plain: dict[str, Tensor] = {}
    for k, v in sd.items():
        base, _, leaf = k.rpartition(".")
        if leaf in ("qweight", "scales", "zeros", "act_scale", "act_zero"):
            groups.setdefault(base, {})[leaf] = v
        else:
            plain[k] = v
    for i, layer in enumerate(layers(model)):
        for name in LINEARS:
            full = f"model.layers.{i}.{name}"
            lin = _get(layer, name)
            pl = PackedLinear(groups.pop(full), lin.in_features, spec.wbits, spec)
            pl.abits = spec.abits
            if name == "mlp.down_proj":
                pl.online_hadamard = bool(qc["online_down_hadamard"])
            if name in ("self_attn.o_proj", "mlp.down_proj"):
                pl.dyn_scale = bool(qc["dyn_scale"])
            _set(layer, name, pl)
        layer.self_attn.kv_bits = spec.kvbits
        layer.self_attn.kv_clip_ratio = spec.kv_clip_ratio
    emb_name = next(n for n, mm in model.named_modules() if mm is model.get_input_embeddings())
    head_name = next(n for n, mm in model.named_modules() if mm is model.get_output_embeddings())
    if spec.head_bits < 16:
        te = groups.pop(emb_name)
        model.set_input_embeddings(PackedEmbedding(te))
        th = te if qc["tied_embeddings"] else groups.pop(head_name)
        model.lm_head = PackedHead(th["qweight"], th["scales"])
    model.load_state_dict(plain, strict=False, assign=True)
    leftover = [n for n, p in list(model.named_parameters()) + list(model.named_buffers()) if p.device.type == "meta"]
    # rotary inv_freq and similar non-persistent buffers are rebuilt on CPU
    for n in leftover:
        mod_name, _, leaf = n.rpartition(".")
        mod = model.get_submodule(mod_name)
        if hasattr(mod, "compute_default_rope_parameters") or "rotary" in mod_name:
            fresh = type(mod)(config)
            for bn, b in fresh.named_buffers():
                mod.register_buffer(bn, b, persistent=False)
            try:
                mod.original_inv_freq = fresh.original_inv_freq
            except AttributeError:
                pass
        else:
            raise InputError(f"{str(path)!r}: tensor {n} is missing from model.safetensors")
    if spec.kvbits < 16:
        QM._register_kv()
        for m in model.modules():
            if hasattr(m, "config") and hasattr(m.config, "_attn_implementation"):
                m.config._attn_implementation = QM._KV_NAME
    if qc["dyn_scale"]:
        install_dyn_scale_hooks(model)
    model.eval()
    tok = (
        AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        if (path / "tokenizer_config.json").exists()
        else None
    )
    if tok is not None and tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return model, tok, qc
