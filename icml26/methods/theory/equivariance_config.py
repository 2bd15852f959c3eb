"""Settings of ``icml26 equivariance`` (torch-free: checked before the method's imports)."""

from __future__ import annotations

import math  # noqa: F401
from dataclasses import dataclass, field  # noqa: F401
from typing import Literal  # noqa: F401

from icml26.core.settings import Work

TASKS = ("classifier", "autoencoder")


ACTS = ("tanh", "gelu", "relu")


MODELS = ("equivariant-loss", "no-flip-loss", "random-init", "tied")


GROUPS = ("hflip", "vflip", "rot90", "rot180")


@dataclass(frozen=True)
class Config:
    task: tuple[str, ...] = ("classifier",)  # classifier | autoencoder
    act: tuple[str, ...] = ("tanh", "gelu")  # first activation (later ones GELU)
    group: tuple[str, ...] = ("hflip", "vflip")  # measured: hflip | vflip | rot90 | rot180 | perm:FILE
    train_group: str = "hflip"  # the symmetry in the soft loss and augmentation
    models: tuple[str, ...] = (
        "equivariant-loss",
        "no-flip-loss",
        "random-init",
        "tied",
    )  # trained variants (see MODELS)
    seeds: int = field(default=3, metadata={"sized": 10**6})  # independent networks per (task, act, model)
    data: str = "fashion-mnist"  # fashion-mnist | mnist | an image file/folder
    widths: tuple[int, ...] = field(
        default=(64, 256, 256), metadata={"sized": 65536}
    )  # hidden widths (depth = len + 1)
    epochs: int = field(default=6, metadata={"sized": 10**5})  # passes over the training examples
    equiv_start: float = 0.5  # fraction of training before the soft loss
    equiv_weight: float = 1.0  # lambda
    equiv_on_noise: bool = True  # also apply the soft loss to N(0, 1) noise inputs (RECON)
    train_examples: int = field(default=20000, metadata={"sized": 10**7})  # training images used (the first N)
    batch_size: int = field(default=256, metadata={"sized": 10**6})  # examples per Adam step
    lr: float = 1e-3  # Adam learning rate
    n_noise: int = field(default=100000, metadata={"sized": 10**8})  # noise inputs for the latent-action fit
    model: str | None = None  # a user's network (.safetensors)
    layer_acts: tuple[str, ...] = ()  # user network: activation after each hidden layer
    out_action: Literal["trivial", "same"] = (
        "trivial"  # user network: trivial (invariance) | same (output = input space)
    )

    def work(self) -> list[Work]:
        """Flops of training and of the noise passes (as equivariance.check_work) against 3e13."""
        dims = [784, *self.widths, 784]
        per_ex = 2.0 * sum(a * b for a, b in zip(dims[:-1], dims[1:]))
        nets = len(self.task) * len(self.act) * len(self.models) * self.seeds if self.model is None else 1
        flops = nets * (
            3 * per_ex * 2 * self.train_examples * self.epochs + len(self.group) * 2 * per_ex * self.n_noise * 2
        )
        what = "--seeds, n_noise, epochs, train_examples or the lists of tasks/acts/models"
        return [Work(flops, 3e13, "flops", what, verb="spend")]

    def __post_init__(self):
        for name, vals, ok in (("task", self.task, TASKS), ("act", self.act, ACTS), ("models", self.models, MODELS)):
            bad = [v for v in vals if v not in ok]
            if bad or not vals:
                raise ValueError(f"{name} must be among {', '.join(ok)}, got {list(vals)}")
        if not self.group:
            raise ValueError("group: give at least one")
        for g in self.group:
            if g not in GROUPS and not g.startswith("perm:"):
                raise ValueError(f"group {g!r}: expected one of {', '.join(GROUPS)} or perm:FILE")
        if self.train_group not in GROUPS and not self.train_group.startswith("perm:"):
            raise ValueError(f"train_group {self.train_group!r}: expected one of {', '.join(GROUPS)} or perm:FILE")
        for name in ("seeds", "epochs", "train_examples", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.n_noise < 200:
            raise ValueError(f"n_noise must be >= 200, got {self.n_noise}")
        if not self.widths or min(self.widths) < 2:
            raise ValueError(f"widths must be >= 2, got {list(self.widths)}")
        if not 0.0 <= self.equiv_start <= 1.0:
            raise ValueError(f"equiv_start must be in [0, 1], got {self.equiv_start}")
        if self.equiv_weight < 0 or not self.lr > 0:
            raise ValueError("equiv_weight must be >= 0 and lr > 0")
        if self.out_action not in ("trivial", "same"):
            raise ValueError(f"out_action must be trivial or same, got {self.out_action!r}")
        bad = [a for a in self.layer_acts if a not in ACTS]
        if bad:
            raise ValueError(f"layer_acts: unknown {bad[0]!r}; valid: {', '.join(ACTS)}")
