"""Expo-GS (Song et al., ICML 2026, PMLR 306; no arXiv id; shared/methods/expo_gs.md) and an
HDR-GS-style baseline (Cai et al., NeurIPS 2024) on multi-exposure multi-view images.

Methods (``Config.methods``):
- ``expo-gs``: stage 1 irradiance field (HDR-GS: log-radiance Gaussians + the global tone
  mapper, standard density control); stage 2 geometry field (Expo-SDF: the pseudo-SDF of
  model.py supervised by camera-projected rendered depth, |f| vs |f_hat|, each sample weighted by
  the exposure reliability of its pixel in the training image, plus the disk (flattening) loss;
  no densification); stage 3 joint training (render loss + the halved geometric losses) with
  SDF-guided density control (GSDF, Eqs. 13-14): grow if grad + w_s exp(-f^2 / 2 s^2)
  + w_n (1 - |grad f|) > tau_g (the last term Expo-GS's own, ``sdf_grow_eikonal``; |grad f| of the
  pseudo-SDF at the centres), prune if opacity - w_p (1 - exp(-f^2 / 2 s^2)) < tau_p and the
  Gaussian is large (max scale > 0.1 extent), as GSDF's adjust_anchor does
  (``sdf_prune_large_only``), f at the centres (no SDF penalty for a centre no training view sees,
  as GSDF outside its box); with GSDF's visibility gate (``visibility_gate``): only Gaussians seen
  often enough since their last check are grown / pruned.
- ``hdr-gs``: the same rasterizer and tone mapper, standard 3DGS density control, no Expo-SDF.
- ``expo-gs-norel``: Expo-GS with reliability = 1 (the paper's "vanilla SDF", E = 1).
- ``expo-gs-nosdfdc``: Expo-GS with the standard density control in stage 3.

RECON (the paper is silent or only a secondary summary was read): stage lengths scaled to a CPU
budget (the paper: 8k / 12k / 10k); loss weights 0.2 (SDF) / 0.1 (disk) as in Table 6, the
normal term L_normal is not implemented; w_s = 2e-4 (GSDF's code), w_n = 2e-4 (w_s's scale), w_p = 1, tau_g = 2e-4 (3DGS,
NDC units), tau_p = 0.005, s = max(``sdf_sigma``, ``sdf_sigma_px`` pixel footprints) in scene units
(the footprint floor is a fix of ours: with a fixed s = 0.05 below one pixel's footprint, stage 3
pruned 80-92% of the Gaussians; docs/hdr-gs.md); f at the centres is the mean over
the training views of |rendered depth at the centre's pixel - its camera depth| (rendered
depths refreshed every ``sdf_refresh`` iterations); f_hat samples are drawn inside the Gaussians
seen in the training view; LDR loss 0.8 L1 + 0.2 D-SSIM; ``hdr_weight`` adds HDR-GS's synthetic
mode term (L1 on mu-law HDR of the training views; 0 = LDR supervision only); initial points
are back-projected from the rendered depth of the training views with noise (the stand-in for
SfM points); learning rates and the optimizer (Adam) as in 3DGS, raised for short runs.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np

from icml26.core.errors import InputError

METHODS = ("expo-gs", "hdr-gs", "expo-gs-norel", "expo-gs-nosdfdc")


@dataclass(frozen=True)
class Config:
    methods: tuple = ("expo-gs", "hdr-gs")
    iters: int = field(default=1500, metadata={"sized": 10**6})  # total; stages split by stage_fractions
    stage_fractions: tuple = (0.4, 0.3, 0.3)  # irradiance / geometry / joint (the paper: 8k / 12k / 10k)
    init_points: int = 2000
    init_noise: float = 0.02  # scene units, on the back-projected points
    max_gaussians: int = 6000
    tone_hidden: int = 32
    train_exposures: tuple = (0.125, 2.0, 32.0)  # t1, t3, t5 (HDR-NeRF / HDR-GS)
    test_exposures_oe: tuple = (0.125, 2.0, 32.0)
    test_exposures_ne: tuple = (0.5, 8.0)
    hdr_weight: float = 0.0  # HDR-GS synthetic mode uses 0.6 with (8-bit) HDR ground truth
    lambda_sdf: float = 0.2
    lambda_disk: float = 0.1
    sdf_samples: int = 1024
    sdf_sigma: float = 0.05  # scene units (RECON)
    # RECON fix of the pruning band: s per Gaussian = max(sdf_sigma, sdf_sigma_px x the pixel footprint
    # z / fx at its centre, mean over the training views); f is read from rendered depth at one pixel,
    # so it cannot be finer than a pixel's footprint (0.08 units at 48 px). 0 = a fixed s (before)
    sdf_sigma_px: float = 2.0
    sdf_refresh: int = 100
    # GSDF's adjust_anchor (city-super/GSDF, gaussian_model.py): the SDF-guided prune mask is ANDed with
    # "large" (max scale > 0.1 extent), and centres outside the SDF's domain (here: seen by no training
    # view) get no SDF penalty. False = the earlier reading (SDF prune on every Gaussian, OR large)
    sdf_prune_large_only: bool = True
    # Expo-GS's own growth term (shared/methods/expo_gs.md, Eq. 13): + omega_n (1 - |grad f|) with f the pseudo-SDF
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
    omega_s: float = 2e-4
    omega_p: float = 1.0
    tau_g: float = 2e-4
    tau_p: float = 0.005
    densify_every: int = 100
    densify_from: int = 100
    opacity_reset_every: int = 0  # 0 = never (3DGS: 3000, longer than these runs)
    lr_means: float = field(default=1.6e-3, metadata={"gt": 0})  # times the scene extent
    lr_scales: float = field(default=5e-3, metadata={"gt": 0})
    lr_quats: float = field(default=1e-3, metadata={"gt": 0})
    lr_opacity: float = field(default=5e-2, metadata={"gt": 0})
    lr_radiance: float = field(default=1e-2, metadata={"gt": 0})
    lr_tone: float = field(default=5e-3, metadata={"gt": 0})
    ckpt_every: int = 500
    floater_band: float = 0.1  # scene units: a Gaussian this far in front of the true surface is a floater
    floater_min_opacity: float = 0.1
    scenes: int = 1  # scenes rendered when no --data is given
    views: int = 16
    size: int = 64
    log_every: int = 100

    def __post_init__(self):
        bad = [m for m in self.methods if m not in METHODS]
        if bad or not self.methods:
            raise ValueError(f"methods: unknown {bad[0] if bad else '(empty)'!r}; valid: {', '.join(METHODS)}")
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


# --------------------------------------------------------------------------- data


@dataclass
class SceneData:
    name: str
    cams: list  # renders.Camera
    train: list  # view indices
    test: list
    ldr: dict  # (t, i) -> float32 (H, W, 3) in [0, 1]
    hdr: dict  # i -> float32 (H, W, 3)
    depth: dict  # i -> float32 (H, W) (inf: no surface), when the folder has depth
    extent: float
    centre: np.ndarray


def _is_scene(p: Path) -> bool:
    from icml26.core.data.hdr_nerf import is_hdr_nerf

    return (p / "cameras.json").is_file() or is_hdr_nerf(p)


def scene_folders(data: str | Path) -> list[Path]:
    """The scene folders under ``data``: itself when it is one (cameras.json: the renders layout;
    transforms_*.json: the HDR-NeRF layout), else its sub-folders that are. InputError when there is none."""
    d = Path(data)
    if not d.is_dir():
        raise InputError(f"--data {str(data)!r} does not exist or is not a folder")
    if _is_scene(d):
        return [d]
    subs = sorted(p for p in d.iterdir() if p.is_dir() and _is_scene(p))
    if not subs:
        raise InputError(
            f"--data {str(data)!r}: no scene folder (cameras.json, hdr/, ldr/<t>/; or HDR-NeRF's "
            "transforms_*.json, exposure_*.json) in it or under it"
        )
    return subs


def open_scene(folder: str | Path):
    """A scene folder in either layout: renders.RenderedScene or hdr_nerf.HdrNerfScene."""
    from icml26.core.data import hdr_nerf as HN
    from icml26.core.data import renders as R

    return HN.read_hdr_nerf(folder) if HN.is_hdr_nerf(folder) else R.read_scene(folder)


def load_scene(folder: str | Path, cfg: Config) -> SceneData:
    """Read one scene folder (icml26.core.data.renders layout or the HDR-NeRF layout); InputError
    naming what is missing or malformed. HDR ground truth is needed for the test views (and for
    the training views when ``hdr_weight`` > 0)."""
    s = open_scene(folder)
    need = sorted(set(map(float, cfg.train_exposures + cfg.test_exposures_oe + cfg.test_exposures_ne)))
    have = set(s.ldr_exposures_s)
    miss = [t for t in need if t not in have]
    if miss:
        raise InputError(
            f"scene {str(folder)!r}: no LDR images at exposure {miss[0]:g} s (has {sorted(have) or 'none'}); "
            "set train_exposures / test_exposures_* to ones it has"
        )
    if not s.has("hdr"):
        raise InputError(f"scene {str(folder)!r}: no hdr/ images (the HDR ground truth)")
    n = len(s)
    if n < 2:
        raise InputError(f"scene {str(folder)!r}: needs at least 2 views (even train, odd test)")
    train, test = list(range(0, n, 2)), list(range(1, n, 2))
    if hasattr(s, "train_views"):  # the HDR-NeRF layout's own split
        train, test = list(s.train_views), list(s.test_views)
        if not train or not test:
            raise InputError(f"scene {str(folder)!r}: needs training and test views")
    has_hdr = getattr(s, "has_hdr", lambda i: True)
    if cfg.hdr_weight > 0 and not all(has_hdr(i) for i in train):
        raise InputError(f"scene {str(folder)!r}: hdr_weight > 0 needs HDR ground truth for every training view")
    ldr = {(t, i): s.ldr(t, i).astype(np.float32) / 255.0 for t in need for i in range(n)}
    hdr = {i: s.hdr(i) for i in range(n) if has_hdr(i)}
    depth = {i: s.depth(i) for i in range(n)} if s.has("depth") else {}
    for (t, i), a in ldr.items():
        if a.shape[:2] != (s.cameras[i].height, s.cameras[i].width):
            raise InputError(
                f"scene {str(folder)!r}: the LDR image of view {i} at {t:g} s differs in size from its camera"
            )
    for i, a in hdr.items():
        if a.shape[:2] != (s.cameras[i].height, s.cameras[i].width):
            raise InputError(f"scene {str(folder)!r}: hdr/{i:03d}.hdr size differs from cameras.json")
    eyes = np.stack([c.c2w[:3, 3] for c in s.cameras])
    centre = eyes.mean(0)
    extent = float(np.linalg.norm(eyes - centre, axis=1).max() * 1.1 + 1e-6)
    return SceneData(Path(folder).name, list(s.cameras), train, test, ldr, hdr, depth, extent, centre)


def init_points(sd: SceneData, cfg: Config, rng: np.random.Generator) -> np.ndarray:
    """Noisy surface points back-projected from the training views' depth (the SfM stand-in);
    without depth, points uniformly in front of the cameras."""
    from icml26.core.data import renders as R

    pts = []
    for i in sd.train:
        if i in sd.depth:
            p = R.backproject(sd.depth[i], sd.cams[i], stride=2).reshape(-1, 3)
            pts.append(p[np.isfinite(p).all(1)])
    if pts:
        p = np.concatenate(pts)
        p = p[rng.choice(len(p), size=min(cfg.init_points, len(p)), replace=False)]
        return p + cfg.init_noise * rng.standard_normal(p.shape)
    return sd.centre + (rng.random((cfg.init_points, 3)) - 0.5) * sd.extent


# --------------------------------------------------------------------------- model state


class Model:
    """Gaussian parameters (dict of leaf tensors), the tone mapper and a hand-rolled Adam whose
    per-Gaussian moments are pruned / extended with the Gaussians."""

    KEYS = ("means", "log_scales", "quats", "logit_opacity", "log_radiance")

    def __init__(self, params: dict, tone, cfg: Config, extent: float):
        import torch

        self.p = {k: params[k].detach().clone().requires_grad_(True) for k in self.KEYS}
        self.tone = tone
        self.cfg = cfg
        self.extent = extent
        self.m = {k: torch.zeros_like(v) for k, v in self.p.items()}
        self.v = {k: torch.zeros_like(v) for k, v in self.p.items()}
        self.tm = {k: torch.zeros_like(v) for k, v in tone.named_parameters()}
        self.tv = {k: torch.zeros_like(v) for k, v in tone.named_parameters()}
        self.step_n = 0
        self.grad_acc = torch.zeros(self.n)
        self.grad_cnt = torch.zeros(self.n)  # views seeing a Gaussian since its last growth check
        self.vis_cnt = torch.zeros(self.n)  # ... since its last pruning check (GSDF's anchor_demon)

    @property
    def n(self) -> int:
        return self.p["means"].shape[0]

    def lr(self, k: str) -> float:
        c = self.cfg
        return {
            "means": c.lr_means * self.extent,
            "log_scales": c.lr_scales,
            "quats": c.lr_quats,
            "logit_opacity": c.lr_opacity,
            "log_radiance": c.lr_radiance,
        }[k]

    def step(self):
        import torch

        self.step_n += 1
        b1, b2 = 0.9, 0.999
        with torch.no_grad():
            for k, t in self.p.items():
                if t.grad is None:
                    continue
                g = t.grad
                self.m[k].mul_(b1).add_(g, alpha=1 - b1)
                self.v[k].mul_(b2).addcmul_(g, g, value=1 - b2)
                mh = self.m[k] / (1 - b1**self.step_n)
                vh = self.v[k] / (1 - b2**self.step_n)
                t.sub_(self.lr(k) * mh / (vh.sqrt() + 1e-15))
                t.grad = None
            for k, t in self.tone.named_parameters():  # (torch.optim imports torch._dynamo: 10+ s)
                if t.grad is None:
                    continue
                g = t.grad
                self.tm[k].mul_(b1).add_(g, alpha=1 - b1)
                self.tv[k].mul_(b2).addcmul_(g, g, value=1 - b2)
                t.sub_(
                    self.cfg.lr_tone
                    * (self.tm[k] / (1 - b1**self.step_n))
                    / ((self.tv[k] / (1 - b2**self.step_n)).sqrt() + 1e-8)
                )
                t.grad = None

    def select(self, keep):
        """Keep the Gaussians where ``keep`` (N,) bool is true."""
        import torch

        with torch.no_grad():
            for d in (self.m, self.v):
                for k in d:
                    d[k] = d[k][keep].clone()
            self.p = {k: v.detach()[keep].clone().requires_grad_(True) for k, v in self.p.items()}
            self.grad_acc, self.grad_cnt, self.vis_cnt = self.grad_acc[keep], self.grad_cnt[keep], self.vis_cnt[keep]

    def append(self, new: dict):
        import torch

        with torch.no_grad():
            for k in self.KEYS:
                self.m[k] = torch.cat([self.m[k], torch.zeros_like(new[k])])
                self.v[k] = torch.cat([self.v[k], torch.zeros_like(new[k])])
                self.p[k] = torch.cat([self.p[k].detach(), new[k]]).requires_grad_(True)
            z = torch.zeros(new["means"].shape[0])
            self.grad_acc, self.grad_cnt = torch.cat([self.grad_acc, z]), torch.cat([self.grad_cnt, z])
            self.vis_cnt = torch.cat([self.vis_cnt, z])

    def tensors(self) -> dict:
        out = {}
        for k in self.KEYS:
            out[f"p.{k}"] = self.p[k].detach().contiguous()
            out[f"m.{k}"] = self.m[k].contiguous()
            out[f"v.{k}"] = self.v[k].contiguous()
        for k, v in self.tone.state_dict().items():
            out[f"tone.{k}"] = v.detach().contiguous()
        for k in self.tm:
            out[f"tone_m.{k}"], out[f"tone_v.{k}"] = self.tm[k].contiguous(), self.tv[k].contiguous()
        out["grad_acc"], out["grad_cnt"] = self.grad_acc.contiguous(), self.grad_cnt.contiguous()
        out["vis_cnt"] = self.vis_cnt.contiguous()
        return out


def _make_tone(cfg: Config):
    from icml26.methods.splatting.model import ToneMapper

    return ToneMapper(cfg.tone_hidden)


def save_ckpt(path: Path, model: Model, meta: dict) -> None:
    from safetensors.torch import save_file

    from icml26.core.output import atomic_path

    with atomic_path(path) as tmp:
        save_file(model.tensors(), str(tmp), metadata={k: json.dumps(v) for k, v in meta.items()})


def load_ckpt(path: str | Path, cfg: Config | None = None) -> tuple[Model, dict]:
    """A checkpoint (safetensors) -> (Model, meta); InputError on a file that is not one of ours."""
    import torch
    from safetensors import safe_open

    p = Path(path)
    if not p.is_file():
        raise InputError(f"--ckpt {str(path)!r} does not exist")
    try:
        with safe_open(str(p), framework="pt") as f:
            meta = {k: json.loads(v) for k, v in (f.metadata() or {}).items()}
            t = {k: f.get_tensor(k) for k in f.keys()}
    except Exception as e:  # noqa: BLE001 (safetensors raises several types)
        raise InputError(f"--ckpt {str(path)!r} is not a safetensors checkpoint ({type(e).__name__})") from None
    if "config" not in meta or "p.means" not in t:
        raise InputError(f"--ckpt {str(path)!r} is not an icml26 hdr-gs checkpoint")
    c = cfg or config_from_dict(meta["config"])
    tone = _make_tone(c)
    tone.load_state_dict({k[5:]: v for k, v in t.items() if k.startswith("tone.")})
    m = Model({k: t[f"p.{k}"] for k in Model.KEYS}, tone, c, float(meta["extent"]))
    with torch.no_grad():
        for k in Model.KEYS:
            m.m[k], m.v[k] = t[f"m.{k}"].clone(), t[f"v.{k}"].clone()
        m.grad_acc, m.grad_cnt = t["grad_acc"].clone(), t["grad_cnt"].clone()
        m.vis_cnt = t["vis_cnt"].clone() if "vis_cnt" in t else t["grad_cnt"].clone()  # older checkpoints: one counter
        for k in m.tm:
            m.tm[k], m.tv[k] = t[f"tone_m.{k}"].clone(), t[f"tone_v.{k}"].clone()
    m.step_n = int(meta.get("adam_step", 0))
    return m, meta


def config_from_dict(d: dict) -> Config:
    fields = {f.name: f for f in dataclasses.fields(Config)}
    vals = {k: (tuple(v) if isinstance(v, list) else v) for k, v in d.items() if k in fields}
    return Config(**vals)


# --------------------------------------------------------------------------- rendering


def _cam(c):
    from icml26.ops.splat import PinholeCamera

    return PinholeCamera.from_camera(c)


def render(model: Model, cam, exposure_s: float | None, *, depth: bool = False, use: str = "auto"):
    """Render one view: dict with ldr (H, W, 3) (when exposure_s), hdr (H, W, 3), alpha, depth
    (alpha-normalised z, when asked), mean2d, radii."""
    import torch

    from icml26.ops.splat import rasterize

    p = model.p
    pc = _cam(cam)
    scales = torch.exp(p["log_scales"])
    opac = torch.sigmoid(p["logit_opacity"])
    chans = [torch.exp(p["log_radiance"])]
    if exposure_s is not None:
        chans.insert(0, model.tone(p["log_radiance"] + math.log(exposure_s)))
    if depth:
        V = pc.viewmat
        chans.append((p["means"] @ V[2, :3] + V[2, 3])[:, None])
    cols = torch.cat(chans, 1)
    out = rasterize(p["means"], scales, p["quats"], cols, opac, pc, use=use)
    img = out.image
    r = {"alpha": out.alpha, "mean2d": out.mean2d, "radii": out.radii}
    o = 0
    if exposure_s is not None:
        r["ldr"] = img[..., 0:3]
        o = 3
    r["hdr"] = img[..., o : o + 3]
    if depth:
        r["depth"] = img[..., o + 3] / out.alpha.clamp_min(1e-4)
    return r


def _ssim_torch(a, b):
    """Differentiable SSIM (11x11 Gaussian window, 'valid') of (H, W, 3) images, for the D-SSIM loss."""
    import torch
    import torch.nn.functional as F

    x = torch.arange(11, dtype=a.dtype) - 5
    g = torch.exp(-x * x / (2 * 1.5**2))
    g = g / g.sum()
    w = (g[:, None] * g[None, :])[None, None].repeat(3, 1, 1, 1)
    A, B = a.permute(2, 0, 1)[None], b.permute(2, 0, 1)[None]
    f = lambda z: F.conv2d(z, w, groups=3)  # noqa: E731
    ma, mb = f(A), f(B)
    saa, sbb, sab = f(A * A) - ma * ma, f(B * B) - mb * mb, f(A * B) - ma * mb
    c1, c2 = 0.01**2, 0.03**2
    return (((2 * ma * mb + c1) * (2 * sab + c2)) / ((ma * ma + mb * mb + c1) * (saa + sbb + c2))).mean()


# --------------------------------------------------------------------------- density control


def _split_clone(model: Model, grow, rng_t):
    """3DGS: clone small Gaussians, split large ones into two (scale / 1.6)."""
    import torch

    from icml26.ops.splat import quat_to_rotmat

    p = model.p
    with torch.no_grad():
        sc = torch.exp(p["log_scales"])
        big = sc.max(1).values > 0.01 * model.extent
        clone, split = grow & ~big, grow & big
        new = {k: p[k].detach()[clone].clone() for k in Model.KEYS}
        if split.any():
            s = sc[split]
            Rm = quat_to_rotmat(p["quats"][split])
            parts = []
            for _ in range(2):
                eps = torch.randn(s.shape, generator=rng_t) * s
                d = {k: p[k].detach()[split].clone() for k in Model.KEYS}
                d["means"] = d["means"] + (Rm @ eps[..., None])[..., 0]
                d["log_scales"] = d["log_scales"] - math.log(1.6)
                parts.append(d)
            keep = ~split
            model.append({k: torch.cat([new[k]] + [q[k] for q in parts]) for k in Model.KEYS})
            keep = torch.cat([keep, torch.ones(model.n - keep.shape[0], dtype=torch.bool)])
            model.select(keep)
        else:
            model.append(new)


def centre_sdf(model: Model, sd: SceneData, depth_maps: dict) -> "torch.Tensor":  # noqa: F821
    """|f| at the centres: mean over the training views seeing a centre of |D(proj mu) - z| with D
    the model's rendered depth (RECON, module docstring); a centre no view sees gets +inf."""
    import torch

    from icml26.core.data import renders as R

    mu = model.p["means"].detach().double().numpy()
    acc = np.zeros(len(mu))
    cnt = np.zeros(len(mu))
    for i, D in depth_maps.items():
        cam = sd.cams[i]
        uv, z = R.project(mu, cam)
        u, v = np.floor(uv[:, 0]).astype(int), np.floor(uv[:, 1]).astype(int)
        ok = (z > 0.01) & (u >= 0) & (v >= 0) & (u < cam.width) & (v < cam.height)
        d = np.full(len(mu), np.nan)
        d[ok] = np.abs(D[v[ok], u[ok]] - z[ok])
        good = ok & np.isfinite(d)
        acc[good] += d[good]
        cnt[good] += 1
    f = np.where(cnt > 0, acc / np.maximum(cnt, 1), np.inf)
    return torch.as_tensor(f, dtype=torch.float32)


