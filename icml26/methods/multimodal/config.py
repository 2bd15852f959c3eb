"""Settings of ``icml26 modality-pairing`` (the arms, the training protocol, the flatness and
robustness measures). Torch-free: ``--set`` values, ranges and sizes are checked before the
method's heavy imports; the method is in :mod:`icml26.methods.multimodal.train`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from icml26.core.settings import Work


FUSIONS = ("late", "late-sum", "intermediate")  # as models.FUSIONS (this module loads no torch)

PAIRINGS = ("unimodal", "fixed", "stochastic")
REGS = ("none", "sam", "ls", "swa")


@dataclass(frozen=True)
class Config:
    data: str = "av-digits"  # av-digits, or a folder of <modality>.npz (docs)
    modalities: tuple[
        str, ...
    ] = ()  # which modalities, in order (first = anchor); () = image, audio for av-digits, all for a folder
    pairing: tuple[str, ...] = ("unimodal", "fixed", "stochastic")  # unimodal | fixed | stochastic (the paper)
    reg: tuple[str, ...] = (
        "none",
        "sam",
        "ls",
        "swa",
    )  # regularizer of each arm: none | sam | ls (label smoothing) | swa
    fusion: tuple[str, ...] = ("late",)  # late | late-sum | intermediate
    resample: tuple[str, ...] = ()  # modalities re-drawn by stochastic pairing; () = all but the anchor
    resample_p: float = 1.0  # probability a re-drawn modality is replaced per load (official: 1)
    allow_self: bool = True  # the drawn partner may be the sample itself (official AVMNIST)
    seeds: int = field(default=1, metadata={"sized": 1000})  # runs per arm: seeds seed .. seed+seeds-1
    epochs: int = field(default=20, metadata={"sized": 10**5})  # training epochs per run
    batch_size: int = field(default=64, metadata={"sized": 65536})  # samples per step
    optimizer: Literal["adam", "sgd"] = "adam"  # optimizer (official AVMNIST: SGD momentum 0.9, lr 1e-3, 70 epochs)
    lr: float = 1e-3  # learning rate
    momentum: float = 0.9  # SGD only
    weight_decay: float = 5e-4  # L2 weight decay of the optimizer
    lr_step_ratio: float = 0.7  # StepLR x0.1 after this fraction of the epochs
    train_size: int = 0  # train samples used (0 = all); the val split is taken from them
    val_ratio: float = 0.1  # fraction of the train samples held out for validation
    sam_rho: float = 0.05  # SAM neighbourhood radius rho
    label_smoothing: float = 0.1  # ls arm: label-smoothing epsilon
    swa_start_ratio: float = 0.75  # swa arm: weights averaged from this fraction of the epochs on
    width: int = field(default=16, metadata={"sized": 4096})  # conv channels of the first layer
    embed_dim: int = field(default=64, metadata={"sized": 65536})  # embedding size of each modality encoder
    hessian_samples: int = field(
        default=1024, metadata={"sized": 10**6}
    )  # train samples for the Hessian eigenvalue / trace (0 = skip)
    hessian_iters: int = field(default=20, metadata={"sized": 10**4})  # power iterations for the top Hessian eigenvalue
    hutchinson_samples: int = field(default=10, metadata={"sized": 10**4})  # Rademacher probes of the Hutchinson trace
    noise_std: float = 0.004  # weight-noise gap sigma (official 0.004)
    noise_draws: int = field(default=10, metadata={"sized": 10**4})  # weight-noise draws of the noise gap
    loss_curve_radii: tuple[float, ...] = (0.0, 1.0, 2.0, 4.0, 8.0)  # radii of the 1-D loss curve (filter-normalised)
    loss_curve_directions: int = field(default=5, metadata={"sized": 10**4})  # random directions of the loss curve
    robust_samples: int = field(
        default=1000, metadata={"sized": 10**6}
    )  # test samples for PGD / weight noise / loss curve (0 = all)
    pgd_eps: float = 0.25  # L-inf radius, standardised units
    pgd_steps: int = field(default=10, metadata={"sized": 10**4})  # PGD attack steps
    corrupt_std: float = 1.0  # std of the Gaussian noise added to a corrupted modality (standardised units)
    landscape_points: int = field(
        default=0, metadata={"sized": 1000}
    )  # 2-D loss slice grid per axis for seed 0 (0 = none); a PNG in --out
    landscape_span: float = 1.0  # half-width of the 2-D loss slice (filter-normalised units)
    av_train_size: int = field(
        default=3000, metadata={"sized": 10**6}
    )  # av-digits build settings (icml26.core.data.multimodal.AVDigitsSpec)
    av_test_size: int = field(default=1500, metadata={"sized": 10**6})  # av-digits: test samples built
    av_clips_per_class: int = 40  # av-digits: spoken clips per digit class
    av_seed: int = 0  # av-digits: seed of the build (the data set, not the runs)

    def work(self) -> list[Work]:
        """Sample-passes of training: arms x seeds x epochs x train samples (3 for a SAM step), against 2e9."""
        n = self.train_size or (self.av_train_size if self.data == "av-digits" else 60000)
        arms = len(self.pairing) * len(self.fusion) * sum(3 if r == "sam" else 1 for r in self.reg)
        amount = float(arms) * self.seeds * self.epochs * n
        return [Work(amount, 2e9, "sample-passes of training", "epochs, seeds, train_size or the lists of arms")]

    def __post_init__(self):
        for name, vals, allowed in (("pairing", self.pairing, PAIRINGS), ("reg", self.reg, REGS)):
            if not vals:
                raise ValueError(f"{name}: give at least one of {', '.join(allowed)}")
            for v in vals:
                if v not in allowed:
                    raise ValueError(f"{name}: {v!r} is not one of {', '.join(allowed)}")
        if not self.fusion:
            raise ValueError(f"fusion: give at least one of {', '.join(FUSIONS)}")
        for f in self.fusion:
            if f not in FUSIONS:
                raise ValueError(f"fusion: {f!r} is not one of {', '.join(FUSIONS)}")
        for name in (
            "seeds",
            "epochs",
            "batch_size",
            "width",
            "embed_dim",
            "hessian_iters",
            "hutchinson_samples",
            "noise_draws",
            "loss_curve_directions",
            "pgd_steps",
            "av_clips_per_class",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("train_size", "hessian_samples", "robust_samples", "landscape_points"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        for name in ("resample_p", "lr_step_ratio", "swa_start_ratio"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        if not 0.0 < self.val_ratio < 0.5:
            raise ValueError(f"val_ratio must be in (0, 0.5), got {self.val_ratio}")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1), got {self.label_smoothing}")
        for name in ("lr", "sam_rho", "pgd_eps", "landscape_span"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        for name in ("momentum", "weight_decay", "noise_std", "corrupt_std"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.optimizer not in ("adam", "sgd"):
            raise ValueError(f"optimizer must be adam or sgd, got {self.optimizer!r}")
        if len(set(self.modalities)) != len(self.modalities):
            raise ValueError(f"modalities: repeated name in {list(self.modalities)}")
