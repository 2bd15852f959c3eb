"""Scene folders for ``icml26 hdr-gs``: the icml26 renders layout (cameras.json, hdr/, ldr/<t>/)
and HDR-NeRF's layouts (icml26.core.data.hdr_nerf), read into ``SceneData``; the initial points
of the Gaussians (icml26.methods.splatting.init_points)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from icml26.core.data import hdr_nerf as HN
from icml26.core.data import renders as R
from icml26.core.data.hdr_nerf import is_hdr_nerf
from icml26.core.errors import InputError
from icml26.methods.splatting import initial as I
from icml26.methods.splatting.config import Config


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
    points: np.ndarray | None = None  # SfM points of the folder (same world frame), when it has them
    bounds: tuple | None = None  # (near, far) depth bounds of the folder (LLFF poses_bounds), when given
    init_source: str = ""  # filled by init_points: depth | sfm | frusta


def _is_scene(p: Path) -> bool:
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
    ldr_only = getattr(s, "bounds", None) is not None and not s.has("hdr_any")  # HDR-NeRF real scenes
    if not s.has("hdr") and not ldr_only:
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
    sfm = I.find_sfm(folder)
    points = I.read_points(sfm) if sfm is not None else None
    bounds = getattr(s, "bounds", None)
    return SceneData(Path(folder).name, list(s.cameras), train, test, ldr, hdr, depth, extent, centre, points, bounds)


def init_points(sd: SceneData, cfg: Config, rng: np.random.Generator) -> np.ndarray:
    """Initial centres: noisy surface points back-projected from the training views' depth (the
    SfM stand-in) when the folder has depth; else its SfM points (initial.py) when they share the
    cameras' frame; else points in the region the training cameras see (initial.frustum_points).
    Sets ``sd.init_source``."""
    pts = []
    if cfg.init_from in ("auto", "depth"):
        for i in sd.train:
            if i in sd.depth:
                p = R.backproject(sd.depth[i], sd.cams[i], stride=2).reshape(-1, 3)
                pts.append(p[np.isfinite(p).all(1)])
    if pts:
        p = np.concatenate(pts)
        p = p[rng.choice(len(p), size=min(cfg.init_points, len(p)), replace=False)]
        sd.init_source = "depth"
        return p + cfg.init_noise * rng.standard_normal(p.shape)
    cams = [sd.cams[i] for i in sd.train]
    if cfg.init_from in ("auto", "sfm") and sd.points is not None and I.sfm_usable(sd.points, cams):
        p = sd.points[rng.choice(len(sd.points), size=min(cfg.init_points, len(sd.points)), replace=False)]
        sd.init_source = "sfm"
        return p
    tmid = sorted(cfg.train_exposures)[len(cfg.train_exposures) // 2]
    images = [sd.ldr[(float(tmid), i)] for i in sd.train]
    sd.init_source = "frusta"
    return I.frustum_points(cams, images, cfg.init_points, rng, sd.bounds)
