"""What train-lfm checks before it writes anything (InputError, exit 2): --vae's run directory,
the seam / score checkpoints, and on --resume the run's own checkpoints against these settings.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from torch import nn

from icml26.core.errors import InputError
from icml26.methods.lfm import ckpt
from icml26.methods.lfm.artifacts import arch_for, load_flow, load_vae_dir
from icml26.methods.lfm.config import Config
from icml26.methods.lfm.nets import VAE, DiT

RUN_CHECKPOINTS = ("vae.safetensors", "features.safetensors", "checkpoint.safetensors")


@dataclass
class Inputs:
    """What validate() loaded to check it, handed on to run() so nothing is read twice:
    --vae's run directory (load_vae_dir, for --stage fm) and the seam / score flow models."""

    vae: dict | None = None
    seam: DiT | None = None
    score: DiT | None = None


def validate(cfg: Config, out: str | Path | None, resume: bool) -> Inputs:
    """Every input file a run will read, checked before it writes anything (InputError, exit 2):
    --vae's run directory, seam_checkpoint / score_checkpoint (whole flow checkpoints, whose
    latent shape must be this run's), on --resume the run's own checkpoints in ``out``
    (structure, stage, and tensor names/shapes against the networks these settings build),
    then the data set (a built-in not installed: MissingDataError naming the install command).
    Returns what it loaded (pass it to run())."""
    if out is None:
        raise InputError("train-lfm needs --out DIR (checkpoints and the latent cache are written there)")
    if cfg.stage == "fm" and not cfg.vae:
        raise InputError("--stage fm needs --vae DIR (the run directory of `train-lfm --stage vae`)")
    inputs = Inputs()
    latent_shape: list | None = None  # (C, h, w) of this run's latents, where known before training
    if cfg.stage == "fm":
        inputs.vae = load_vae_dir(cfg.vae)
        latent_shape = list(inputs.vae["latents_meta"]["latent_shape"])
    if cfg.seam_checkpoint and not cfg.t_max < 1.0:
        raise InputError("seam_checkpoint needs t_max < 1 (the switch time of the coarse model)")
    for p, what in ((cfg.seam_checkpoint, "seam"), (cfg.score_checkpoint, "score")):
        if p:
            ckpt.existing_file(p, f"{what}_checkpoint")
            net = load_flow(p)[0]
            _check_latent_shape(net, p, what, cfg, latent_shape)
            setattr(inputs, what, net)
    if resume:
        _check_resume(cfg, Path(out), latent_shape, inputs)
    if cfg.stage != "fm":  # a built-in data set not installed / a missing path: before the config record
        from icml26.core.data.images import require_images

        require_images(cfg.dataset)
    return inputs


def _check_latent_shape(net: DiT, path: str, what: str, cfg: Config, latent_shape: list | None) -> None:
    """A seam / score flow model must work on this run's latents (same channels and size)."""
    a = net.arch
    theirs = [a.in_channels, a.input_size, a.input_size]
    if latent_shape is not None:
        if theirs != list(latent_shape):
            raise InputError(
                f"{what}_checkpoint {path!r} works on latents of shape {theirs}, but this run's latents "
                f"(--vae {cfg.vae}) are {list(latent_shape)}; use a flow checkpoint trained on the same VAE"
            )
    elif a.in_channels != cfg.latent_channels:
        raise InputError(
            f"{what}_checkpoint {path!r} works on latents of shape {theirs}, but this run's VAE makes "
            f"{cfg.latent_channels}-channel latents (latent_channels={cfg.latent_channels}); use a flow checkpoint "
            "trained on the same VAE"
        )


_RESUME_FIX = "resume with the run's settings or start a new --out"
# DiTArch field -> the setting that decides it
_ARCH_SETTINGS = {
    "width": "model/width",
    "depth": "model/depth",
    "heads": "model/heads",
    "in_channels": "latent_channels (the VAE)",
    "input_size": "dataset (image size)",
    "num_classes": "conditional / dataset classes",
    "patch_size": "patch_size",
    "mlp_ratio": "mlp_ratio",
}


def _shape_diff(shapes: dict[str, list[int]], module: nn.Module, prefix: str = "model") -> str | None:
    """The first tensor of ``module`` whose name or shape differs from the checkpoint's ``prefix.*``."""
    want = {f"{prefix}.{k}": list(v.shape) for k, v in module.state_dict().items()}
    have = {k: v for k, v in shapes.items() if k.startswith(prefix + ".")}
    for k, v in want.items():
        if k not in have:
            return f"{k} missing from the checkpoint"
        if have[k] != v:
            return f"{k} has shape {have[k]} in the checkpoint, {v} with these settings"
    for k in have:
        if k not in want:
            return f"the checkpoint's {k} is not in the model these settings build"
    return None


