"""Settings of ``icml26 jacobian-spectrum`` (torch-free: checked before the method's imports)."""

from __future__ import annotations

import math  # noqa: F401
from dataclasses import dataclass, field  # noqa: F401
from typing import Literal  # noqa: F401

from icml26.core.settings import Work

ARCHS = ("mlp", "fgln", "cnn")  # as jacobian.ARCHS
INITS = ("he", "lecun", "xavier", "orthogonal")  # as jacobian.INITS
ACTS = ("relu", "leaky_relu")  # as jacobian.ACTS


@dataclass(frozen=True)
class Config:
    arch: Literal["mlp", "fgln", "cnn"] = "mlp"  # network family (fgln: gated linear network)
    width: int = field(default=256, metadata={"sized": 16384})  # hidden units (cnn: channels on 14x14 maps)
    depths: tuple[int, ...] = field(default=(8, 16, 32, 64), metadata={"sized": 2000})  # core layers L
    init: Literal["he", "lecun", "xavier", "orthogonal"] = "he"  # weight initialisation
    act: Literal["relu", "leaky_relu"] = "relu"  # activation of mlp and cnn
    negative_slope: float = 0.01  # leaky_relu slope
    gate_p: float = 0.5  # P(gate open): free gates and the fgln arch
    top_k: int = 16  # exponents / singular values measured
    gates: tuple[str, ...] = ("fixed", "free")  # fixed: one mask per input; free: masks re-drawn per sample
    n_samples: int = field(default=4, metadata={"sized": 10**5})  # probe inputs (fixed) or mask draws (free) per record
    qr_sweeps: int = 2  # orthogonal-iteration rounds for the finite-depth spectrum
    oversample: int = 16  # extra frame columns for Rayleigh-Ritz
    train: str | None = None  # mnist | fashion-mnist | an image file/folder; None: init only
    train_steps: int = field(default=500, metadata={"sized": 10**7})  # training steps when train is set
    train_examples: int = field(default=10000, metadata={"sized": 10**7})  # training images used (the first N)
    batch_size: int = field(default=128, metadata={"sized": 10**6})  # examples per training step
    lr: float = 1e-3  # learning rate of the training phase
    optimizer: Literal["adam", "sgd"] = "adam"  # optimizer of the training phase
    log_every: int = 50  # steps between step records
    data: str = "mnist"  # probe inputs when not training: a data set name/path, or noise
    model: str | None = None  # a user's MLP (.safetensors); replaces arch/width/depths

    def work(self) -> list[Work]:
        """QR passes over every depth, gates mode and sample, plus training (as spectrum.check_work)."""
        per_col = self.width * self.width * (9 * 196 if self.arch == "cnn" else 1)
        kk = self.top_k + self.oversample
        per_layer = 2.0 * per_col * (self.top_k + 1.5 * (2 * self.qr_sweeps + 1) * kk + 2 * self.top_k)
        phases = 1 + (self.train is not None)
        flops = sum(self.depths) * per_layer * len(self.gates) * self.n_samples * phases
        if self.train is not None:
            flops += sum(self.depths) * 6.0 * per_col * self.batch_size * self.train_steps
        return [Work(flops, 3e13, "flops", "depths, width, n_samples, train_steps or top_k", verb="spend")]

    def __post_init__(self):
        if self.arch not in ARCHS:
            raise ValueError(f"arch must be one of {', '.join(ARCHS)}, got {self.arch!r}")
        if self.init not in INITS:
            raise ValueError(f"init must be one of {', '.join(INITS)}, got {self.init!r}")
        if self.act not in ACTS:
            raise ValueError(f"act must be one of {', '.join(ACTS)}, got {self.act!r}")
        if self.width < 2:
            raise ValueError(f"width must be >= 2, got {self.width}")
        if not self.depths or min(self.depths) < 1:
            raise ValueError(f"depths must be >= 1, got {list(self.depths)}")
        if max(self.depths) > 2000:
            raise ValueError(f"depths must be <= 2000, got {max(self.depths)}")
        if not 1 <= self.top_k <= self.width:
            raise ValueError(f"top_k must be in [1, width={self.width}], got {self.top_k}")
        if not 0.0 < self.gate_p <= 1.0:
            raise ValueError(f"gate_p must be in (0, 1], got {self.gate_p}")
        if not 0.0 <= self.negative_slope < 1.0:
            raise ValueError(f"negative_slope must be in [0, 1), got {self.negative_slope}")
        bad = [g for g in self.gates if g not in ("fixed", "free")]
        if bad or not self.gates:
            raise ValueError(f"gates must be fixed and/or free, got {list(self.gates)}")
        for name in ("n_samples", "train_steps", "train_examples", "batch_size", "log_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.qr_sweeps < 0 or self.oversample < 0:
            raise ValueError("qr_sweeps and oversample must be >= 0")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        if self.optimizer not in ("adam", "sgd"):
            raise ValueError(f"optimizer must be adam or sgd, got {self.optimizer!r}")
        if self.model is not None and self.train is not None:
            raise ValueError("model and train exclude each other (a given model is measured as it is)")
