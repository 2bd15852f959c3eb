"""Settings of ``icml26 traffic`` (torch-free, checked before any data is read): the models, the
splits, the windows (``output_steps``), null values and the training hyper-parameters."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

from icml26.core.settings import setting

MODELS = (
    "minitraffic",
    "minitraffic-nopretrain",
    "minitraffic-noaug",
    "minitraffic-nocluster",
    "ha",
    "persistence",
    "ridge",
    "dlinear",
    "patchtst",
    "stid",
    "graph",
)
DETERMINISTIC = ("ha", "persistence", "ridge")
MINI = ("minitraffic", "minitraffic-nopretrain", "minitraffic-noaug", "minitraffic-nocluster")
PRETRAINED_VARIANTS = ("minitraffic", "minitraffic-noaug", "minitraffic-nocluster")


@dataclass(frozen=True)
class Config:
    data: str | None = None  # lane-level series (.csv / .h5 / .npz / .parquet); None = built-in traffic-anomaly lanes
    road_data: str | None = (
        None  # road-level series for pre-training; None = built-in pseudo-roads (or none with --data)
    )
    # models compared: minitraffic | minitraffic-nopretrain | minitraffic-noaug | minitraffic-nocluster | ha |
    # persistence | ridge | dlinear | patchtst | stid | graph
    models: tuple[str, ...] = MODELS
    horizons: tuple[int, ...] = (1, 4, 8)  # steps ahead scored (15 min each on the built-in data)
    # steps every window forecasts: windows are input_steps + output_steps long whatever horizons
    # are scored, so a score at horizon h does not depend on the other horizons asked
    output_steps: int = setting(8, "steps every window forecasts (see above)", unit="steps", ge=1, sized=10**4)
    lane_fractions: tuple[float, ...] = (0.05, 0.1, 0.2)  # fraction of the fine-tuning days' lane data used
    seeds: int = setting(
        3, "seeds of the trained models (deterministic ones run once)", ge=1, sized=1000
    )  # seeds of the trained models (deterministic ones run once)
    input_steps: int = setting(16, "window length fed to every model", unit="steps", ge=1, sized=10**4)
    pretrain_days: int = setting(
        14, "days of road-level series used for pre-training (first in the file)", unit="days", ge=0
    )
    finetune_days: int = setting(
        5, "days of lane-level series for fine-tuning (after pre-training days)", unit="days", ge=1
    )
    val_days: int = setting(2, "days for validation / early stopping (after fine-tuning days)", unit="days", ge=1)
    test_days: int = 0  # 0 = every day after validation (every day of the file is in a split)
    n_roads: int = setting(
        6, ge=1, sized=10**4
    )  # built-in data: pseudo-roads from correlation clustering of the detectors
    pseudo_lanes: int = setting(4, ge=1, sized=1000)  # FDA copies per road in pre-training (D)
    fda_sigma: float = 0.1  # amplitude noise, in units of max A
    fda_lambda: float = 0.2  # bound |dA| <= lambda max A, in (0, 1)
    fda_tau: float = 0.05  # dominant bins: A^2 > tau max A^2
    fda_phase_sigma: float = 0.1  # phase noise, radians
    mask_ratio: float = setting(
        0.4, "pre-training: fraction of input patches masked for reconstruction", unit="fraction", ge=0, lt=1
    )
    temperature: float = setting(0.5, "InfoNCE temperature of the contrastive pre-training loss", gt=0)
    d_model: int = setting(
        32, "hidden width of the neural models (MiniTraffic, PatchTST, STID, graph)", ge=1, sized=8192
    )
    n_layers: int = setting(2, "encoder layers of the neural models", ge=1, sized=256)
    n_heads: int = setting(4, "attention heads (d_model must divide by it)", ge=1, sized=256)
    d_ff: int = setting(64, "feed-forward width of the neural models", ge=1, sized=65536)
    patch_len: int = 4  # the official code: 3 with stride 1 (equal MAE here at half the tokens, docs/traffic.md)
    patch_stride: int = 2  # steps between patch starts (MiniTraffic / PatchTST)
    graph_k: int = setting(4, ge=1, sized=10**4)  # neighbours per entity
    cluster_size: int = setting(8, ge=1, sized=10**5)  # entities per k-means cluster (about)
    graph_warmup_epochs: int = setting(
        2, ge=0, sized=10**5
    )  # epochs before the graph is built (when training from scratch)
    pretrain_epochs: int = setting(10, "epochs of road-level pre-training", unit="epochs", ge=0, sized=10**5)
    pretrain_batch_size: int = setting(64, ge=1, sized=65536)  # road windows per pre-training step
    pretrain_stride: int = 2  # every k-th road window start is used (neighbouring windows overlap)
    epochs: int = setting(60, ge=1, sized=10**5)  # most epochs of lane training (early stopping on validation MAE)
    patience: int = setting(8, "early stopping: epochs without a better validation MAE", unit="epochs", ge=1)
    ft_full_epochs: int = setting(
        0, ge=0, sized=10**5
    )  # after head-only fine-tuning, epochs of the whole model at lr / 10
    lr: float = setting(1e-3, "AdamW learning rate of the neural models", gt=0)
    weight_decay: float = setting(1e-4, "AdamW weight decay", ge=0)
    batch_size: int = setting(32, ge=1, sized=65536)  # windows per step (every sensor of a window together)
    ridge_alpha: float = setting(1.0, "L2 penalty of the ridge regression on lags (scaled values)", ge=0)
    mape_min: Optional[float] = None  # MAPE only where the truth exceeds this; None: 5 (counts), 0 with a null value
    # readings equal to this are missing: masked out of MAE / RMSE / MAPE and of the training loss
    # (BasicTS / LargeST masked metrics); "auto": 0 for METR-LA / PEMS-BAY .h5 files, none otherwise
    null_value: Union[float, str, None] = "auto"
    infer_batch: int = setting(64, ge=1, sized=65536)  # windows per batch for infer_ms_per_batch
    npz_feature: int = 0  # .npz (T, N, F): 0 flow, 1 occupancy, 2 speed (PeMSD4/8)
    npz_start: str = "2018-01-01"  # .npz without timestamps: first step (PeMSD8: 2016-07-01)
    npz_step_s: float = setting(300.0, ".npz without timestamps: seconds between readings (PeMS: 300)", gt=0)

    def __post_init__(self):
        bad = [m for m in self.models if m not in MODELS]
        if bad or not self.models:
            raise ValueError(f"models: {bad[0] if bad else '(empty)'!r} is not one of {', '.join(MODELS)}")
        if len(set(self.models)) != len(self.models):
            object.__setattr__(self, "models", tuple(dict.fromkeys(self.models)))
        if not self.horizons or any(h < 1 for h in self.horizons):
            raise ValueError(f"horizons must be positive step counts, got {list(self.horizons)}")
        if max(self.horizons) > self.output_steps:
            raise ValueError(
                f"horizon {max(self.horizons)} exceeds output_steps {self.output_steps} (the steps every window "
                f"forecasts); add --set output_steps={max(self.horizons)}"
            )
        if isinstance(self.null_value, str) and self.null_value not in ("auto", "none"):
            raise ValueError(f"null_value must be a number, auto or none, got {self.null_value!r}")
        if not self.lane_fractions or any(not 0 < f <= 1 for f in self.lane_fractions):
            raise ValueError(f"lane_fractions must be in (0, 1], got {list(self.lane_fractions)}")
        for k in (
            "seeds",
            "input_steps",
            "finetune_days",
            "val_days",
            "pseudo_lanes",
            "d_model",
            "n_layers",
            "n_heads",
            "d_ff",
            "patch_len",
            "patch_stride",
            "graph_k",
            "cluster_size",
            "epochs",
            "patience",
            "batch_size",
            "infer_batch",
            "n_roads",
            "pretrain_batch_size",
            "pretrain_stride",
            "output_steps",
        ):
            if getattr(self, k) < 1:
                raise ValueError(f"{k} must be >= 1, got {getattr(self, k)}")
        for k in ("pretrain_days", "test_days", "graph_warmup_epochs", "pretrain_epochs", "ft_full_epochs"):
            if getattr(self, k) < 0:
                raise ValueError(f"{k} must be >= 0, got {getattr(self, k)}")
        if self.patch_len > self.input_steps:
            raise ValueError(f"patch_len {self.patch_len} exceeds input_steps {self.input_steps}")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model {self.d_model} is not divisible by n_heads {self.n_heads}")
        if not 0 < self.fda_lambda < 1:
            raise ValueError(f"fda_lambda must be in (0, 1), got {self.fda_lambda}")
        if not 0 <= self.fda_tau <= 1:
            raise ValueError(f"fda_tau must be in [0, 1], got {self.fda_tau}")
        if not 0 <= self.mask_ratio < 1:
            raise ValueError(f"mask_ratio must be in [0, 1), got {self.mask_ratio}")
        for k in ("fda_sigma", "fda_phase_sigma", "ridge_alpha", "weight_decay", "mape_min"):
            if getattr(self, k) is not None and getattr(self, k) < 0:
                raise ValueError(f"{k} must be >= 0, got {getattr(self, k)}")
        if self.lr <= 0 or self.temperature <= 0:
            raise ValueError("lr and temperature must be > 0")

    @property
    def max_horizon(self) -> int:
        """Steps every window and every model forecasts (output_steps), not max(horizons)."""
        return self.output_steps

    def null(self) -> float | None:
        """The null value in use: a number, or None (every finite reading is scored)."""
        if self.null_value == "auto":
            suffix = Path(self.data).suffix.lower() if self.data else ""
            return 0.0 if suffix in (".h5", ".hdf5") else None
        return None if self.null_value in (None, "none") else float(self.null_value)

    def mape_floor(self) -> float:
        """MAPE is taken where the truth exceeds this: mape_min, else 5 (counts) or 0 with a null value."""
        if self.mape_min is not None:
            return float(self.mape_min)
        return 5.0 if self.null() is None else 0.0