def centre_footprint(model: Model, sd: SceneData) -> "torch.Tensor":  # noqa: F821
    """(N,) scene units: the mean over the training views that see a centre of its pixel footprint
    z / fx (the depth resolution of a one-pixel depth read-out); +inf where no view sees it."""
    import torch

    from icml26.core.data import renders as R

    mu = model.p["means"].detach().double().numpy()
    acc = np.zeros(len(mu))
    cnt = np.zeros(len(mu))
    for i in sd.train:
        cam = sd.cams[i]
        uv, z = R.project(mu, cam)
        ok = (z > 0.01) & (uv[:, 0] >= 0) & (uv[:, 1] >= 0) & (uv[:, 0] < cam.width) & (uv[:, 1] < cam.height)
        acc[ok] += z[ok] / float(cam.K[0, 0])
        cnt[ok] += 1
    return torch.as_tensor(np.where(cnt > 0, acc / np.maximum(cnt, 1), np.inf), dtype=torch.float32)


def prune_band(model: Model, sd: SceneData, cfg: Config):
    """The per-Gaussian band s (N,) of the SDF-guided density control: max(sdf_sigma,
    sdf_sigma_px x :func:`centre_footprint`) (RECON, Config); None with sdf_sigma_px = 0 (fixed s)."""
    import torch

    if cfg.sdf_sigma_px <= 0:
        return None
    fp = centre_footprint(model, sd)
    return torch.clamp(cfg.sdf_sigma_px * torch.where(torch.isfinite(fp), fp, torch.zeros_like(fp)), min=cfg.sdf_sigma)


