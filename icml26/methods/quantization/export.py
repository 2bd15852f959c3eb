"""Export to the compressed-tensors ``pack-quantized`` format, which transformers loads with the
``compressed-tensors`` package installed (``AutoModelForCausalLM.from_pretrained``; no icml26).

Only a model whose transforms all merge into the weights of the unchanged architecture can be
written this way (rtn, smoothquant, fptquant-merged; symmetric weights): an online Hadamard or S_n would need a
forward the loader does not have. Per decoder linear: ``weight_packed`` (signed codes q - zero,
eight INT4 / four INT8 to an int32, ``compressed_tensors...pack_to_int32``), ``weight_scale``
(N, groups), ``weight_shape``; asymmetric grids add ``weight_zero_point``. Scales are the fp16-
rounded ones fake quantization used, stored in fp32, so the dequantized weights are icml26's to
the bit. Embedding / lm_head (INT8 per row in icml26) are stored dequantized in fp32; activation
and KV quantization are not carried (the loader runs the weights with fp32 activations).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from compressed_tensors import __version__ as CT_VERSION
from compressed_tensors.compressors.pack_quantized.helpers import pack_to_int32
from safetensors.torch import save_file

from icml26.core.atomic import atomic_dir
from icml26.methods.quantization import quantizers as Q
from icml26.methods.quantization.config import FPT_NAMES, FPT_VARIANTS
from icml26.methods.quantization.qmodel import QSpec, quant_linears

FORMAT = "compressed-tensors"
# methods whose transforms leave the architecture as it is (fptquant-merged and its stage names)
MERGEABLE = ("rtn", "smoothquant", *(n for n, (v, _, _) in FPT_NAMES.items() if not FPT_VARIANTS[v]["rotate"]))


def is_export_folder(path) -> bool:
    """True for a folder written by :func:`save_compressed` (config.json's quant_method)."""
    f = Path(path).expanduser() / "config.json"
    try:
        qc = json.loads(f.read_text(encoding="utf-8")).get("quantization_config") or {}
    except (OSError, ValueError):
        return False
    return qc.get("quant_method") == FORMAT and "icml26" in qc


def quantization_config(spec: QSpec, icml26: dict) -> dict:
    strategy = "channel" if spec.group_size == 0 else "group"
    weights = {
        "num_bits": spec.wbits,
        "type": "int",
        "symmetric": spec.w_sym,
        "strategy": strategy,
        "group_size": spec.group_size or None,
        "dynamic": False,
        "observer": "minmax",
    }
    return {
        "quant_method": FORMAT,
        "format": "pack-quantized",
        "quantization_status": "compressed",
        "config_groups": {
            "group_0": {
                "targets": ["Linear"],
                "weights": weights,
                "input_activations": None,
                "output_activations": None,
            }
        },
        "ignore": ["lm_head"],
        "kv_cache_scheme": None,
        "version": CT_VERSION,
        "icml26": icml26,  # what icml26 measured (method, setting, perplexity); transformers ignores it
    }


@torch.no_grad()
def save_compressed(model, tok, path, spec: QSpec, *, method: str, transforms: list, perplexity=None) -> Path:
    """Write ``model`` (wrapped by qmodel.quantize_model, transforms merged) as a compressed-tensors
    folder at ``path`` (atomic). ValueError for a method whose transforms do not all merge."""
    if method not in MERGEABLE:
        raise ValueError(f"{method}: its transforms do not all merge; only {', '.join(MERGEABLE)} export")
    if spec.wbits not in (4, 8):
        raise ValueError(f"only 4- and 8-bit weights are exported, got {spec.wbits}")
    if not spec.w_sym:  # transformers' loader allocates unpacked zero points, the compressor reads packed ones
        raise ValueError("asymmetric weights are not exported in this format (its zero points do not load)")
    tensors: dict[str, torch.Tensor] = {}
    done = set()
    for name, m in quant_linears(model):
        w = m.weight.detach().float()
        scale, zero = Q.weight_qparams(
            w, m.wbits, sym=spec.w_sym, group_size=spec.group_size, clip_search=spec.w_clip_search
        )
        wg = Q._grouped(w, spec.group_size)
        codes = Q.quantize(wg, scale[..., None], zero[..., None], m.wbits).reshape(w.shape)
        offset = 2 ** (m.wbits - 1)  # compressed-tensors stores signed codes: q - 2^(b-1); zero point likewise
        tensors[f"{name}.weight_packed"] = pack_to_int32((codes - offset).to(torch.int8), m.wbits)
        tensors[f"{name}.weight_scale"] = scale.float().contiguous()
        tensors[f"{name}.weight_shape"] = torch.tensor(list(w.shape), dtype=torch.int64)
        if not spec.w_sym:
            # unpacked (N, groups) int8: the shape transformers' compressed-tensors loader allocates
            tensors[f"{name}.weight_zero_point"] = (zero - offset).to(torch.int8).contiguous()
        if m.bias is not None:
            tensors[f"{name}.bias"] = m.bias.detach().float().contiguous()
        done |= {f"{name}.weight", f"{name}.bias"}
    emb, head = model.get_input_embeddings(), model.get_output_embeddings()
    tied = emb.weight.data_ptr() == head.weight.data_ptr()
    for n, p in model.named_parameters():
        if n not in done:
            tensors[n] = p.detach().float().contiguous()
    if tied:
        tensors.pop("lm_head.weight", None)
    icml = {"method": method, "wbits": spec.wbits, "abits": spec.abits, "kvbits": spec.kvbits}
    icml.update(group_size=spec.group_size, w_sym=spec.w_sym, transforms=list(transforms), perplexity=perplexity)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_dir(path) as tmp:
        cfg = model.config.to_dict()
        cfg["tie_word_embeddings"] = tied
        cfg.pop("_attn_implementation", None)
        cfg["torch_dtype"] = cfg["dtype"] = "float32"
        cfg["quantization_config"] = quantization_config(spec, icml)
        (tmp / "config.json").write_text(json.dumps(cfg, indent=2, default=str), encoding="utf-8")
        save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        if tok is not None:
            tok.save_pretrained(str(tmp))
    return path


def exportable(method: str, spec: QSpec) -> bool:
    return method in MERGEABLE and spec.w_sym and spec.wbits in (4, 8)


def folder_bytes(path) -> int:
    """Bytes of the weights file of an exported folder."""
    return sum(f.stat().st_size for f in Path(path).glob("*.safetensors"))


def read_icml26(path) -> dict:
    """What icml26 recorded in an exported folder (method, bits, perplexity), with its weight bytes."""
    qc = json.loads((Path(path) / "config.json").read_text(encoding="utf-8"))["quantization_config"]
    return {**qc["icml26"], "size_bytes": folder_bytes(path)}
