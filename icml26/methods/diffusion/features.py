"""Features of a U-Net denoiser at one noise level, for V perturbations of each image
(arXiv 2606.09718, Sec. 3; paper footnote 1: augmentation first, then noise).

  1. views: each image x0 (in [-1, 1]) gets V independent augmentations ``augment`` -- random
     shift by up to ``shift_px`` pixels (pad with the background value -1, then crop: the paper's
     RandomCrop), horizontal flip with probability 1/2, brightness/contrast jitter of +-``jitter``
     (RECON: the paper's "Aug.3" = RandomCrop + HFlip + ColorJitter, magnitudes not given);
  2. noise: each view gets its own noise at the level (``Schedule.perturb``);
  3. one forward pass of the U-Net with a forward hook on the chosen block (``mid_block`` by
     default; ``down_blocks.K``, ``up_blocks.K`` or any submodule name); its output (the first
     element when a block returns a tuple) is mean-pooled over space -> d = channels (paper Method 1).
The hook is removed when the pass ends, also on an error (``capture``). Every random draw comes
from one generator seeded by the caller, so features are a function of (seed, images, level).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import numpy as np
import torch
from torch import Tensor

from icml26.core.errors import InputError
from icml26.methods.diffusion.unet import Schedule


def layer_names(unet) -> list[str]:
    """The block names a user can pick as ``feature_layer``."""
    names = [f"down_blocks.{i}" for i in range(len(unet.down_blocks))] + ["mid_block"]
    return names + [f"up_blocks.{i}" for i in range(len(unet.up_blocks))]


def resolve_layer(unet, name: str):
    """The submodule called ``name``; InputError listing the block names otherwise."""
    try:
        mod = unet.get_submodule(name)
    except AttributeError:
        mod = None
    if mod is None or mod is unet or name == "":
        raise InputError(
            f"feature_layer {name!r} is not a module of this U-Net; choose one of {', '.join(layer_names(unet))} "
            "(or any submodule name)"
        )
    return mod


@contextmanager
def capture(unet, name: str) -> Iterator[list]:
    """Forward hook on ``name`` that appends its mean-pooled output (B, C) to the yielded list;
    removed on exit (also when the body raises)."""
    mod = resolve_layer(unet, name)
    got: list[Tensor] = []

    def hook(_m, _inp, out):
        o = out[0] if isinstance(out, (tuple, list)) else out
        if getattr(o, "ndim", 0) == 4:
            got.append(o.detach().float().mean(dim=(2, 3)))  # (B, C): mean over space
        elif getattr(o, "ndim", 0) == 3:
            got.append(o.detach().float().mean(dim=1))  # (B, T, C) tokens: mean over tokens
        else:
            raise InputError(f"feature_layer {name!r} returns {type(o).__name__}, not a (B, C, H, W) feature map")

    handle = mod.register_forward_hook(hook)
    try:
        yield got
    finally:
        handle.remove()


def augment(x: Tensor, gen: torch.Generator, *, shift_px: int = 2, hflip: bool = True, jitter: float = 0.1) -> Tensor:
    """One random augmentation per image. x (B, C, H, W) in [-1, 1] -> same shape, clamped to [-1, 1]."""
    b, c, h, w = x.shape
    y = x
    if shift_px > 0:
        pad = torch.nn.functional.pad(x, (shift_px,) * 4, value=-1.0)
        dx = torch.randint(0, 2 * shift_px + 1, (b,), generator=gen)
        dy = torch.randint(0, 2 * shift_px + 1, (b,), generator=gen)
        y = _crop(pad, dy, dx, h, w)
    if hflip:
        flip = torch.rand(b, generator=gen) < 0.5
        y = torch.where(flip.view(b, 1, 1, 1), y.flip(3), y)
    if jitter > 0:
        bright = (torch.rand(b, generator=gen) * 2 - 1) * jitter
        contrast = 1.0 + (torch.rand(b, generator=gen) * 2 - 1) * jitter
        m = y.mean(dim=(1, 2, 3), keepdim=True)
        y = (y - m) * contrast.view(b, 1, 1, 1) + m + 2.0 * bright.view(b, 1, 1, 1)  # brightness in [0, 1] units
    return y.clamp(-1.0, 1.0)


def _crop(pad: Tensor, dy: Tensor, dx: Tensor, h: int, w: int) -> Tensor:
    return torch.stack(
        [pad[i, :, int(dy[i]) : int(dy[i]) + h, int(dx[i]) : int(dx[i]) + w] for i in range(pad.shape[0])]
    )


@torch.no_grad()
def view_features(
    unet,
    x0: Tensor,
    sched: Schedule,
    level: float,
    *,
    views: int,
    layer: str,
    seed: int,
    batch_size: int = 256,
    shift_px: int = 2,
    hflip: bool = True,
    jitter: float = 0.1,
) -> Tensor:
    """Features (N, V, d) of N images x0 (N, C, H, W) in [-1, 1] under V perturbations at one noise level.

    views = 1 with shift_px = 0, hflip False, jitter 0 gives the plain noised image's features.
    The generator is seeded by ``seed`` only, so the same images get the same views at every level
    (the paper's protocol: the same subset at every sigma)."""
    gen = torch.Generator().manual_seed(int(seed))
    n = x0.shape[0]
    out = []
    was_training = unet.training
    unet.eval()
    try:
        with capture(unet, layer) as got:
            for v in range(views):
                feats = []
                for s in range(0, n, batch_size):
                    xb = x0[s : s + batch_size]
                    a = (
                        augment(xb, gen, shift_px=shift_px, hflip=hflip, jitter=jitter)
                        if (shift_px or hflip or jitter)
                        else xb
                    )
                    eps = torch.randn(a.shape, generator=gen)
                    inp, t = sched.perturb(a, level, eps)
                    got.clear()
                    unet(inp, t)
                    if len(got) != 1:
                        raise RuntimeError(
                            f"feature_layer {layer!r} ran {len(got)} times in one forward pass (expected once)"
                        )
                    feats.append(got[0])
                out.append(torch.cat(feats))  # (N, d)
    finally:
        unet.train(was_training)
    return torch.stack(out, dim=1)  # (N, V, d)


def prepare_images(images_uint8, size: int, channels: int) -> Tensor:
    """uint8 (N, C, H, W) -> float (N, channels, size, size) in [-1, 1] (bilinear resize with antialias;
    gray images repeated to 3 channels for an RGB model)."""
    x = torch.from_numpy(np.ascontiguousarray(images_uint8)).float().div_(127.5).sub_(1.0)
    if x.shape[-1] != size or x.shape[-2] != size:
        x = torch.nn.functional.interpolate(x, size=(size, size), mode="bilinear", antialias=True, align_corners=False)
    if x.shape[1] != channels:
        if x.shape[1] == 1:
            x = x.repeat(1, channels, 1, 1)
        elif channels == 1:
            x = x.mean(1, keepdim=True)
        else:
            raise InputError(f"images have {x.shape[1]} channels, the model takes {channels}")
    return x.clamp(-1, 1)