def centre_sdf_grad_norm(model: Model) -> "torch.Tensor":  # noqa: F821
    """|grad f| (N,) of the pseudo-SDF f (model.py ``pseudo_sdf``, the Expo-SDF of stage 2) at the
    Gaussians' centres, by autograd in the query point (the Gaussians held fixed); the Eikonal
    residual 1 - |grad f| is the growth term omega_n (1 - |grad f|) of Eq. 13 (shared/methods/expo_gs.md).
    Where d(p) saturates at 1 (inside an opaque cluster) f is flat and |grad f| = 0."""
    import torch

    from icml26.methods.splatting.model import pseudo_sdf

    P = model.p
    with torch.enable_grad():
        mu = P["means"].detach()
        q = mu.clone().requires_grad_(True)
        f = pseudo_sdf(
            q, mu, torch.exp(P["log_scales"].detach()), P["quats"].detach(), torch.sigmoid(P["logit_opacity"].detach())
        )
        (g,) = torch.autograd.grad(f.sum(), q)
    return g.norm(dim=1).detach()


def density_control(model: Model, cfg: Config, sdf_guided: bool, f_centre, rng_t, sigma=None, grad_f=None) -> None:
    """Grow and prune once (module docstring); gradients are screen-space norms in NDC units.
    sigma: (N,) band s per Gaussian (scene units; :func:`prune_band`), None = ``cfg.sdf_sigma``.
    grad_f: (N,) |grad f| at the centres (:func:`centre_sdf_grad_norm`) for the growth term
    omega_n (1 - |grad f|) when ``cfg.sdf_grow_eikonal``; None = the term left out.
    With ``cfg.visibility_gate`` the SDF-guided control checks only the Gaussians seen often enough
    (Config) and resets only their counters; otherwise every counter is reset."""
    import torch

    with torch.no_grad():
        g = model.grad_acc / model.grad_cnt.clamp_min(1)
        opac = torch.sigmoid(model.p["logit_opacity"].detach())
        s = cfg.sdf_sigma if sigma is None else sigma
        sc = torch.exp(model.p["log_scales"].detach()).max(1).values
        large = sc > 0.1 * model.extent
        guided = sdf_guided and f_centre is not None
        gated = guided and cfg.visibility_gate
        grow_ok = model.grad_cnt > cfg.densify_every * cfg.visibility_success * 0.5 if gated else None
        prune_ok = model.vis_cnt > cfg.densify_every * cfg.visibility_success if gated else None
        if guided:
            near = torch.exp(-(f_centre**2) / (2 * s**2))
            eg = g + cfg.omega_s * near
            if cfg.sdf_grow_eikonal and grad_f is not None:
                eg = eg + cfg.omega_n * (1 - grad_f)
            if cfg.sdf_prune_large_only:
                # GSDF: no SDF penalty outside the field's domain; prune only low-score Gaussians that are also large
                ep = opac - cfg.omega_p * (1 - torch.where(torch.isfinite(f_centre), near, torch.ones_like(near)))
                grow, prune = eg > cfg.tau_g, (ep < cfg.tau_p) & large
            else:
                ep = opac - cfg.omega_p * (1 - near)
                grow, prune = eg > cfg.tau_g, (ep < cfg.tau_p) | large
            grow &= model.grad_cnt > 0
            if gated:
                grow &= grow_ok
                prune &= prune_ok
            score = eg
        else:
            grow, prune = g > cfg.tau_g, (opac < cfg.tau_p) | large
            score = g
        room = cfg.max_gaussians - model.n + int(prune.sum())
        if int(grow.sum()) > max(room, 0):  # keep the largest scores within the cap
            score = torch.where(grow & ~prune, score, torch.full_like(score, -1.0))
            k = max(room, 0) // 2  # a split adds two
            grow = torch.zeros_like(grow)
            if k > 0:
                grow[score.topk(k).indices] = True
        grow &= ~prune
        if gated:  # GSDF resets the counters of the checked Gaussians only
            model.grad_acc[grow_ok] = 0
            model.grad_cnt[grow_ok] = 0
            model.vis_cnt[prune_ok] = 0
        else:
            model.grad_acc.zero_()
            model.grad_cnt.zero_()
            model.vis_cnt.zero_()
        model.select(~prune)
        grow = grow[~prune]
        if grow.any():
            _split_clone(model, grow, rng_t)


