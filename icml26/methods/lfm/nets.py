"""Networks trained here: a small convolutional VAE (the latent space), DiT-style velocity
networks at several capacities, and a CNN classifier whose penultimate layer is the feature
space of the FID / precision / recall reported by ``sample-lfm``.

No pretrained weights ship offline, so all three are trained by ``icml26 train-lfm``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn


# ----------------------------------------------------------------------------- VAE
class VAE(nn.Module):
    """Convolutional VAE: (B, C, H, W) in [0, 1] -> latent (B, latent_channels, H/4, W/4).

    Bernoulli decoder (logits); KL to N(0, I). Reconstructed design (the paper uses a taming
    VQGAN f8 / the SD VAE at 256 px; here f4 on 28 px)."""

    def __init__(self, in_channels: int = 1, latent_channels: int = 4, width: int = 16):
        super().__init__()
        w = width
        self.in_channels, self.latent_channels, self.width = in_channels, latent_channels, width
        self.enc = nn.Sequential(
            nn.Conv2d(in_channels, w, 3, padding=1),
            nn.SiLU(),
            nn.Conv2d(w, w, 4, stride=2, padding=1),
            nn.SiLU(),  # H/2
            nn.Conv2d(w, 2 * w, 4, stride=2, padding=1),
            nn.SiLU(),  # H/4
            nn.Conv2d(2 * w, 2 * w, 3, padding=1),
            nn.SiLU(),
            nn.Conv2d(2 * w, 2 * latent_channels, 3, padding=1),
        )
        self.dec = nn.Sequential(
            nn.Conv2d(latent_channels, 2 * w, 3, padding=1),
            nn.SiLU(),
            nn.Conv2d(2 * w, 2 * w, 3, padding=1),
            nn.SiLU(),
            nn.ConvTranspose2d(2 * w, w, 4, stride=2, padding=1),
            nn.SiLU(),  # H/2
            nn.ConvTranspose2d(w, w, 4, stride=2, padding=1),
            nn.SiLU(),  # H
            nn.Conv2d(w, in_channels, 3, padding=1),
        )

    def encode(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """x (B, C, H, W) in [0, 1] -> (mu, logvar), each (B, Cz, H/4, W/4)."""
        h = self.enc(x * 2.0 - 1.0)
        mu, logvar = h.chunk(2, dim=1)
        return mu, logvar.clamp(-12.0, 8.0)

    def decode_logits(self, z: Tensor) -> Tensor:
        return self.dec(z)

    def decode(self, z: Tensor) -> Tensor:
        """z (B, Cz, h, w) -> images (B, C, 4h, 4w) in [0, 1]."""
        return torch.sigmoid(self.dec(z))

    def loss(self, x: Tensor, noise: Tensor, kl_weight: float) -> Tensor:
        """Negative ELBO per pixel (BCE + kl_weight * KL), mean over the batch. noise: (B, Cz, h, w)."""
        mu, logvar = self.encode(x)
        z = mu + torch.exp(0.5 * logvar) * noise
        rec = F.binary_cross_entropy_with_logits(self.dec(z), x, reduction="none").flatten(1).sum(1)
        kl = 0.5 * (mu.pow(2) + logvar.exp() - 1.0 - logvar).flatten(1).sum(1)
        return (rec + kl_weight * kl).mean() / x[0].numel()

    forward = loss  # so DistributedDataParallel(vae)(x, noise, kl_weight) all-reduces the gradients


# ----------------------------------------------------------------------------- feature network
class FeatureNet(nn.Module):
    """CNN classifier; ``features(x)`` (B, feature_dim) is the embedding used for FID,
    precision/recall, same-seed similarity and the cluster/k-center scorers."""

    def __init__(self, in_channels: int = 1, num_classes: int = 10, image_size: int = 28, feature_dim: int = 64):
        super().__init__()
        self.in_channels, self.num_classes, self.image_size, self.feature_dim = (
            in_channels,
            num_classes,
            image_size,
            feature_dim,
        )
        self.body = nn.Sequential(
            nn.Conv2d(in_channels, 16, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(32 * (image_size // 4) ** 2, feature_dim),
            nn.ReLU(),
        )
        self.head = nn.Linear(feature_dim, max(num_classes, 1))

    def features(self, x: Tensor) -> Tensor:
        return self.body(x * 2.0 - 1.0)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.features(x))


# ----------------------------------------------------------------------------- DiT velocity network
@dataclass(frozen=True)
class DiTArch:
    """Velocity-network shape. ``num_classes`` 0 = unconditional."""

    in_channels: int = 4
    input_size: int = 7
    patch_size: int = 1
    width: int = 64
    depth: int = 2
    heads: int = 4
    mlp_ratio: float = 4.0
    num_classes: int = 0

    def to_dict(self) -> dict:
        return asdict(self)


# capacity presets: config.PRESET_ARCH (the paper pairs DiT-S/2 with DiT-XL/2; these are CPU-sized)


def _sincos_2d(width: int, n: int) -> Tensor:
    """Fixed 2D sine-cosine position embedding, (n*n, width)."""
    if width % 4:
        raise ValueError(f"width must be divisible by 4, got {width}")
    q = width // 4
    omega = 1.0 / 10000 ** (torch.arange(q, dtype=torch.float64) / q)
    yy, xx = torch.meshgrid(torch.arange(n, dtype=torch.float64), torch.arange(n, dtype=torch.float64), indexing="ij")
    out = []
    for c in (yy.reshape(-1), xx.reshape(-1)):
        a = c[:, None] * omega[None]
        out += [torch.sin(a), torch.cos(a)]
    return torch.cat(out, dim=1).float()


def timestep_embedding(t: Tensor, dim: int, max_period: float = 10000.0) -> Tensor:
    """Sinusoidal embedding of t in [0, 1] (scaled by 1000 as in DiT). (B,) -> (B, dim)."""
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
    a = (t.float() * 1000.0)[:, None] * freqs[None]
    return torch.cat([torch.cos(a), torch.sin(a)], dim=-1)


def _modulate(x: Tensor, shift: Tensor, scale: Tensor) -> Tensor:
    return x * (1 + scale[:, None]) + shift[:, None]


class DiTBlock(nn.Module):
    """Transformer block with adaLN-Zero conditioning (Peebles & Xie 2023)."""

    def __init__(self, width: int, heads: int, mlp_ratio: float):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(width, elementwise_affine=False, eps=1e-6)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.norm2 = nn.LayerNorm(width, elementwise_affine=False, eps=1e-6)
        hidden = int(width * mlp_ratio)
        self.mlp = nn.Sequential(nn.Linear(width, hidden), nn.GELU(approximate="tanh"), nn.Linear(hidden, width))
        self.ada = nn.Sequential(nn.SiLU(), nn.Linear(width, 6 * width))
        nn.init.zeros_(self.ada[1].weight)
        nn.init.zeros_(self.ada[1].bias)

    def forward(self, x: Tensor, c: Tensor) -> Tensor:
        B, T, D = x.shape
        sh1, sc1, g1, sh2, sc2, g2 = self.ada(c).chunk(6, dim=-1)
        h = _modulate(self.norm1(x), sh1, sc1)
        q, k, v = self.qkv(h).reshape(B, T, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)  # (3, B, nh, T, hd)
        # explicit softmax attention (49 tokens: as fast as SDPA on CPU, and vmap-able for the grad scorer)
        att = torch.softmax((q @ k.transpose(-2, -1)) * (q.shape[-1] ** -0.5), dim=-1)  # (B, nh, T, T)
        a = (att @ v).transpose(1, 2).reshape(B, T, D)
        x = x + g1[:, None] * self.proj(a)
        x = x + g2[:, None] * self.mlp(_modulate(self.norm2(x), sh2, sc2))
        return x


class DiT(nn.Module):
    """DiT-style velocity network v(x_t, t, y) on latents (B, C, S, S) -> (B, C, S, S).

    Class conditioning by an embedding table with one extra "null" row (index num_classes),
    used for label dropout / unconditional sampling."""

    def __init__(self, arch: DiTArch):
        super().__init__()
        if arch.input_size % arch.patch_size:
            raise ValueError(f"input_size {arch.input_size} is not divisible by patch_size {arch.patch_size}")
        if arch.width % arch.heads:
            raise ValueError(f"width {arch.width} is not divisible by heads {arch.heads}")
        self.arch = arch
        p, w = arch.patch_size, arch.width
        self.grid = arch.input_size // p
        self.embed = nn.Linear(arch.in_channels * p * p, w)
        self.register_buffer("pos", _sincos_2d(w, self.grid), persistent=False)
        self.t_mlp = nn.Sequential(nn.Linear(128, w), nn.SiLU(), nn.Linear(w, w))
        self.y_embed = nn.Embedding(arch.num_classes + 1, w) if arch.num_classes > 0 else None
        self.blocks = nn.ModuleList([DiTBlock(w, arch.heads, arch.mlp_ratio) for _ in range(arch.depth)])
        self.norm = nn.LayerNorm(w, elementwise_affine=False, eps=1e-6)
        self.ada = nn.Sequential(nn.SiLU(), nn.Linear(w, 2 * w))
        self.out = nn.Linear(w, arch.in_channels * p * p)
        for m in (self.ada[1], self.out):
            nn.init.zeros_(m.weight)
            nn.init.zeros_(m.bias)

    def forward(self, x: Tensor, t: Tensor, y: Tensor | None = None) -> Tensor:
        a = self.arch
        B, C, S, _ = x.shape
        p, g = a.patch_size, self.grid
        tok = x.reshape(B, C, g, p, g, p).permute(0, 2, 4, 1, 3, 5).reshape(B, g * g, C * p * p)  # (B, T, C p p)
        h = self.embed(tok) + self.pos
        c = self.t_mlp(timestep_embedding(t, 128))
        if self.y_embed is not None:
            if y is None:
                y = torch.full((B,), a.num_classes, dtype=torch.long, device=x.device)
            c = c + self.y_embed(y)
        for blk in self.blocks:
            h = blk(h, c)
        sh, sc = self.ada(c).chunk(2, dim=-1)
        o = self.out(_modulate(self.norm(h), sh, sc))  # (B, T, C p p)
        return o.reshape(B, g, g, C, p, p).permute(0, 3, 1, 4, 2, 5).reshape(B, C, S, S)


def count_params(m: nn.Module) -> int:
    return sum(p.numel() for p in m.parameters())
