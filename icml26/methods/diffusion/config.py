"""Settings of ``icml26 icr analyze`` (``AnalyzeConfig``) and ``icml26 icr train`` (``TrainConfig``).
Torch-free: ``--set`` values, ranges and sizes are checked before the method's heavy imports; the
methods are in :mod:`icml26.methods.diffusion.analyze` and :mod:`icml26.methods.diffusion.train`."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from icml26.core.settings import Work


@dataclass(frozen=True)
class AnalyzeConfig:
    data: str = "fashion-mnist"  # fashion-mnist | mnist | an .npz | an image folder (labels for the probe)
    noise_levels: tuple[float, ...] = ()  # sigma (EDM) or timesteps t (DDPM); empty = the schedule's default grid
    feature_layer: str = "mid_block"  # mid_block | down_blocks.K | up_blocks.K | any submodule name
    views: int = field(default=2, metadata={"sized": 1024})  # perturbations per image (>= 2)
    icr_images: int = field(
        default=1024, metadata={"sized": 10**6}
    )  # training images for ICR (and the probe's training set)
    probe_test_images: int = field(default=1000, metadata={"sized": 10**6})  # test images for the probe's accuracy
    batch_size: int = field(default=256, metadata={"sized": 65536})  # images per forward pass
    shrinkage_rel: float = 1e-6  # tau = shrinkage_rel * Tr(Sigma_xi) / d
    shift_px: int = 2  # augmentation: random shift (pad + crop), pixels
    hflip: bool = True  # augmentation: horizontal flip with probability 1/2
    jitter: float = 0.1  # augmentation: brightness / contrast jitter

    def __post_init__(self):
        if self.views < 2:
            raise ValueError(f"views must be >= 2 (the ICR needs two perturbations per image), got {self.views}")
        if self.icr_images < 2:
            raise ValueError(f"icr_images must be >= 2, got {self.icr_images}")
        for name in ("probe_test_images", "shift_px"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if not 0.0 <= self.jitter < 1.0:
            raise ValueError(f"jitter must be in [0, 1), got {self.jitter}")
        if not self.shrinkage_rel >= 0.0:
            raise ValueError(f"shrinkage_rel must be >= 0, got {self.shrinkage_rel}")


@dataclass(frozen=True)
class TrainConfig:
    data: str = "fashion-mnist"  # fashion-mnist | mnist | an .npz | an image folder
    train_sizes: tuple[int, ...] = (256,)  # training images per run; 0 = the whole training split
    image_size: int = field(default=16, metadata={"sized": 1024})  # images are resized to image_size x image_size
    preset: Literal["tiny", "small", "base"] = "tiny"  # U-Net preset (unet.PRESETS)
    steps: int = field(default=4000, metadata={"sized": 10**7})  # training steps per size
    batch_size: int = field(default=32, metadata={"sized": 65536})  # images per step (split over torchrun processes)
    lr: float = 1e-3  # Adam learning rate
    ema_decay: float = 0.995  # exponential moving average of the weights (the sampled model)
    monitor_every: int = 250  # steps between monitor points (ICR, memorization, checkpoint)
    monitor_sigma: float = 0.29  # sigma* of the ICR monitor (paper, EDM)
    monitor_images: int = field(default=512, metadata={"sized": 10**6})  # training images the ICR monitor measures
    monitor_views: int = field(default=4, metadata={"sized": 1024})  # perturbations per monitored image (>= 2)
    feature_layer: str = "mid_block"  # U-Net layer whose features the ICR monitor reads
    shrinkage_rel: float = 1e-6  # tau = shrinkage_rel * Tr(Sigma_xi) / d
    shift_px: int = 2  # monitor augmentation: random shift (pad + crop)
    hflip: bool = True  # monitor augmentation: horizontal flip with probability 1/2
    jitter: float = 0.1  # monitor augmentation: brightness / contrast jitter
    memorization_samples: int = field(default=128, metadata={"sized": 10**5})  # generated images per monitor point
    sampler_steps: int = field(default=18, metadata={"sized": 10**4})  # Heun steps (2 * steps - 1 network evaluations)
    memorization_threshold: float = 0.05  # onset: first memorization_fraction above this
    smoothing_window: int = 3  # monitor points in the moving average of the ICR curve
    quality: bool = True  # Frechet distance in a classifier trained here
    feature_steps: int = 300  # training steps of that classifier
    p_mean: float = -1.2  # EDM training noise: ln(sigma) ~ N(p_mean, p_std^2)
    p_std: float = 1.2  # EDM training noise: spread of ln(sigma)
    sigma_data: float = 0.5  # EDM: standard deviation of the data

    def work(self) -> list[Work]:
        """Image-steps of training (steps x batch_size x image pixels per run), against 2e11."""
        px = self.image_size * self.image_size
        amount = float(self.steps) * self.batch_size * px * len(self.train_sizes)
        return [Work(amount, 2e11, "pixel-steps of U-Net training", "steps, batch_size, image_size or train_sizes")]

    def __post_init__(self):
        if not self.train_sizes or any(n < 0 for n in self.train_sizes):
            raise ValueError(
                f"train_sizes must be a non-empty list of sizes >= 0 (0 = all), got {list(self.train_sizes)}"
            )
        if len(set(self.train_sizes)) != len(self.train_sizes):
            raise ValueError(f"train_sizes repeat a value: {list(self.train_sizes)}")
        if self.image_size < 8 or self.image_size % 4:
            raise ValueError(f"image_size must be a multiple of 4 and >= 8, got {self.image_size}")
        for name in ("steps",):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("batch_size", "monitor_every", "monitor_images", "memorization_samples", "smoothing_window"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.monitor_views < 2:
            raise ValueError(f"monitor_views must be >= 2, got {self.monitor_views}")
        if self.sampler_steps < 2:
            raise ValueError(f"sampler_steps must be >= 2, got {self.sampler_steps}")
        if not self.monitor_sigma >= 0 or not math.isfinite(self.monitor_sigma):
            raise ValueError(f"monitor_sigma must be a finite sigma >= 0, got {self.monitor_sigma}")
        if not 0.0 <= self.ema_decay < 1.0:
            raise ValueError(f"ema_decay must be in [0, 1), got {self.ema_decay}")
        if not 0.0 <= self.memorization_threshold < 1.0:
            raise ValueError(f"memorization_threshold must be in [0, 1), got {self.memorization_threshold}")
        if self.lr <= 0 or self.sigma_data <= 0 or self.p_std <= 0:
            raise ValueError("lr, sigma_data and p_std must be > 0")
        if self.feature_steps < 0:
            raise ValueError(f"feature_steps must be >= 0, got {self.feature_steps}")
