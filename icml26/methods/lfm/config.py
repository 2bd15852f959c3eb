"""Settings of ``icml26 train-lfm`` (torch-free, so settings are checked before heavy imports).

Field meanings and the stages are described in ``train.py``; the presets are ``PRESET_ARCH`` below
and the scorers ``reduce`` (LFM stability, ICML 2026, arXiv 2605.08398).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from icml26.core.settings import Work, setting

# velocity-network presets (Config.arch; artifacts.arch_for builds the DiT): width, blocks, attention heads
PRESET_ARCH = {
    "small": {"width": 32, "depth": 2, "heads": 2},
    "medium": {"width": 48, "depth": 3, "heads": 4},
    "large": {"width": 64, "depth": 4, "heads": 4},
    "xl": {"width": 128, "depth": 6, "heads": 4},
}
PRESETS = tuple(PRESET_ARCH)
ARCH_KEYS = ("width", "depth", "heads")
SCORERS = ("random", "kcenter", "balanced-cluster", "cluster-proportional", "loss", "grad")
CLUSTERINGS = ("spherical", "euclidean")  # the official L2-normalised spherical k-means; our earlier variant
STAGES = ("vae", "fm", "all")
T_EPS = 1e-4


def _preset_values(key: str) -> str:
    return ", ".join(f"{p} {a[key]}" for p, a in PRESET_ARCH.items())


MAX_SAMPLE_STEPS = 1e9  # up-front limit: training examples processed over every stage (work())


@dataclass(frozen=True)
class Config:
    # data
    dataset: str = "fashion-mnist"  # fashion-mnist | mnist | .npz | image folder (stage vae/all)
    image_size: int = setting(
        0,
        "0 = the images' own size; else resize to image_size x image_size (>= 4; warns)",
        unit="pixels",
        ge=0,
        sized=1024,
    )
    stage: Literal["vae", "fm", "all"] = "all"  # vae (VAE + feature net) | fm (flow matching) | all (both, one run)
    vae: str = ""  # stage fm: run dir of a vae stage
    train_size: int = setting(0, "training images: 0 = the whole train split, else a seeded subset", sized=10**8)
    # autoencoder and feature network
    latent_channels: int = setting(4, "channels of the VAE latent (spatial size: image / 4)", sized=1024)
    vae_width: int = setting(16, "VAE base channel width", sized=4096)
    vae_steps: int = setting(1500, "AdamW steps of the VAE", unit="steps", sized=10**7)
    vae_lr: float = setting(2e-3, "VAE learning rate (AdamW)", gt=0)
    kl_weight: float = setting(0.1, "weight of the VAE's KL term against its reconstruction loss", ge=0)
    feature_steps: int = setting(600, "AdamW steps of the feature network (classifier; FID features)", sized=10**7)
    feature_lr: float = setting(1e-3, "feature network learning rate (AdamW)", gt=0)
    vae_batch_size: int = setting(64, "images per step of the VAE and the feature network", sized=65536)
    # flow model
    model: Literal["small", "medium", "large", "xl"] = "large"  # velocity-network preset (PRESET_ARCH)
    width: int = setting(
        0,
        f"velocity-network width, a multiple of 4 and of heads; 0 = the model preset's ({_preset_values('width')})",
        ge=0,
        sized=8192,
    )
    depth: int = setting(
        0, f"velocity-network blocks; 0 = the model preset's ({_preset_values('depth')})", ge=0, sized=256
    )
    heads: int = setting(0, f"attention heads; 0 = the model preset's ({_preset_values('heads')})", ge=0, sized=256)
    conditional: bool = setting(True, "class-conditional velocity network when the data has labels")
    label_dropout: float = setting(0.1, "probability of dropping the label in training (classifier-free guidance)")
    steps: int = setting(2000, "flow-matching AdamW steps", unit="steps", sized=10**7)
    batch_size: int = setting(64, "latents per flow-matching step", sized=65536)
    lr: float = setting(1e-3, "flow-matching learning rate (AdamW)", gt=0)
    weight_decay: float = setting(0.0, "AdamW weight decay of the flow model", ge=0)
    ema_decay: float = setting(0.999, "EMA decay of the flow weights (the EMA model is saved and sampled)")
    t_max: float = 1.0  # train on t ~ U(1e-4, t_max); < 1 for a coarse model
    seam_checkpoint: str = ""  # fine model checkpoint for the seam loss (coarse training)
    seam_weight: float = setting(0.1, "weight of the seam loss at t_max (coarse training)", ge=0)
    seam_steps: int = setting(60, "solver steps per unit time for the seam inversion", sized=10**5)
    # data reduction
    keep_ratio: float = setting(1.0, "fraction of the training data kept, (0, 1]", unit="fraction")
    scorer: Literal["random", "kcenter", "balanced-cluster", "cluster-proportional", "loss", "grad"] = (
        "random"  # which samples are kept when keep_ratio < 1 (reduce.py)
    )
    num_clusters: int = setting(24, "k-means clusters of the cluster scorers", sized=10**5)
    clustering: Literal["spherical", "euclidean"] = (
        "spherical"  # spherical (official: L2-normalised, spherical k-means) | euclidean (variant)
    )
    score_inverse: bool = False  # loss/grad: keep the lowest scores; cluster: keep the furthest
    score_checkpoint: str = ""  # loss/grad: FM checkpoint that scores (else a proxy is trained)
    score_steps: int = setting(300, "steps of the proxy scoring model (loss/grad, full data)", sized=10**7)
    score_model: Literal["small", "medium", "large", "xl"] = "small"  # preset of the proxy scoring model
    # bookkeeping
    log_every: int = 50  # steps between step records (mean loss over the window)
    checkpoint_every: int = setting(500, "steps between checkpoints (--resume continues from the last)")

    def work(self) -> list[Work]:
        """Training examples processed (steps x batch size over every stage this run trains), against
        MAX_SAMPLE_STEPS (200x the fashion-mnist recipe's 5e6)."""
        n, parts = 0.0, []
        if self.stage in ("vae", "all"):
            n += float(self.vae_steps + self.feature_steps) * self.vae_batch_size
            parts.append(f"({self.vae_steps} + {self.feature_steps}) x {self.vae_batch_size}")
        if self.stage in ("fm", "all"):
            proxy = self.score_steps if self.keep_ratio < 1 and self.scorer in ("loss", "grad") else 0
            proxy = 0 if self.score_checkpoint else proxy
            n += float(self.steps + proxy) * self.batch_size
            parts.append(f"({self.steps} + {proxy}) x {self.batch_size}")
        return [
            Work(
                n,
                MAX_SAMPLE_STEPS,
                "training examples",
                "steps, batch_size, vae_steps, feature_steps or vae_batch_size",
                " + ".join(parts),
                "process",
            )
        ]

    def arch(self, preset: str | None = None) -> dict[str, int]:
        """The width, depth and heads a velocity network of ``preset`` (default: ``model``) runs
        with: the preset's, overridden by width/depth/heads > 0 (for ``model`` only; the proxy
        scoring model ``score_model`` always runs its preset's)."""
        preset = self.model if preset is None else preset
        a = dict(PRESET_ARCH[preset])
        if preset == self.model:
            a.update({k: getattr(self, k) for k in ARCH_KEYS if getattr(self, k) > 0})
        return a

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
        for name in ("width", "depth", "heads"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0 (0 = the model preset's), got {getattr(self, name)}")
        a = self.arch()
        if a["width"] % 4 or a["width"] % a["heads"]:
            raise ValueError(f"width {a['width']} must be a multiple of 4 and of heads ({a['heads']})")
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
