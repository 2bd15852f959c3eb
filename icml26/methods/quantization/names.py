"""Method names of ``icml26 quantize`` and the quantization settings: the FPTQuant variants and the
stages each name runs (``stage_steps``, ``result_name``), the settings each method honours, and
``parse_setting`` (W<b>A<b>[KV<b>]). Torch-free; shared by ``config`` (the Config and its checks) and
``estimate`` (the cost model), so neither imports the other's module at load time.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from icml26.methods.quantization.config import Config

METHODS = ("fp", "rtn", "gptq", "smoothquant", "quarot", "fptquant", "fptquant-merged")  # "all" = these
DEFAULT_METHODS = ("fp", "rtn", "fptquant-merged")  # docs/quantize.md says why this FPTQuant variant
# FPTQuant variants: the transforms each runs beyond the trainable Q/K, value and MLP ones; both train
# them locally (AIMET's LocalTransformOptimizer) then end to end (KL to the FP model).
# fptquant: the paper's set (residual rotation with the RMSNorm gains folded in, online down-projection
# Hadamard, dynamic scaling S_n); fptquant-merged: only transforms that merge into the weights of the
# unchanged architecture (no residual rotation, so no folded norms; no online Hadamard, no S_n): what
# --out exports for transformers.
FPT_VARIANTS: dict[str, dict[str, bool]] = {
    "fptquant": {"rotate": True, "down_hadamard": True, "dyn_scale": True},
    "fptquant-merged": {"rotate": False, "down_hadamard": False, "dyn_scale": False},
}
FPT_METHODS = tuple(FPT_VARIANTS)
# A variant's name means both training stages (local, then end to end). One that runs fewer
# stages carries its own name, in the records and on --method: (local ran, e2e ran) -> suffix.
STAGE_SUFFIX = {(True, True): "", (True, False): "-local", (False, True): "-e2e-only", (False, False): "-untrained"}
FPT_NAMES: dict[str, tuple[str, bool, bool]] = {  # name -> (variant, local allowed, e2e allowed)
    v + suf: (v, lo, e2e) for v in FPT_VARIANTS for (lo, e2e), suf in STAGE_SUFFIX.items()
}
SELECTABLE = METHODS + tuple(n for n in FPT_NAMES if n not in METHODS)
STANDARD_SETTINGS = ("W4A16", "W4A8", "W4A4", "W4A4KV4", "W8A8")  # the full comparison (methods "all")
QUANTIZED = SELECTABLE[1:]


def stage_steps(method: str, cfg: "Config") -> tuple[int, int]:
    """(local steps, end-to-end steps) an FPTQuant name runs under ``cfg`` ((0, 0) for other methods)."""
    if method not in FPT_NAMES:
        return 0, 0
    _, lo, e2e = FPT_NAMES[method]
    return (cfg.local_steps if lo else 0), (cfg.e2e_steps if e2e else 0)


def variant_of(method: str) -> str:
    """The transform set of a method name: ``fptquant-merged-local`` -> ``fptquant-merged``; others as given."""
    return FPT_NAMES[method][0] if method in FPT_NAMES else method


def prepare_key(method: str, cfg: "Config") -> tuple | None:
    """FPTQuant names with the same key share one prepared model (transforms + local stage);
    None for the other methods."""
    return (variant_of(method), stage_steps(method, cfg)[0]) if method in FPT_NAMES else None


def result_name(method: str, cfg: "Config") -> str:
    """The name a result carries: what ran. An FPTQuant name whose stages ``cfg`` switches off
    (``e2e_steps=0``, ``local_steps=0``) is named for the stages that did run
    (``fptquant-merged`` with e2e_steps=0 -> ``fptquant-merged-local``)."""
    if method not in FPT_NAMES:
        return method
    lo, e2e = stage_steps(method, cfg)
    return variant_of(method) + STAGE_SUFFIX[(lo > 0, e2e > 0)]


# Which methods read each setting (Config field). A field that is not listed (model, data,
# evaluation) is read by every method. ``check_settings`` refuses a field that was set but is
# read by none of the selected methods, and one that none of the selected settings uses.
HONOURED_BY: dict[str, tuple[str, ...]] = {
    **{
        f: QUANTIZED
        for f in (
            "group_size",
            "w_sym",
            "w_clip_search",
            "a_sym",
            "act_granularity",
            "a_clip_ratio",
            "kv_clip_ratio",
            "head_bits",
            "save_method",
            "save_setting",
        )
    },
    "smoothquant_alpha": ("smoothquant",),
    **{f: ("gptq",) for f in ("gptq_block_size", "gptq_percdamp", "gptq_act_order")},
    **{f: tuple(FPT_NAMES) for f in ("fpt_qk", "fpt_v", "fpt_mlp")},
    **{f: tuple(n for n, (_, lo, _) in FPT_NAMES.items() if lo) for f in ("local_steps", "local_lr", "local_wd")},
    **{f: tuple(n for n, (_, _, e) in FPT_NAMES.items() if e) for f in ("e2e_steps", "e2e_lr", "e2e_seq_len")},
    **{
        f: tuple(n for n, (v, _, _) in FPT_NAMES.items() if FPT_VARIANTS[v]["rotate"])
        for f in ("fpt_dyn_scale", "fpt_rotate", "fpt_down_hadamard")
    },
}
# ... and which quantizer a field belongs to: it needs a selected setting that quantizes it.
NEEDS_QUANTIZED: dict[str, str] = {
    **{f: "weights" for f in ("group_size", "w_sym", "w_clip_search")},
    **{f: "activations" for f in ("a_sym", "act_granularity", "a_clip_ratio")},
    "kv_clip_ratio": "kv",
}
GGUF_NOTE = (
    "SmolLM2/Gemma GGUF weights ship as 4-bit blocks of 32 (Q4_1/Q4_K); weights are quantized "
    "per channel (or in groups not aligned to 32), so 4-bit RTN does not reproduce the shipped grid"
)


def parse_setting(s: str) -> tuple[int, int, int]:
    """'W4A8' -> (4, 8, 16); 'W4A4KV4' -> (4, 4, 4)."""
    m = re.fullmatch(r"W(\d+)A(\d+)(?:KV(\d+))?", s.strip().upper())
    if not m:
        raise ValueError(f"setting {s!r} is not of the form W<bits>A<bits>[KV<bits>] (e.g. W4A8, W4A4KV4)")
    w, a, kv = int(m.group(1)), int(m.group(2)), int(m.group(3) or 16)
    for name, b in (("W", w), ("A", a), ("KV", kv)):
        if not (2 <= b <= 8 or b == 16):
            raise ValueError(f"setting {s!r}: {name} bits must be in 2..8 or 16, got {b}")
    return w, a, kv
