"""Settings of ``icml26 train-lfm`` (torch-free, so settings are checked before heavy imports).

Field meanings and the stages are described in ``train.py``; the presets are ``nets.PRESETS``
and the scorers ``reduce`` (LFM stability, ICML 2026, arXiv 2605.08398).
"""

from __future__ import annotations

from dataclasses import dataclass

PRESETS = ("small", "medium", "large", "xl")  # keys of nets.PRESETS
SCORERS = ("random", "kcenter", "balanced-cluster", "cluster-proportional", "loss", "grad")
CLUSTERINGS = ("spherical", "euclidean")  # the official L2-normalised spherical k-means; our earlier variant
STAGES = ("vae", "fm", "all")
T_EPS = 1e-4


@dataclass(frozen=True)
class Config:
    dataset: str = "fashion-mnist"  # fashion-mnist | mnist | .npz | image folder (stage vae/all)
    image_size: int = 0  # 0 = the images' own size; else resize to image_size x image_size (warns)
    stage: str = "all"  # vae | fm | all
    vae: str = ""  # stage fm: run dir of a vae stage
    train_size: int = 0  # 0 = whole train split; else a seeded random subset
    # autoencoder and feature network
    latent_channels: int = 4
    vae_width: int = 16
    vae_steps: int = 1500
    vae_lr: float = 2e-3
    kl_weight: float = 0.1
    feature_steps: int = 600
    feature_lr: float = 1e-3
    vae_batch_size: int = 64
    # flow model
    model: str = "large"  # small | medium | large | xl (presets of nets.PRESETS)
    width: int = 0  # >0 overrides the preset
    depth: int = 0
    heads: int = 0
    conditional: bool = True
    label_dropout: float = 0.1
    steps: int = 2000
    batch_size: int = 64
    lr: float = 1e-3
    weight_decay: float = 0.0
    ema_decay: float = 0.999
    t_max: float = 1.0  # train on t ~ U(1e-4, t_max); < 1 for a coarse model
    seam_checkpoint: str = ""  # fine model checkpoint for the seam loss (coarse training)
    seam_weight: float = 0.1
    seam_steps: int = 60  # solver steps per unit time for the seam inversion
    # data reduction
    keep_ratio: float = 1.0
    scorer: str = "random"  # random | kcenter | balanced-cluster | cluster-proportional | loss | grad
    num_clusters: int = 24
    clustering: str = "spherical"  # spherical (official: L2-normalised, spherical k-means) | euclidean (variant)
    score_inverse: bool = False  # loss/grad: keep the lowest scores; cluster: keep the furthest
    score_checkpoint: str = ""  # loss/grad: FM checkpoint that scores (else a proxy is trained)
    score_steps: int = 300  # proxy scoring model's training steps (full data)
    score_model: str = "small"
    # bookkeeping
    log_every: int = 50
    checkpoint_every: int = 500

    def __post_init__(self):
        if self.stage not in STAGES:
            raise ValueError(f"stage must be one of {', '.join(STAGES)}, got {self.stage!r}")
        if self.clustering not in CLUSTERINGS:
            raise ValueError(f"clustering must be one of {', '.join(CLUSTERINGS)}, got {self.clustering!r}")
        if self.image_size < 0 or 0 < self.image_size < 4:
            raise ValueError(f"image_size must be 0 (the images' own size) or >= 4, got {self.image_size}")
        if self.scorer not in SCORERS:
            raise ValueError(f"scorer must be one of {', '.join(SCORERS)}, got {self.scorer!r}")
        for name in ("model", "score_model"):
            if getattr(self, name) not in PRESETS:
                raise ValueError(f"{name} must be one of {', '.join(PRESETS)}, got {getattr(self, name)!r}")
        if not 0.0 < self.keep_ratio <= 1.0:
            raise ValueError(f"keep_ratio must be in (0, 1], got {self.keep_ratio}")
        if not T_EPS < self.t_max <= 1.0:
            raise ValueError(f"t_max must be in (1e-4, 1], got {self.t_max}")
        if not 0.0 <= self.label_dropout < 1.0:
            raise ValueError(f"label_dropout must be in [0, 1), got {self.label_dropout}")
        if not 0.0 <= self.ema_decay < 1.0:
            raise ValueError(f"ema_decay must be in [0, 1), got {self.ema_decay}")
        for name in ("steps", "vae_steps", "feature_steps", "score_steps"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        for name in (
            "batch_size",
            "vae_batch_size",
            "log_every",
            "checkpoint_every",
            "latent_channels",
            "vae_width",
            "num_clusters",
            "seam_steps",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.train_size < 0:
            raise ValueError(f"train_size must be >= 0, got {self.train_size}")
        if self.lr <= 0 or self.vae_lr <= 0 or self.feature_lr <= 0:
            raise ValueError("learning rates must be > 0")