# --------------------------------------------------------------------------- training


def _stage(it: int, cfg: Config) -> int:
    a = int(round(cfg.iters * cfg.stage_fractions[0]))
    b = a + int(round(cfg.iters * cfg.stage_fractions[1]))
    return 1 if it < a else (2 if it < b else 3)


def init_model(sd: SceneData, cfg: Config, seed: int) -> Model:
    import torch

    rng = np.random.default_rng([seed, 7])
    pts = init_points(sd, cfg, rng)
    n = len(pts)
    torch.manual_seed(seed)
    tree_d = torch.cdist(
        torch.as_tensor(pts[: min(n, 4000)], dtype=torch.float32), torch.as_tensor(pts, dtype=torch.float32)
    )
    nn3 = tree_d.topk(4, largest=False).values[:, 1:].mean(1)
    s0 = float(nn3.median()) if len(nn3) else 0.01 * sd.extent
    # initial colour: radiance of a mid-grey pixel at the middle training exposure (the response is learned)
    tmid = sorted(cfg.train_exposures)[len(cfg.train_exposures) // 2]
    params = {
        "means": torch.as_tensor(pts, dtype=torch.float32),
        "log_scales": torch.full((n, 3), math.log(max(s0, 1e-4))),
        "quats": torch.tensor([[1.0, 0, 0, 0]]).repeat(n, 1),
        "logit_opacity": torch.full((n,), math.log(0.1 / 0.9)),
        "log_radiance": torch.full((n, 3), math.log(0.2 / tmid)),
    }
    return Model(params, _make_tone(cfg), cfg, sd.extent)


def train_one(
    sd: SceneData,
    cfg: Config,
    method: str,
    *,
    seed: int,
    ckpt: Path | None,
    resume: bool,
    stop_after_iters: int | None = None,
) -> Iterator[dict]:
    """Train ``method`` on one scene; yield step records, then a result record (evaluation)."""
    import torch

    from icml26.methods.splatting.model import pseudo_sdf, reliability

    use_sdf = method != "hdr-gs"
    use_rel = method != "expo-gs-norel"
    sdf_dc = method in ("expo-gs", "expo-gs-norel")
    model, start, spent = None, 0, 0.0
    if resume and ckpt is not None and ckpt.is_file():
        model, meta = load_ckpt(ckpt, cfg)
        start, spent = int(meta["iteration"]), float(meta["train_s"])
    if model is None:
        model = init_model(sd, cfg, seed)
    pairs = [(t, i) for i in sd.train for t in cfg.train_exposures]
    gt_t = {k: torch.as_tensor(v) for k, v in sd.ldr.items()}
    rel_t = {k: reliability(v) for k, v in gt_t.items()}
    hdr_t = {i: torch.as_tensor(sd.hdr[i]) for i in sd.train if i in sd.hdr}
    hmax = {i: float(sd.hdr[i].max()) or 1.0 for i in sd.train if i in sd.hdr}
    depth_maps: dict = {}
    f_centre = None
    t0 = time.perf_counter()
    end = cfg.iters if stop_after_iters is None else min(cfg.iters, start + stop_after_iters)
    for it in range(start, end):
        stage = _stage(it, cfg)
        rng = np.random.default_rng([seed, it, 11])
        rng_t = torch.Generator().manual_seed(int(rng.integers(1 << 62)))
        t, i = pairs[int(rng.integers(len(pairs)))]
        geo = use_sdf and stage >= 2
        r = render(model, sd.cams[i], t, depth=geo)
        r["mean2d"].retain_grad()
        gt = gt_t[(t, i)]
        pred = r["ldr"]
        loss = 0.8 * (pred - gt).abs().mean() + 0.2 * (1 - _ssim_torch(pred, gt))
        if cfg.hdr_weight > 0:
            mu = lambda x: torch.log1p(5000 * x.clamp_min(0)) / math.log(5001)  # noqa: E731
            loss = loss + cfg.hdr_weight * (mu(r["hdr"] / hmax[i]) - mu(hdr_t[i] / hmax[i])).abs().mean()
        lsdf = torch.zeros(())
        if geo:
            w = 0.5 if stage == 3 else 1.0
            vis = torch.nonzero(r["radii"] > 0).squeeze(1)
            if len(vis) > 0:
                j = vis[torch.randint(len(vis), (cfg.sdf_samples,), generator=rng_t)]
                P = model.p
                sc = torch.exp(P["log_scales"])
                from icml26.ops.splat import quat_to_rotmat

                eps = torch.randn((len(j), 3), generator=rng_t).clamp(-2, 2)
                pts = P["means"][j] + (quat_to_rotmat(P["quats"][j]) @ (sc[j] * eps)[..., None])[..., 0]
                pc = _cam(sd.cams[i])
                V = pc.viewmat
                cp = pts @ V[:3, :3].T + V[:3, 3]
                z = cp[:, 2]
                u = (pc.fx * cp[:, 0] / z.clamp_min(1e-3) + pc.cx).detach()
                v = (pc.fy * cp[:, 1] / z.clamp_min(1e-3) + pc.cy).detach()
                ui, vi = u.floor().long(), v.floor().long()
                ok = (z > 0.01) & (ui >= 0) & (vi >= 0) & (ui < pc.width) & (vi < pc.height)
                ok &= r["alpha"].detach()[vi.clamp(0, pc.height - 1), ui.clamp(0, pc.width - 1)] > 0.5
                if ok.any():
                    D = r["depth"].detach()[vi[ok], ui[ok]]
                    fhat = D - z[ok]
                    f = pseudo_sdf(pts[ok], P["means"], sc, P["quats"], torch.sigmoid(P["logit_opacity"]))
                    wr = rel_t[(t, i)][vi[ok], ui[ok]] if use_rel else torch.ones_like(D)
                    lsdf = (wr * (f - fhat.abs()).abs()).mean() / (0.1 * sd.extent)
                    loss = loss + w * cfg.lambda_sdf * lsdf
            ldisk = torch.exp(model.p["log_scales"]).min(1).values.mean() / (0.01 * sd.extent)
            loss = loss + w * cfg.lambda_disk * ldisk
        loss.backward()
        with torch.no_grad():
            g = r["mean2d"].grad
            if g is not None:
                seen = r["radii"] > 0
                gn = (g * torch.tensor([sd.cams[i].width / 2.0, sd.cams[i].height / 2.0])).norm(dim=1)
                model.grad_acc[seen] += gn[seen]
                model.grad_cnt[seen] += 1
                model.vis_cnt[seen] += 1
        model.step()
        done = it + 1
        densify = stage != 2 and done >= cfg.densify_from and done % cfg.densify_every == 0 and done < cfg.iters
        if densify:
            guided = sdf_dc and stage == 3
            if guided and (f_centre is None or done % cfg.sdf_refresh == 0 or not depth_maps):
                with torch.no_grad():
                    depth_maps = {k: render(model, sd.cams[k], None, depth=True)["depth"].numpy() for k in sd.train}
            f_centre = centre_sdf(model, sd, depth_maps) if guided else None
            gf = centre_sdf_grad_norm(model) if guided and cfg.sdf_grow_eikonal else None
            density_control(
                model, cfg, guided, f_centre, rng_t, sigma=prune_band(model, sd, cfg) if guided else None, grad_f=gf
            )
        if cfg.opacity_reset_every and done % cfg.opacity_reset_every == 0 and done < cfg.iters:
            with torch.no_grad():
                model.p["logit_opacity"].clamp_(max=math.log(0.01 / 0.99))
        if done % cfg.log_every == 0 or done == cfg.iters:
            yield {
                "kind": "step",
                "method": method,
                "scene": sd.name,
                "iteration": done,
                "stage": stage,
                "loss": float(loss.detach()),
                "sdf_loss": float(lsdf.detach()),
                "gaussians": model.n,
            }
        if ckpt is not None and (done % cfg.ckpt_every == 0 or done == end):
            save_ckpt(
                ckpt,
                model,
                {
                    "config": _cfg_json(cfg),
                    "method": method,
                    "scene": sd.name,
                    "iteration": done,
                    "train_s": spent + time.perf_counter() - t0,
                    "extent": sd.extent,
                    "adam_step": model.step_n,
                    "seed": seed,
                },
            )
    train_s = spent + time.perf_counter() - t0
    if end < cfg.iters:
        return
    yield {
        "kind": "result",
        **evaluate(model, sd, cfg),
        "method": method,
        "scene": sd.name,
        "gaussians": model.n,
        "train_s": train_s,
        "iters": cfg.iters,
    }


def _cfg_json(cfg: Config) -> dict:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(cfg).items()}


