"""Settings of ``icml26 sng`` (torch-free: checked before the method's imports)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from icml26.core.limits import check_work
from icml26.core.settings import Work

PROBLEM_NAMES = ("poisson2d", "poisson5d", "heat1d", "allencahn2d")  # the keys of problems.PROBLEMS
SAMPLINGS = ("uniform", "leverage", "volume", "volume-approx")  # as sampling.SAMPLINGS
OPTIMS = ("sng", "spring", "adam", "lbfgs", "engd", "sgd")
BATCHED = ("sng", "spring", "adam", "sgd")
MAX_TOTAL_BUDGET_S = 6 * 3600.0  # up-front limit: time_budget_s x runs


@dataclass(frozen=True)
class Config:
    problem: Literal["poisson2d", "poisson5d", "heat1d", "allencahn2d"] = "poisson2d"  # the PDE (docs/sng.md)
    optim: tuple[str, ...] = ("sng", "spring", "adam", "lbfgs", "engd")  # any of OPTIMS
    batch: tuple[int, ...] = field(default=(64, 256), metadata={"sized": 65536})  # mini-batch sizes b (rows per step)
    seeds: int = field(default=1, metadata={"sized": 1000})  # runs per configuration: seeds seed .. seed+seeds-1
    time_budget_s: float = 300.0  # optimizer time per run (s)
    max_iterations: int = 1_000_000  # hard cap on steps per run
    width: int = 64  # tanh MLP width
    depth: int = 2  # hidden layers
    pool_interior: int = field(default=1000, metadata={"sized": 10**6})  # collocation pool N (interior rows)
    pool_boundary: int = field(default=200, metadata={"sized": 10**6})  # collocation pool (boundary rows)
    pool_resample_every: int = 100  # redraw the pool every R steps (0 = fixed)
    eval_points: int = field(default=4096, metadata={"sized": 10**7})  # fresh interior points for the relative L2 error
    eval_interval_s: float = 1.0  # optimizer seconds between evaluations
    sampling: Literal["uniform", "leverage", "volume", "volume-approx"] = (
        "uniform"  # uniform | leverage | volume | volume-approx (sng/spring)
    )
    sampling_refresh_every: int = 10  # steps between pool Jacobians (leverage/volume)
    sketch_factor: int = 2  # volume-approx: sketch columns = factor x batch
    damping: float = 1e-8  # lam (ENGD-Woodbury Poisson sweeps: 1e-8 .. 1e-12)
    damping_schedule: Literal["constant", "exponential"] = "constant"  # how lam evolves over steps
    damping_decay: float = 1.0  # exponential: lam_t = max(damping_min, damping decay^t)
    damping_min: float = 0.0  # floor of the exponential damping schedule
    momentum: float = 0.99  # SPRING mu (SPRING paper Sec. 4); sng uses 0
    lr: float = 0.0  # sng/spring/engd step size; 0 = grid line search 2^0..2^-30
    norm_constraint: float = 0.0  # SPRING's C (with a fixed lr; 0 = off)
    engd_damping: float = 1e-10  # full-batch ENGD's lam
    adam_lr: float = 1e-3  # Adam baseline: initial learning rate
    adam_lr_final: float = 1e-5  # Adam baseline: learning rate after adam_decay_steps (exponential decay)
    adam_decay_steps: int = 20000  # Adam baseline: steps over which the rate decays to adam_lr_final
    sgd_lr: float = 1e-3  # SGD baseline: learning rate
    sgd_momentum: float = 0.9  # SGD baseline: heavy-ball momentum
    lbfgs_history: int = 100  # L-BFGS baseline: curvature pairs kept
    dtype: Literal["float64", "float32"] = "float64"  # floating-point precision of the network and the solves

    def runs(self) -> int:
        """Runs of the sweep: seeds x (batch sizes for mini-batch optimizers, 1 for the others)."""
        return self.seeds * sum(len(self.batch) if o in BATCHED else 1 for o in self.optim)

    def work(self) -> list[Work]:
        """Optimizer time of the sweep (time_budget_s x runs) against MAX_TOTAL_BUDGET_S."""
        n = self.runs()
        return [
            Work(
                n * self.time_budget_s,
                MAX_TOTAL_BUDGET_S,
                "s of optimizer time",
                "--time-budget, --seeds, --batch or --optim",
                f"{n} runs x {self.time_budget_s:g} s",
                "take",
            )
        ]

    def __post_init__(self):
        if self.problem not in PROBLEM_NAMES:
            raise ValueError(f"problem {self.problem!r} is not one of {', '.join(PROBLEM_NAMES)}")
        if not self.optim:
            raise ValueError(f"optim: give at least one of {', '.join(OPTIMS)}")
        for o in self.optim:
            if o not in OPTIMS:
                raise ValueError(f"optim {o!r} is not one of {', '.join(OPTIMS)}")
        if len(set(self.optim)) != len(self.optim):
            raise ValueError(f"optim lists a name twice: {', '.join(self.optim)}")
        if not self.batch or any(b < 2 for b in self.batch):
            raise ValueError(f"batch sizes must be >= 2, got {list(self.batch)}")
        if len(set(self.batch)) != len(self.batch):
            raise ValueError(f"batch lists a size twice: {list(self.batch)}")
        for name in (
            "damping",
            "damping_min",
            "norm_constraint",
            "engd_damping",
            "lr",
            "adam_lr",
            "adam_lr_final",
            "sgd_lr",
            "time_budget_s",
            "eval_interval_s",
        ):
            v = getattr(self, name)
            if not math.isfinite(v) or v < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {v}")
        if self.time_budget_s <= 0:
            raise ValueError(f"time_budget_s must be > 0, got {self.time_budget_s}")
        if not 0.0 <= self.momentum < 1.0:
            raise ValueError(f"momentum must be in [0, 1), got {self.momentum}")
        if not 0.0 < self.damping_decay <= 1.0:
            raise ValueError(f"damping_decay must be in (0, 1], got {self.damping_decay}")
        if not 0.0 <= self.sgd_momentum < 1.0:
            raise ValueError(f"sgd_momentum must be in [0, 1), got {self.sgd_momentum}")
        if self.damping_schedule not in ("constant", "exponential"):
            raise ValueError(f"damping_schedule must be constant or exponential, got {self.damping_schedule!r}")
        if self.sampling not in SAMPLINGS:
            raise ValueError(f"sampling {self.sampling!r} is not one of {', '.join(SAMPLINGS)}")
        if self.dtype not in ("float64", "float32"):
            raise ValueError(f"dtype must be float64 or float32, got {self.dtype!r}")
        for name, lo in (
            ("seeds", 1),
            ("max_iterations", 1),
            ("width", 1),
            ("depth", 1),
            ("pool_interior", 2),
            ("pool_boundary", 1),
            ("pool_resample_every", 0),
            ("eval_points", 1),
            ("sampling_refresh_every", 1),
            ("sketch_factor", 1),
            ("adam_decay_steps", 1),
            ("lbfgs_history", 1),
        ):
            if getattr(self, name) < lo:
                raise ValueError(f"{name} must be >= {lo}, got {getattr(self, name)}")
        if any(b > self.pool_interior + self.pool_boundary for b in self.batch):
            raise ValueError(
                f"batch sizes {list(self.batch)} exceed the pool of {self.pool_interior + self.pool_boundary} rows"
            )
        if self.width * self.depth > 4096:
            raise ValueError(f"width x depth = {self.width * self.depth} is beyond this command's CPU scope (<= 4096)")


def validate(cfg: Config) -> None:
    """Checks that need more than one field, before the config record (InputError)."""
    runs = cfg.seeds * sum(len(cfg.batch) if o in BATCHED else 1 for o in cfg.optim)
    check_work(
        runs * cfg.time_budget_s,
        MAX_TOTAL_BUDGET_S,
        "take",
        "s of optimizer time",
        "--time-budget, --seeds, --batch or --optim",
        detail=f"{runs} runs x {cfg.time_budget_s:g} s",
    )
