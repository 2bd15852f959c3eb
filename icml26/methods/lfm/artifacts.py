"""Loading what train-lfm wrote: a vae-stage run directory, flow checkpoints, the DiT
architecture of a preset, the (guided) velocity of a flow model, the feature network's accuracy.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor, nn

from icml26.core.errors import InputError
from icml26.methods.lfm import ckpt
from icml26.methods.lfm.config import Config
from icml26.methods.lfm.nets import VAE, DiT, DiTArch, FeatureNet


def _ce_loss(m, b):
    return nn.functional.cross_entropy(m(b["x"]), b["y"])


@torch.no_grad()
def classifier_accuracy(net: FeatureNet, x: Tensor, y: Tensor) -> float:
    net.eval()
    pred = torch.cat([net(x[s : s + 1000]).argmax(1) for s in range(0, len(x), 1000)])
    return float((pred == y).float().mean())


# ----------------------------------------------------------------------------- loading artifacts
def load_vae_dir(vae_dir: str | Path) -> dict:
    """Load a vae-stage run directory: VAE (eval), feature network (or None), latents, metadata."""
    d = Path(vae_dir)
    if not d.is_dir():
        raise InputError(f"--vae {str(vae_dir)!r} is not a directory (expected a `train-lfm --stage vae` run)")
    vt, vm = ckpt.load(d / "vae.safetensors", "VAE checkpoint")
    if vm.get("kind") != "lfm-vae":
        raise InputError(f"{d / 'vae.safetensors'} is not a train-lfm VAE checkpoint")
    vae = VAE(vm["in_channels"], vm["latent_channels"], vm["width"])
    vae.load_state_dict(ckpt.sub(vt, "model"))
    vae.eval()
    lt, lm = ckpt.load(d / "latents.safetensors", "latent cache")
    feat, fm = None, None
    if (d / "features.safetensors").is_file():
        ft, fm = ckpt.load(d / "features.safetensors", "feature network")
        feat = FeatureNet(fm["in_channels"], fm["num_classes"], fm["image_size"], fm["feature_dim"])
        feat.load_state_dict(ckpt.sub(ft, "model"))
        feat.eval()
    return {
        "dir": d.resolve(),
        "vae": vae,
        "vae_meta": vm,
        "features": feat,
        "features_meta": fm,
        "latents": lt["latents"],
        "labels": lt.get("labels"),
        "indices": lt["indices"],
        "latents_meta": lm,
    }


def arch_for(cfg: Config, preset: str, latent_shape, num_classes: int) -> DiTArch:
    C, h, _ = latent_shape
    return DiTArch(in_channels=C, input_size=h, num_classes=num_classes, **cfg.arch(preset))


def load_flow(path: str | Path, *, ema: bool = True) -> tuple[DiT, dict]:
    """An FM checkpoint -> (DiT with EMA weights, eval mode; metadata)."""
    t, m = ckpt.load(path, "flow checkpoint")
    if m.get("kind") != "lfm-flow":
        raise InputError(f"{path}: not a train-lfm flow checkpoint (kind {m.get('kind')!r})")
    net = DiT(DiTArch(**m["arch"]))
    sd = ckpt.sub(t, "ema") if ema and any(k.startswith("ema.") for k in t) else ckpt.sub(t, "model")
    net.load_state_dict(sd)
    net.eval()
    return net, m


def model_velocity(net: DiT, y: Tensor | None, cfg_scale: float = 1.0):
    """v(x, t) for the ODE; classifier-free guidance when cfg_scale != 1 and the model is conditional."""
    if y is None or net.arch.num_classes == 0:
        return lambda x, t: net(x, t, None)
    if cfg_scale == 1.0:
        return lambda x, t: net(x, t, y)
    null = torch.full_like(y, net.arch.num_classes)

    def v(x, t):
        c = net(x, t, y)
        u = net(x, t, null)
        return u + cfg_scale * (c - u)

    return v