def floaters(model: Model, sd: SceneData, cfg: Config) -> dict:
    """Gaussians (opacity >= floater_min_opacity) in front of the true (POV-Ray) surface by more
    than floater_band in at least one view that sees them: count and fraction. The surface depth
    at a centre's pixel is the minimum over its 3x3 neighbourhood (at 48-64 px one pixel of a
    grazing floor or an occlusion edge spans more than the band)."""
    import torch
    from scipy.ndimage import minimum_filter

    from icml26.core.data import renders as R

    if not sd.depth:
        return {}
    with torch.no_grad():
        op = torch.sigmoid(model.p["logit_opacity"]).numpy()
        mu = model.p["means"].detach().double().numpy()
    sel = op >= cfg.floater_min_opacity
    fl = np.zeros(len(mu), bool)
    for i, D in sd.depth.items():
        cam = sd.cams[i]
        uv, z = R.project(mu, cam)
        u, v = np.floor(uv[:, 0]).astype(int), np.floor(uv[:, 1]).astype(int)
        ok = (z > 0.01) & (u >= 0) & (v >= 0) & (u < cam.width) & (v < cam.height)
        front = np.zeros(len(mu), bool)
        Dm = minimum_filter(np.where(np.isfinite(D), D, 1e30), size=3, mode="nearest")
        front[ok] = z[ok] < Dm[v[ok], u[ok]] - cfg.floater_band
        fl |= front & sel
    return {"floaters": int(fl.sum()), "floater_frac": float(fl.sum() / max(1, sel.sum()))}


