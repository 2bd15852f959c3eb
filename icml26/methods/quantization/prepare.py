"""Each method's function-preserving transforms, applied to a copy of the FP model before it is
quantized (``prepare``), and the figures every result record carries about the model (packed
size, tied embeddings).

rtn / gptq: no transform. smoothquant: per-channel scales folded into the RMSNorm gains and
up_proj rows (Xiao et al. 2023, Eq. 4). quarot: RMSNorm gains folded, embeddings untied, residual
rotated by a randomized Hadamard, head-wise value Hadamard, online Hadamard before down_proj
(Ashkboos et al. 2024). FPTQuant variants (``config.FPT_VARIANTS``): the trainable mergeable
transforms of van Breugel et al. 2026 (pre-RoPE Q/K scaled rotations, value transform, MLP
scaler), optionally on top of QuaRot's residual and down-projection rotations and S_n, trained
by the local stage as in AIMET's ``LocalTransformOptimizer`` (train.train_local), then merged.
"""

from __future__ import annotations

import copy

import torch

from icml26.methods.quantization import hadamard as had
from icml26.methods.quantization import pack
from icml26.methods.quantization import smoothquant as sq
from icml26.methods.quantization import train as TR
from icml26.methods.quantization import transforms as T
from icml26.methods.quantization.config import FPT_NAMES, FPT_VARIANTS, Config, stage_steps, variant_of


def fpt_flags(method: str, cfg: Config) -> dict[str, bool]:
    """The transforms an FPTQuant variant runs (the fpt_* fields switch fptquant's optional ones off)."""
    v = dict(FPT_VARIANTS[variant_of(method)])
    if v["rotate"]:
        v.update(rotate=cfg.fpt_rotate, down_hadamard=cfg.fpt_down_hadamard, dyn_scale=cfg.fpt_dyn_scale)
    return v


def stages(method: str, cfg: Config) -> list[str]:
    """The training stages a method runs, as every result record lists them."""
    if method not in FPT_NAMES:
        return []
    local, e2e = stage_steps(method, cfg)
    out = []
    if local:
        out.append(f"local(steps={local}, AdamW lr={cfg.local_lr:g} weight_decay={cfg.local_wd:g}, data=none)")
    if e2e:
        out.append(f"e2e(steps={e2e}, Adam lr={cfg.e2e_lr:g}, seq_len={cfg.e2e_seq_len}, data=calibration text)")
    return out


def calibration_use(method: str, cfg: Config, abits: int, wbits: int) -> list[str]:
    """What of a (method, setting) run read the calibration text (never the evaluation text), as
    every result record lists it: ``[]`` for a method that saw no text (RTN with dynamic
    activations), so a reader sees when one method had training data another did not."""
    out = []
    if method == "smoothquant":
        out.append("smoothquant activation maxima")
    if method == "gptq" and wbits < 16:
        out.append("gptq hessians")
    e2e = stage_steps(method, cfg)[1]
    if e2e:
        out.append(f"e2e KL training ({e2e} steps x {min(cfg.e2e_seq_len, cfg.seq_len)} tokens)")
    if abits < 16 and cfg.act_granularity == "per-tensor":
        out.append("static activation ranges")
    return out


def prepare(method: str, fp_model, cfg: Config, calib: list, seed: int):
    """A deep copy of the FP model with ``method``'s function-preserving transforms applied.

    Returns (model, extras): extras holds what the quantized forward needs
    (online_down_hadamard, dyn_scale), FPTQuant's trainable state, and ``transforms``: the names
    of the transforms applied, in order. ValueError (with the reason) for a model the method's
    transforms cannot take."""
    model = copy.deepcopy(fp_model)
    applied: list[str] = []
    extras: dict = {"online_down_hadamard": False, "dyn_scale": False, "transforms": applied}
    if method in ("fp", "rtn", "gptq"):
        return model, extras
    T.check_llama(model)
    if method == "smoothquant":
        sq.smooth(model, calib, cfg.smoothquant_alpha)
        applied.append(f"smoothquant_scales(alpha={cfg.smoothquant_alpha:g})")
        return model, extras
    dm = T.dims(model)
    flags = fpt_flags(method, cfg) if method != "quarot" else {"rotate": True, "down_hadamard": True}
    want_down = flags["down_hadamard"]
    down_h = want_down and had.has_hadamard(dm["I"])
    if want_down and not down_h:
        extras["not_applied"] = f"online_down_hadamard: no Hadamard matrix of order intermediate_size={dm['I']}"
    if flags["rotate"]:
        if not had.has_hadamard(dm["D"]):
            raise ValueError(f"no Hadamard matrix of order hidden_size={dm['D']} is available")
        T.untie_embeddings(model)
        T.fuse_norms(model)
        T.rotate_residual(model, had.random_hadamard(dm["D"], seed))
        applied += ["untie_embeddings", "fuse_norms", "residual_hadamard"]
    extras["online_down_hadamard"] = down_h
    if method == "quarot":
        T.value_hadamard(model)
        applied.append("value_hadamard")
        if down_h:
            T.down_hadamard(model)
            applied.append("online_down_hadamard")
        return model, extras
    v_init = had.hadamard(dm["d"]) if flags["rotate"] else None
    params = [T.FPTParams(dm, qk=cfg.fpt_qk, v=cfg.fpt_v, mlp=cfg.fpt_mlp, v_init=v_init) for _ in T.layers(model)]
    bases = T.base_weights(model)
    curve = TR.train_local(
        bases,
        params,
        dm,
        steps=stage_steps(method, cfg)[0],
        lr=cfg.local_lr,
        weight_decay=cfg.local_wd,
        down_hadamard=down_h,
    )
    with torch.no_grad():
        T.merge_into(model, bases, params, dm, down_hadamard=down_h)
    applied += [
        name
        for on, name in (
            (cfg.fpt_qk, "qk_transform"),
            (cfg.fpt_v, "value_transform" + ("(from value_hadamard)" if flags["rotate"] else "")),
            (cfg.fpt_mlp, "mlp_scaler"),
            (down_h, "online_down_hadamard"),
            (flags["dyn_scale"], "dyn_scale"),
        )
        if on
    ]
    extras.update(dyn_scale=flags["dyn_scale"], bases=bases, params=params, dm=dm, local_curve=curve)
    return model, extras


def model_size_bytes(model, method: str, spec) -> int:
    """Bytes of the stored model: fp32 for ``fp``; otherwise the packed layout of
    icml26.methods.quantization.pack (codes at wbits, fp16 scales, uint8 zeros if asym,
    embeddings/lm_head at head_bits, norms fp32)."""
    if method == "fp":
        seen, total = set(), 0
        for p in model.parameters():
            if p.data_ptr() not in seen:
                seen.add(p.data_ptr())
                total += p.numel() * 4
        return total
    return pack.packed_size_bytes(model, spec)


def tied_embeddings(model) -> bool:
    """True when lm_head shares the input embedding's weight (rotations untie them)."""
    return model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
