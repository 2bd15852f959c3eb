"""HDR-NeRF's real scenes (Huang et al., CVPR 2022), LLFF-style, and conversions of an icml26
renders folder into both HDR-NeRF layouts (for testing the readers on known scenes).

Real-scene layout (what HDR-NeRF's ``load_real_llff.py`` / HDR-GS's ``hdr_real`` loader read)::

    poses_bounds_exps.npy   (M, 18): per image, sorted by file name, a 3x5 LLFF matrix (c2w columns
                            [down, right, back] + [H, W, focal]), near, far, exposure time (s)
    input_images/<view>_<k>.{jpg,png}   view <view>, exposure index k; M = views x exposures
    exr/<view>.exr          HDR ground truth (optional; the released real scenes have none)

Cameras: LLFF [down, right, back] -> OpenCV [right, down, forward]; focal scaled by the stored
image width over the npy's W. An exposure level k's time is the median over views (times of one
level that differ by more than 1% are refused). Split: even views train, odd test. Without HDR
ground truth only the LDR metrics are reported. Every file is checked before any pixel is read.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np

from icml26.core.errors import InputError

IMG_RE = re.compile(r"(\d+)_(\d+)\.(jpg|jpeg|png)$", re.IGNORECASE)


def read_llff(folder: str | Path):
    """Read and check a real HDR-NeRF scene folder (module docstring) -> hdr_nerf.HdrNerfScene."""
    from icml26.core.data.hdr_nerf import LLFF_POSES, HdrNerfScene, _inside
    from icml26.core.data.renders import Camera

    d = Path(folder)
    where = f"HDR-NeRF real scene {str(d)!r}"
    try:
        arr = np.load(d / LLFF_POSES, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise InputError(f"{where}: {LLFF_POSES} is not a readable .npy array ({type(e).__name__})") from None
    if arr.ndim != 2 or arr.shape[1] != 18 or not np.isfinite(arr).all():
        raise InputError(f"{where}: {LLFF_POSES} must be a finite (images, 18) array, got {arr.shape}")
    imdir = d / "input_images"
    files = sorted(p for p in imdir.iterdir() if IMG_RE.fullmatch(p.name)) if imdir.is_dir() else []
    if len(files) != arr.shape[0]:
        raise InputError(
            f"{where}: {len(files)} images <view>_<k>.jpg/png in input_images/, {arr.shape[0]} rows in {LLFF_POSES}"
        )
    size = None
    views: dict[int, dict] = {}
    for row, p in zip(arr, files):
        _inside(d, str(p.relative_to(d)), "image")
        wh = _img_size(p)
        if size is None:
            size = wh
        elif wh != size:
            raise InputError(f"image {str(p)!r} is {wh[0]}x{wh[1]}, the scene's other images {size[0]}x{size[1]}")
        m = IMG_RE.fullmatch(p.name)
        v, k = int(m.group(1)), int(m.group(2))
        near, far, t = float(row[15]), float(row[16]), float(row[17])
        if not (t > 0 and 0 < near < far):
            raise InputError(f"{where}: {p.name}: exposure {t} s or bounds ({near}, {far}) out of range")
        views.setdefault(v, {"rows": [], "exps": {}})
        views[v]["rows"].append(row)
        views[v]["exps"][k] = (t, p)
    w, h = size
    levels: dict[int, list] = {}
    for v in views.values():
        for k, (t, _) in v["exps"].items():
            levels.setdefault(k, []).append(t)
    level_t = {}
    for k, ts in levels.items():
        med = float(np.median(ts))
        if max(abs(t - med) for t in ts) > 0.01 * med:
            raise InputError(f"{where}: exposure level {k} has times from {min(ts):g} to {max(ts):g} s across views")
        level_t[k] = med
    cams, ldr_files, hdr_files, names, near_all, far_all = [], {}, {}, [], [], []
    for i, (v, info) in enumerate(sorted(views.items())):
        P = np.asarray(info["rows"][0][:15]).reshape(3, 5)
        for r in info["rows"][1:]:
            if np.abs(np.asarray(r[:15]).reshape(3, 5) - P).max() > 1e-4 * (1 + np.abs(P).max()):
                raise InputError(f"{where}: the images of view {v:03d} have different poses")
        R = P[:, :3]
        if np.abs(R.T @ R - np.eye(3)).max() > 1e-3:
            raise InputError(f"{where}: view {v:03d}: the pose's rotation is not orthonormal")
        c2w = np.eye(4)
        c2w[:3, 0], c2w[:3, 1], c2w[:3, 2], c2w[:3, 3] = P[:, 1], P[:, 0], -P[:, 2], P[:, 3]
        H0, W0, f0 = P[:, 4]
        if not (W0 > 0 and f0 > 0):
            raise InputError(f"{where}: view {v:03d}: hwf column {P[:, 4].tolist()} is not positive")
        fx = f0 * w / W0
        cams.append(Camera(w, h, np.array([[fx, 0, w / 2.0], [0, fx, h / 2.0], [0, 0, 1.0]]), c2w))
        for k, (_, p) in info["exps"].items():
            ldr_files[(i, level_t[k])] = p
        ex = d / "exr" / f"{v:03d}.exr"
        if ex.is_file():
            hdr_files[i] = ex
        near_all += [float(r[15]) for r in info["rows"]]
        far_all += [float(r[16]) for r in info["rows"]]
        names.append(f"view:{v:03d}")
    if len(cams) < 2:
        raise InputError(f"{where}: needs at least 2 views, found {len(cams)}")
    common = set.intersection(*[{t for (j, t) in ldr_files if j == i} for i in range(len(cams))])
    n = len(cams)
    return HdrNerfScene(
        d,
        tuple(cams),
        {"source": "HDR-NeRF real (LLFF) layout", "objects": []},
        tuple(sorted(common)),
        tuple(range(0, n, 2)),
        tuple(range(1, n, 2)),
        ldr_files,
        hdr_files,
        tuple(names),
        (min(near_all), max(far_all)),
    )


def _img_size(p: Path) -> tuple[int, int]:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(p) as im:
            return im.size
    except (OSError, UnidentifiedImageError, ValueError) as e:
        raise InputError(f"image {str(p)!r}: not a readable image ({type(e).__name__})") from None


def _levels(scene) -> list[float]:
    return sorted(scene.ldr_exposures_s)


def to_llff(src: str | Path, dst: str | Path, *, hdr: bool = False) -> Path:
    """Write the renders folder ``src`` (cameras.json, ldr/<t>/, hdr/, depth/) in HDR-NeRF's real
    layout at ``dst``: PNG images, poses_bounds_exps.npy (bounds from the depth maps' 1st / 99th
    percentiles when present, else 0.5 x / 2 x the focus depth), HDR as exr/ only with ``hdr``."""
    from PIL import Image

    from icml26.core.data import renders as R
    from icml26.core.data.hdr_nerf import write_exr

    s = R.read_scene(src)
    d = Path(dst)
    (d / "input_images").mkdir(parents=True, exist_ok=True)
    rows = []
    for i, c in enumerate(s.cameras):
        if s.has("depth"):
            z = s.depth(i)
            z = z[np.isfinite(z)]
            near, far = float(np.percentile(z, 1)), float(np.percentile(z, 99))
        else:
            from icml26.methods.splatting.initial import near_far

            near, far = near_far(list(s.cameras))
        P = np.zeros((3, 5))
        P[:, 0], P[:, 1], P[:, 2], P[:, 3] = c.c2w[:3, 1], c.c2w[:3, 0], -c.c2w[:3, 2], c.c2w[:3, 3]
        P[:, 4] = [c.height, c.width, c.K[0, 0]]
        for k, t in enumerate(_levels(s)):
            Image.fromarray(s.ldr(t, i)).save(d / "input_images" / f"{i:03d}_{k}.png")
            rows.append(np.concatenate([P.reshape(-1), [near, far, t]]))
        if hdr and s.has("hdr"):
            write_exr(d / "exr" / f"{i:03d}.exr", s.hdr(i))
    np.save(d / "poses_bounds_exps.npy", np.asarray(rows))
    return d


def to_synthetic(src: str | Path, dst: str | Path) -> Path:
    """Write the renders folder ``src`` in HDR-NeRF's synthetic layout at ``dst`` (even views
    train, odd test; Blender camera axes; exr/<name>.exr HDR for every view; no depth)."""
    from PIL import Image

    from icml26.core.data import renders as R
    from icml26.core.data.hdr_nerf import write_exr

    s = R.read_scene(src)
    d = Path(dst)
    c0 = s.cameras[0]
    fov = 2 * math.atan(0.5 * c0.width / c0.K[0, 0])
    for split, views in (("train", range(0, len(s), 2)), ("test", range(1, len(s), 2))):
        (d / split).mkdir(parents=True, exist_ok=True)
        frames, exps = [], {}
        for i in views:
            m = np.array(s.cameras[i].c2w, float)
            m[:3, 1:3] *= -1.0  # OpenCV -> Blender camera axes
            fp = f"{split}/r_{i:03d}"
            frames.append({"file_path": fp, "transform_matrix": m.tolist()})
            for k, t in enumerate(_levels(s)):
                Image.fromarray(s.ldr(t, i)).save(d / f"{fp}_{k}.png")
                exps[f"{fp}_{k}.png"] = t
            write_exr(d / "exr" / f"r_{i:03d}.exr", s.hdr(i))
        (d / f"transforms_{split}.json").write_text(json.dumps({"camera_angle_x": fov, "frames": frames}))
        (d / f"exposure_{split}.json").write_text(json.dumps(exps))
    return d