def evaluate(model: Model, sd: SceneData, cfg: Config) -> dict:
    """The protocol's metrics on the test views (module docstring of metrics.py)."""
    import torch

    from icml26.methods.splatting import metrics as M

    oe, ne, hd = [], [], []
    with torch.no_grad():
        for i in sd.test:
            for group, ts in ((oe, cfg.test_exposures_oe), (ne, cfg.test_exposures_ne)):
                for t in ts:
                    pred = render(model, sd.cams[i], t)["ldr"].clamp(0, 1).numpy()
                    gt = sd.ldr[(t, i)]
                    group.append((M.psnr(pred, gt), M.ssim(pred, gt)))
            h = render(model, sd.cams[i], None)["hdr"].numpy()
            hd.append(M.hdr_metrics(h, sd.hdr[i]))
    out = {
        "psnr_ldr_oe": float(np.mean([a for a, _ in oe])) if oe else None,
        "ssim_ldr_oe": float(np.mean([b for _, b in oe])) if oe else None,
        "psnr_ldr_ne": float(np.mean([a for a, _ in ne])) if ne else None,
        "ssim_ldr_ne": float(np.mean([b for _, b in ne])) if ne else None,
        "psnr_hdr": float(np.mean([d["psnr_hdr"] for d in hd])),
        "psnr_hdr_predmax": float(np.mean([d["psnr_hdr_predmax"] for d in hd])),
        "ssim_hdr": float(np.mean([d["ssim_hdr"] for d in hd])),
        "test_views": len(sd.test),
    }
    out.update(floaters(model, sd, cfg))
    return out


