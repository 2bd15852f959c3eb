"""Settings of ``icml26 hdr-gs`` (torch-free, checked before any scene is read or rendered):
the methods, stage lengths, loss weights, density-control thresholds and learning rates.
Each setting's source (paper, GSDF / 3DGS code, or RECON) is in its comment; docs/hdr-gs.md
has the measurements behind the RECON choices."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

METHODS = ("expo-gs", "hdr-gs", "expo-gs-norel", "expo-gs-nosdfdc")


@dataclass(frozen=True)
class Config:
    methods: tuple = ("expo-gs", "hdr-gs")  # methods trained: expo-gs | hdr-gs | expo-gs-norel | expo-gs-nosdfdc
    iters: int = field(default=1500, metadata={"sized": 10**6})  # total; stages split by stage_fractions
    stage_fractions: tuple = (0.4, 0.3, 0.3)  # irradiance / geometry / joint (the paper: 8k / 12k / 10k)
    init_points: int = field(default=2000, metadata={"ge": 1, "sized": 10**7})  # Gaussians at initialisation
    # initial centres: auto = depth maps when the folder has them, else its SfM points, else points in the
    # region the training cameras see (frusta); depth / sfm / frusta force one (depth and sfm fall back)
    init_from: str = "auto"
    init_noise: float = 0.02  # scene units, on the back-projected points
    max_gaussians: int = field(default=6000, metadata={"ge": 1, "sized": 10**7})  # cap on Gaussians under densification
    tone_hidden: int = field(default=32, metadata={"ge": 1, "sized": 65536})  # hidden width of the tone-mapping MLP
    train_exposures: tuple = (0.125, 2.0, 32.0)  # t1, t3, t5 (HDR-NeRF / HDR-GS)
    test_exposures_oe: tuple = (0.125, 2.0, 32.0)  # seconds: LDR-OE test exposures (those seen in training)
    test_exposures_ne: tuple = (0.5, 8.0)  # seconds: LDR-NE test exposures (not seen in training)
    hdr_weight: float = 0.0  # HDR-GS synthetic mode uses 0.6 with (8-bit) HDR ground truth
    lambda_sdf: float = field(default=0.2, metadata={"ge": 0})  # weight of the depth-SDF consistency loss (stages 2-3)
    lambda_disk: float = field(default=0.1, metadata={"ge": 0})  # weight of the flat-Gaussian (smallest scale) loss
    sdf_samples: int = field(default=1024, metadata={"ge": 1, "sized": 10**7})  # points per step for the SDF loss
    sdf_sigma: float = 0.05  # scene units (RECON)
    # RECON fix of the pruning band: s per Gaussian = max(sdf_sigma, sdf_sigma_px x the pixel footprint
    # z / fx at its centre, mean over the training views); f is read from rendered depth at one pixel,
    # so it cannot be finer than a pixel's footprint (0.08 units at 48 px). 0 = a fixed s (before)
    sdf_sigma_px: float = 2.0
    sdf_refresh: int = field(default=100, metadata={"ge": 1})  # iterations between pseudo-SDF refreshes at the centres
    # GSDF's adjust_anchor (city-super/GSDF, gaussian_model.py): the SDF-guided prune mask is ANDed with
    # "large" (max scale > 0.1 extent), and centres outside the SDF's domain (here: seen by no training
    # view) get no SDF penalty. False = the earlier reading (SDF prune on every Gaussian, OR large)
    sdf_prune_large_only: bool = True
    # Expo-GS's own growth term (docs/hdr-gs.md, Eq. 13): + omega_n (1 - |grad f|) with f the pseudo-SDF
    # (model.py) at the centres, |grad f| by autograd in the query point. False = the term left out (before)
    sdf_grow_eikonal: bool = True
    omega_n: float = 2e-4  # RECON (the paper's value is not public): omega_s's scale
    # GSDF's (Scaffold-GS's) visibility gate in adjust_anchor: a Gaussian is a growth candidate only when seen in
    # more than check_interval x visibility_success x 0.5 training iterations since its last growth check, a pruning
    # candidate only when seen in more than check_interval x visibility_success since its last pruning check; the
    # counters of the Gaussians not checked keep accumulating. check_interval = densify_every. It gates the
    # SDF-guided density control (stage 3); 3DGS's rule (HDR-GS, Expo-GS stage 1) has no gate.
    # False = every Gaussian checked every time (before)
    visibility_gate: bool = True
    visibility_success: float = 0.8  # GSDF's success_threshold
    omega_s: float = 2e-4  # growth score: weight of the near-surface term exp(-f^2 / 2 s^2) (GSDF Eq. 13)
    omega_p: float = 1.0  # pruning score: weight of the far-from-surface penalty (GSDF Eq. 14)
    tau_g: float = 2e-4  # growth threshold on the mean view-space positional gradient (+ SDF terms); 3DGS: 2e-4
    tau_p: float = 0.005  # pruning threshold on opacity (- the SDF penalty); 3DGS: 0.005
    densify_every: int = field(default=100, metadata={"ge": 1})  # iterations between density-control steps (3DGS: 100)
    densify_from: int = field(default=100, metadata={"ge": 0})  # first iteration with density control
    opacity_reset_every: int = 0  # 0 = never (3DGS: 3000, longer than these runs)
    lr_means: float = field(default=1.6e-3, metadata={"gt": 0})  # Adam lr of the centres, times the scene extent
    lr_scales: float = field(default=5e-3, metadata={"gt": 0})  # Adam lr of the log-scales (3DGS: 5e-3)
    lr_quats: float = field(default=1e-3, metadata={"gt": 0})  # Adam lr of the rotations (3DGS: 1e-3)
    lr_opacity: float = field(default=5e-2, metadata={"gt": 0})  # Adam lr of the opacity logits (3DGS: 5e-2)
    lr_radiance: float = field(default=1e-2, metadata={"gt": 0})  # Adam lr of the HDR radiance (colour) parameters
    lr_tone: float = field(default=5e-3, metadata={"gt": 0})  # Adam lr of the tone-mapping MLP
    ckpt_every: int = field(default=500, metadata={"ge": 1})  # iterations between checkpoints (with --out)
    floater_band: float = 0.1  # scene units: a Gaussian this far in front of the true surface is a floater
    floater_min_opacity: float = 0.1  # Gaussians below this opacity are not counted as floaters
    scenes: int = 1  # scenes rendered when no --data is given
    views: int = 16  # views rendered per built-in scene (even: training, odd: test)
    size: int = 64  # pixels: width and height of the built-in scenes' views
    log_every: int = field(default=100, metadata={"ge": 1})  # iterations between step records

    def __post_init__(self):
        bad = [m for m in self.methods if m not in METHODS]
        if bad or not self.methods:
            raise ValueError(f"methods: unknown {bad[0] if bad else '(empty)'!r}; valid: {', '.join(METHODS)}")
        if self.init_from not in ("auto", "depth", "sfm", "frusta"):
            raise ValueError(f"init_from must be auto, depth, sfm or frusta, got {self.init_from!r}")
        if self.iters < 1 or self.init_points < 1 or self.max_gaussians < self.init_points:
            raise ValueError("iters and init_points must be >= 1 and max_gaussians >= init_points")
        if (
            len(self.stage_fractions) != 3
            or any(f < 0 for f in self.stage_fractions)
            or abs(sum(self.stage_fractions) - 1) > 1e-6
        ):
            raise ValueError("stage_fractions: three non-negative numbers summing to 1")
        for name in ("train_exposures", "test_exposures_oe", "test_exposures_ne"):
            if any(not (float(t) > 0) for t in getattr(self, name)):
                raise ValueError(f"{name}: exposure times must be > 0 s")
        if not self.train_exposures:
            raise ValueError("train_exposures: at least one exposure")
        if self.views < 2 or self.size < 16 or self.scenes < 1:
            raise ValueError("views >= 2, size >= 16 and scenes >= 1")
        if self.size > 2048 or self.views > 1000 or self.scenes > 1000:
            # a rendered scene of size^2 x views pixels per exposure; beyond these it would not finish on a CPU
            raise ValueError(
                f"size <= 2048, views <= 1000 and scenes <= 1000 (got size {self.size}, views {self.views}, "
                f"scenes {self.scenes}); bring your own renders with --data DIR for larger ones"
            )


def cfg_json(cfg: Config) -> dict:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(cfg).items()}


def config_from_dict(d: dict) -> Config:
    fields = {f.name: f for f in dataclasses.fields(Config)}
    vals = {k: (tuple(v) if isinstance(v, list) else v) for k, v in d.items() if k in fields}
    return Config(**vals)
