"""Small per-modality encoders and the fusion models.

The official code uses two ResNet-18s with late fusion (concatenation + Linear, OGM-GE recipe).
On a shared CPU the encoders here are small CNNs (inputs (C, H, W): images, word images, log-mel
spectrograms) or MLPs (inputs (D,)) (RECON: sizes mine).

fusion:
  late          concat of the unimodal embeddings -> Linear(N*d, C)   (the official head)
  late-sum      sum of per-modality Linear(d, C) logits
  intermediate  concat of the encoders' convolutional features (before their projection) ->
                a joint MLP Linear(., 128) -> ReLU -> Linear(128, C)
No BatchNorm (so SAM's two passes and the Hessian in eval mode see one and the same function).
"""

from __future__ import annotations

import torch
from torch import nn

FUSIONS = ("late", "late-sum", "intermediate")


class Encoder(nn.Module):
    """(B, C, H, W) -> (B, dim) (two 3x3 stride-2 conv layers of width w, 2w, flatten, Linear + ReLU),
    or (B, D) -> (B, dim) (MLP).
    ``features`` returns the pre-projection features (B, F) used by intermediate fusion."""

    def __init__(self, shape: tuple[int, ...], dim: int = 64, width: int = 16):
        super().__init__()
        self.shape = tuple(shape)
        if len(shape) == 3:
            c, h, w = shape
            self.body = nn.Sequential(
                nn.Conv2d(c, width, 3, stride=2, padding=1),
                nn.ReLU(),
                nn.Conv2d(width, 2 * width, 3, stride=2, padding=1),
                nn.ReLU(),
                nn.Flatten(),
            )

            def o(n):  # output length of a 3x3, stride-2, pad-1 convolution
                return (n - 1) // 2 + 1

            self.feature_dim = 2 * width * o(o(h)) * o(o(w))
        elif len(shape) == 1:
            self.body = nn.Sequential(nn.Linear(shape[0], 4 * width), nn.ReLU())
            self.feature_dim = 4 * width
        else:
            raise ValueError(f"Encoder: sample shape must be (C, H, W) or (D,), got {shape}")
        self.proj = nn.Sequential(nn.Linear(self.feature_dim, dim), nn.ReLU())
        self.dim = dim

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(self.body(x))


class Unimodal(nn.Module):
    """One modality's encoder + Linear(dim, C); takes the dict of inputs and reads its modality."""

    def __init__(self, modality: str, shape, num_classes: int, dim: int = 64, width: int = 16):
        super().__init__()
        self.modality = modality
        self.modalities = (modality,)
        self.enc = Encoder(shape, dim, width)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, xs: dict) -> torch.Tensor:
        return self.head(self.enc(xs[self.modality]))


class Fusion(nn.Module):
    """N encoders fused ``late`` / ``late-sum`` / ``intermediate``; input: {modality: (B, ...)};
    output logits (B, C)."""

    def __init__(self, shapes: dict, num_classes: int, fusion: str = "late", dim: int = 64, width: int = 16):
        super().__init__()
        if fusion not in FUSIONS:
            raise ValueError(f"fusion must be one of {', '.join(FUSIONS)}, got {fusion!r}")
        self.modalities = tuple(shapes)
        self.fusion = fusion
        self.encs = nn.ModuleDict({m: Encoder(s, dim, width) for m, s in shapes.items()})
        if fusion == "late":
            self.head = nn.Linear(dim * len(shapes), num_classes)
        elif fusion == "late-sum":
            self.heads = nn.ModuleDict({m: nn.Linear(dim, num_classes) for m in shapes})
        else:
            f = sum(e.feature_dim for e in self.encs.values())
            self.head = nn.Sequential(nn.Linear(f, 128), nn.ReLU(), nn.Linear(128, num_classes))
            for e in self.encs.values():  # intermediate fusion does not use the projections
                e.proj.requires_grad_(False)

    def forward(self, xs: dict) -> torch.Tensor:
        if self.fusion == "late":
            return self.head(torch.cat([self.encs[m](xs[m]) for m in self.modalities], dim=1))
        if self.fusion == "late-sum":
            return sum(self.heads[m](self.encs[m](xs[m])) for m in self.modalities)
        return self.head(torch.cat([self.encs[m].features(xs[m]) for m in self.modalities], dim=1))


def trainable(model: nn.Module) -> list[nn.Parameter]:
    return [p for p in model.parameters() if p.requires_grad]