LPIPS_NOTE = "lpips_* not reported: no LPIPS network (AlexNet weights) ships offline"


def prepare_scenes(cfg: Config, data: str | Path | None, out: str | Path | None, seed: int) -> list[Path]:
    """The scene folders to train on: under ``data``, or rendered with POV-Ray into
    ``out/scenes`` (a temporary folder without ``out``)."""
    if data is not None:
        return scene_folders(data)
    import tempfile

    from icml26.methods.splatting.scenes import make_scene

    base = Path(out) / "scenes" if out is not None else Path(tempfile.mkdtemp(prefix="icml26-hdrgs-"))
    folders = []
    for k in range(cfg.scenes):
        d = base / f"scene{seed + k:03d}"
        if not (d / "cameras.json").is_file():
            make_scene(d, seed + k, views=cfg.views, size=cfg.size)
        folders.append(d)
    return folders


def run(
    cfg: Config,
    *,
    seed: int = 0,
    data: str | Path | None = None,
    out: str | Path | None = None,
    resume: bool = False,
    previous: list[dict] | None = None,
    folders: list[Path] | None = None,
) -> Iterator[dict]:
    """Train every method on every scene; yield step records, one result per (method, scene),
    then a summary (per-method means over scenes)."""
    import torch

    from icml26.core.output import previous_results

    torch.set_num_threads(max(1, torch.get_num_threads()))
    folders = folders if folders is not None else prepare_scenes(cfg, data, out, seed)
    done = previous_results(previous, "method", "scene")
    results = []
    for f in folders:
        sd = load_scene(f, cfg)
        for method in cfg.methods:
            key = (method, sd.name)
            if key in done:
                for r in previous or ():
                    if r.get("kind") == "step" and r.get("method") == method and r.get("scene") == sd.name:
                        yield r
                results.append(done[key])
                yield done[key]
                continue
            ck = Path(out) / "ckpt" / f"{sd.name}-{method}.safetensors" if out is not None else None
            for r in train_one(sd, cfg, method, seed=seed, ckpt=ck, resume=resume):
                if r["kind"] == "result":
                    if ck is not None:
                        r["ckpt"] = str(ck)
                    results.append(r)
                elif (
                    previous
                    and r["kind"] == "step"
                    and any(
                        p.get("kind") == "step"
                        and p.get("method") == method
                        and p.get("scene") == sd.name
                        and p.get("iteration") == r["iteration"]
                        for p in previous
                    )
                ):
                    continue
                yield r
    means = {}
    for m in cfg.methods:
        rs = [r for r in results if r["method"] == m]
        if rs:
            means[m] = {
                k: float(np.mean([r[k] for r in rs if r.get(k) is not None]))
                for k in (
                    "psnr_ldr_oe",
                    "psnr_ldr_ne",
                    "psnr_hdr",
                    "psnr_hdr_predmax",
                    "ssim_ldr_oe",
                    "ssim_hdr",
                    "gaussians",
                    "floaters",
                )
                if any(r.get(k) is not None for r in rs)
            }
    yield {
        "kind": "summary",
        "methods": list(cfg.methods),
        "scenes": [Path(f).name for f in folders],
        "iters": cfg.iters,
        "mean": means,
        "lpips": LPIPS_NOTE,
        "supervision": "LDR only"
        if cfg.hdr_weight == 0
        else f"LDR + {cfg.hdr_weight} x mu-law HDR (HDR-GS synthetic mode)",
    }