def _expect_stage(f: Path, m: dict, stage: str, kind: str) -> None:
    if m.get("stage") != stage or m.get("kind") != kind:
        raise InputError(
            f"--resume: {f} is a {m.get('stage')!r} checkpoint ({m.get('kind')}), expected the run's {stage!r} "
            f"checkpoint ({kind}); remove it to train that stage again, or choose another --out"
        )


def _check_resume(cfg: Config, out: Path, latent_shape: list | None, inputs: Inputs) -> None:
    """--resume: the checkpoints in ``out`` that this stage reads must be files of that stage whose
    tensors (names and shapes) fit the networks these settings build. InputError otherwise."""
    fix = "--resume reads it; remove it to train that stage again, or choose another --out"
    heads = {}
    for name in RUN_CHECKPOINTS:
        f = out / name
        if f.exists() and not f.is_file():
            raise InputError(
                f"--resume: {f} is a directory, not the run's checkpoint file; remove it, or choose another --out"
            )
        if f.is_file():
            heads[name] = ckpt.header(f, "checkpoint", fix)
    if cfg.stage in ("vae", "all"):
        if "vae.safetensors" in heads:
            f = out / "vae.safetensors"
            shapes, m = heads["vae.safetensors"]
            _expect_stage(f, m, "vae", "lfm-vae")
            diff = _shape_diff(shapes, VAE(int(m.get("in_channels", 1)), cfg.latent_channels, cfg.vae_width))
            if diff:
                raise InputError(
                    f"--resume: checkpoint {f} was trained with a different VAE (latent_channels "
                    f"{m.get('latent_channels')}, "
                    f"vae_width {m.get('width')}; these settings build latent_channels {cfg.latent_channels}, "
                    "vae_width "
                    f"{cfg.vae_width}: {diff}); {_RESUME_FIX}"
                )
        if "features.safetensors" in heads:
            _expect_stage(out / "features.safetensors", heads["features.safetensors"][1], "features", "lfm-features")
    if cfg.stage not in ("fm", "all") or "checkpoint.safetensors" not in heads:
        return
    f = out / "checkpoint.safetensors"
    shapes, m = heads["checkpoint.safetensors"]
    _expect_stage(f, m, "fm", "lfm-flow")
    have = dict(m.get("arch") or {})
    if cfg.stage == "fm":
        lm, labels = inputs.vae["latents_meta"], inputs.vae["labels"]
        num_classes = int(lm["num_classes"]) if cfg.conditional and labels is not None else 0
    elif (out / "latents.safetensors").is_file():  # stage all: the run's own latent cache
        lm = ckpt.header(out / "latents.safetensors", "latent cache", fix)[1]
        latent_shape = list(
            lm.get("latent_shape") or [cfg.latent_channels, have.get("input_size", 7), have.get("input_size", 7)]
        )
        num_classes = int(lm.get("num_classes", 0)) if cfg.conditional else 0
    else:
        s = int(have.get("input_size", 7))
        latent_shape = [cfg.latent_channels, s, s]
        num_classes = int(have.get("num_classes", 0)) if cfg.conditional else 0
    want = arch_for(cfg, cfg.model, latent_shape, num_classes)
    try:
        net = DiT(want)
    except ValueError as e:
        raise InputError(f"model settings: {e}") from None
    fields = [k for k, v in want.to_dict().items() if have.get(k) != v]
    diff = _shape_diff(shapes, net) or (
        _shape_diff(shapes, net, "ema") if any(k.startswith("ema.") for k in shapes) else None
    )
    if fields or diff:
        theirs = ", ".join(f"{k} {have.get(k)}" for k in fields)
        mine = ", ".join(f"{k} {getattr(want, k)}" for k in fields)
        which = ", ".join(dict.fromkeys(_ARCH_SETTINGS.get(k, k) for k in fields))
        detail = (
            f"DiT {theirs} (preset {m.get('preset')}); these settings (model={cfg.model}) build {mine}; differing: "
            f"{which}"
            if fields
            else f"DiT preset {m.get('preset')}"
        )
        raise InputError(
            f"--resume: checkpoint {f} was trained with a different model ({detail}"
            f"{'; ' + diff if diff else ''}); {_RESUME_FIX}"
        )
    ratio, scorer = m.get("keep_ratio"), m.get("scorer")
    if ratio is not None and float(ratio) != cfg.keep_ratio:
        raise InputError(
            f"--resume: checkpoint {f} was trained on keep_ratio {ratio} (scorer {scorer}), these settings give "
            f"keep_ratio {cfg.keep_ratio}; {_RESUME_FIX}"
        )
    if ratio is not None and float(ratio) < 1.0 and scorer not in (None, cfg.scorer):
        raise InputError(
            f"--resume: checkpoint {f} kept its subset with scorer {scorer}, these settings give scorer {cfg.scorer}; "
            f"{_RESUME_FIX}"
        )
