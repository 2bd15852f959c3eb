"""Settings of ``icml26 geo-fusion train`` (torch-free: checked before the method's imports)."""

from __future__ import annotations

import math  # noqa: F401
from dataclasses import dataclass, field  # noqa: F401
from typing import Literal  # noqa: F401

from icml26.core.settings import Work

VARIANTS = ("none", "passive", "sgf", "sgf-nogate", "sgf-global")


@dataclass(frozen=True)
class Config:
    variants: tuple[str, ...] = (
        VARIANTS  # fusion variants trained: none | passive | sgf (the paper) | sgf-nogate | sgf-global
    )
    seeds: int = field(default=3, metadata={"sized": 1000})  # runs per variant
    frames: int = field(default=8, metadata={"sized": 64})  # views per question, uniformly sampled
    hidden_size: int = field(default=64, metadata={"sized": 8192})  # width of the small LM
    layers: int = field(default=4, metadata={"sized": 256})  # SGF in layers < layers - layers // 4
    heads: int = 4  # attention heads of the LM
    mlp_ratio: int = 2  # LM MLP width = mlp_ratio * hidden_size
    steps: int = field(default=200, metadata={"sized": 10**6})  # training steps per variant and seed
    batch_size: int = field(default=32, metadata={"sized": 65536})  # questions per step
    lr: float = 2e-3  # AdamW learning rate
    weight_decay: float = 0.01  # AdamW weight decay
    encoder_steps: int = field(default=300, metadata={"sized": 10**6})  # training steps of the frozen semantic encoder
    geometry_scale: Literal["metric", "relative"] = "metric"  # geometry tokens in metres, or normalised per scene
    threads: int = field(default=1, metadata={"sized": 256})  # torch CPU threads

    def work(self) -> list[Work]:
        """Question-steps of training: variants x seeds x steps x batch_size x frames, against 1e10."""
        amount = float(len(self.variants)) * self.seeds * self.steps * self.batch_size * self.frames
        return [Work(amount, 1e10, "question-frame steps", "steps, batch_size, frames, seeds or variants")]

    def __post_init__(self):
        bad = [v for v in self.variants if v not in VARIANTS]
        if bad or not self.variants:
            raise ValueError(f"variants: {bad or '(empty)'} not in {', '.join(VARIANTS)}")
        for k in (
            "seeds",
            "frames",
            "hidden_size",
            "layers",
            "heads",
            "mlp_ratio",
            "steps",
            "batch_size",
            "encoder_steps",
            "threads",
        ):
            if getattr(self, k) < 1:
                raise ValueError(f"{k} must be >= 1, got {getattr(self, k)}")
        if self.hidden_size % self.heads:
            raise ValueError(f"hidden_size {self.hidden_size} must divide by heads {self.heads}")
        if not (0 < self.lr < 1):
            raise ValueError(f"lr must be in (0, 1), got {self.lr}")