def render_views(model: Model, scene, views: list[int], exposure_s: float | None, out: str | Path) -> Iterator[dict]:
    """Write ``ldr_NNN.png`` (at ``exposure_s``, when given), ``hdr_NNN.hdr`` (linear radiance,
    Radiance RGBE) and ``hdr_NNN.exr`` (the same, OpenEXR float32) for the cameras ``views`` of
    ``scene`` (renders.RenderedScene or hdr_nerf.HdrNerfScene); one result record per view."""
    import torch

    from icml26.core.data import hdr_nerf as HN
    from icml26.core.data import renders as R
    from icml26.core.output import atomic_write_bytes

    d = Path(out)
    for i in views:
        with torch.no_grad():
            r = render(model, scene.cameras[i], exposure_s)
        h = d / f"hdr_{i:03d}.hdr"
        hdr = r["hdr"].numpy()
        R.write_hdr(h, hdr)
        e = HN.write_exr(d / f"hdr_{i:03d}.exr", hdr)
        rec = {"kind": "result", "view": i, "hdr": str(h), "exr": str(e), "exposure_s": exposure_s}
        if exposure_s is not None:
            p = d / f"ldr_{i:03d}.png"
            import io

            from PIL import Image

            b = io.BytesIO()
            Image.fromarray(np.round(255 * r["ldr"].clamp(0, 1).numpy()).astype(np.uint8)).save(b, format="PNG")
            atomic_write_bytes(p, b.getvalue())
            rec["ldr"] = str(p)
        yield rec
    yield {"kind": "summary", "views": len(views), "out": str(d)}
