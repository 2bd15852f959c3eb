"""Settings of ``icml26 sample-lfm`` (torch-free, so settings are checked before heavy imports;
the sampling itself is ``sample.py``; LFM stability, ICML 2026, arXiv 2605.08398)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from icml26.core.settings import Work, setting

SAMPLERS = ("euler", "heun", "adaptive")
DEFAULT_STEPS = 60  # euler / heun steps when none are given (the paper's 60 Euler steps)
ADAPTIVE_NFE = 100  # network evaluations counted per adaptive (RK45) sample in the cost model
MAX_SAMPLE_EVALUATIONS = 1e9  # up-front limit: samples x solver steps x timing repeats, per model


@dataclass(frozen=True)
class SampleConfig:
    num_samples: int = setting(500, "samples per mode (the same noise seeds in every mode)", sized=10**7)
    steps: int | None = setting(
        None,
        "solver steps of euler/heun (None = 60); the adaptive sampler picks its own (None)",
        unit="steps",
        sized=10**6,
    )
    sampler: Literal["euler", "heun", "adaptive"] = "euler"  # ODE solver: euler | heun | adaptive (RK45)
    t_split: float = 0.7  # coarse model for t < t_split
    cfg_scale: float = 1.0  # classifier-free guidance scale (1 = none)
    batch_size: int = setting(500, "samples integrated together (memory)", sized=10**6)
    reference_size: int = setting(5000, "real test images for FID / precision / recall", sized=10**7)
    rtol: float = setting(1e-3, "adaptive sampler: relative tolerance", gt=0)
    atol: float = setting(1e-3, "adaptive sampler: absolute tolerance", gt=0)
    grid_size: int = setting(64, "samples drawn in each mode's PNG grid", sized=10**4)
    timing_repeats: int = setting(1, "sample each mode this many times; the fastest wall-clock counts", sized=1000)
    reference_offset: int = 0  # first test image of the reference set (a disjoint slice = a validation reference)
    bootstrap: int = setting(100, "paired bootstrap replicates for the FID intervals (0 = none)", sized=10**5)
    judge: str = "auto"  # independent FID judge: auto (the data set's registered one) | none | a name | a file

    def work(self) -> list[Work]:
        """Network evaluations of one model's samples (num_samples x steps x timing_repeats; the
        adaptive sampler counted at ADAPTIVE_NFE), against MAX_SAMPLE_EVALUATIONS."""
        steps = self.steps if self.steps is not None else ADAPTIVE_NFE
        n = float(self.num_samples) * steps * self.timing_repeats
        return [
            Work(
                n,
                MAX_SAMPLE_EVALUATIONS,
                "sample evaluations per model",
                "num_samples, steps or timing_repeats",
                f"{self.num_samples} x {steps} x {self.timing_repeats}",
            )
        ]

    def __post_init__(self):
        if self.sampler not in SAMPLERS:
            raise ValueError(f"sampler must be one of {', '.join(SAMPLERS)}, got {self.sampler!r}")
        if self.sampler == "adaptive" and self.steps is not None:
            raise ValueError(
                f"steps={self.steps} applies to the euler and heun samplers; the adaptive sampler (RK45) "
                "chooses its own steps from rtol/atol (each result reports its nfe): drop steps (--set steps=null "
                "over a "
                "recipe's steps), or choose euler/heun"
            )
        if self.sampler != "adaptive" and self.steps is None:
            object.__setattr__(self, "steps", DEFAULT_STEPS)
        if not 0.0 < self.t_split < 1.0:
            raise ValueError(f"t_split must be in (0, 1), got {self.t_split}")
        if self.reference_offset < 0 or self.bootstrap < 0:
            raise ValueError("reference_offset and bootstrap must be >= 0")
        for k in (
            ("num_samples",)
            + (("steps",) if self.steps is not None else ())
            + ("batch_size", "reference_size", "grid_size", "timing_repeats")
        ):
            if getattr(self, k) < 1:
                raise ValueError(f"{k} must be >= 1, got {getattr(self, k)}")
        if self.num_samples < 4:
            raise ValueError(
                f"num_samples must be >= 4 (precision/recall use 3 nearest neighbours), got {self.num_samples}"
            )
