"""Initial Gaussian centres for ``icml26 hdr-gs`` when a scene has no depth maps.

1. SfM points, when the folder ships them (what 3DGS and HDR-GS initialise from): COLMAP
   ``sparse/0/points3D.txt`` or ``points3D.bin`` (the format of COLMAP's ``read_write_model.py``)
   or a ``.ply`` point cloud (``points3D.ply``, ``sparse/0/points3D.ply``); used only when at
   least half of them project in front of and inside some training view (same world frame).
2. Otherwise the region the cameras see: candidates on random training rays between the near and
   far bounds (the folder's, e.g. LLFF ``poses_bounds``, else from the least-squares focus point
   of the camera axes: its depth in each camera x [0.25, 2]), sampled uniformly in disparity,
   kept where at least half of the training frusta overlap; of those, the ``n`` most
   photo-consistent (lowest colour variance across the training views at the middle exposure,
   occlusion ignored; docs/hdr-gs.md has the measured alternatives).
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

from icml26.core.data import renders as R
from icml26.core.errors import InputError

SFM_FILES = ("sparse/0/points3D.bin", "sparse/0/points3D.txt", "sparse/0/points3D.ply", "points3D.ply")


def find_sfm(folder: str | Path) -> Path | None:
    """The first SfM point file of SFM_FILES in ``folder``, or None."""
    d = Path(folder)
    for rel in SFM_FILES:
        if (d / rel).is_file():
            return d / rel
    return None


def read_points(path: str | Path) -> np.ndarray:
    """XYZ (N, 3) float64 of a COLMAP points3D.txt / .bin or a .ply (vertex x, y, z); InputError
    on a malformed file."""
    p = Path(path)
    try:
        if p.suffix == ".txt":
            rows = [ln.split() for ln in p.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
            xyz = np.array([[float(v) for v in r[1:4]] for r in rows], dtype=np.float64).reshape(-1, 3)
        elif p.suffix == ".bin":
            xyz = _read_colmap_bin(p)
        elif p.suffix == ".ply":
            from icml26.methods.splatting.ply import read_vertices

            v = read_vertices(p)
            xyz = np.stack([v[k] for k in ("x", "y", "z")], 1)
        else:
            raise ValueError(f"unknown point file type {p.suffix}")
    except (ValueError, IndexError, KeyError, struct.error, OSError) as e:
        raise InputError(f"SfM points {str(p)!r}: not a readable point file ({type(e).__name__}: {e})") from None
    return xyz[np.isfinite(xyz).all(1)]


def _read_colmap_bin(p: Path) -> np.ndarray:
    """COLMAP points3D.bin: uint64 count, then per point id (u64), xyz (3 f64), rgb (3 u8),
    error (f64), track length (u64) and track (image id i32, point2D idx i32) pairs."""
    b = p.read_bytes()
    (n,), o = struct.unpack_from("<Q", b, 0), 8
    out = np.empty((n, 3))
    for k in range(n):
        out[k] = struct.unpack_from("<3d", b, o + 8)
        (tl,) = struct.unpack_from("<Q", b, o + 43)
        o += 51 + 8 * tl
    return out


def _inside(pts: np.ndarray, cam) -> np.ndarray:
    uv, z = R.project(pts, cam)
    return (z > 1e-6) & (uv[:, 0] >= 0) & (uv[:, 1] >= 0) & (uv[:, 0] < cam.width) & (uv[:, 1] < cam.height)


def sfm_usable(pts: np.ndarray, cams: list) -> bool:
    """At least half of the points are in front of and inside some camera (same world frame)."""
    if len(pts) == 0:
        return False
    seen = np.zeros(len(pts), bool)
    for c in cams:
        seen |= _inside(pts, c)
    return bool(seen.mean() >= 0.5)


def focus_point(cams: list) -> np.ndarray:
    """The least-squares point closest to every camera's optical axis."""
    A, b = np.zeros((3, 3)), np.zeros(3)
    for c in cams:
        a = c.c2w[:3, 2] / np.linalg.norm(c.c2w[:3, 2])
        P = np.eye(3) - np.outer(a, a)
        A += P
        b += P @ c.c2w[:3, 3]
    return np.linalg.lstsq(A, b, rcond=None)[0]


def near_far(cams: list) -> tuple[float, float]:
    """Depth range from the focus point: its depth along each camera's axis, x 0.25 / x 2."""
    f = focus_point(cams)
    d = np.array([float((f - c.c2w[:3, 3]) @ c.c2w[:3, 2]) for c in cams])
    d = d[d > 0]
    if d.size == 0:  # the axes meet behind the cameras (e.g. all parallel): a unit range
        return 0.1, 10.0
    return 0.25 * float(d.min()), 2.0 * float(d.max())


def frustum_points(cams: list, images: list, n: int, rng: np.random.Generator, bounds=None) -> np.ndarray:
    """``n`` centres in the region the cameras see (module docstring, 2.). images: (H, W, 3)
    float arrays of the same cameras (for the photo-consistency ranking)."""
    near, far = bounds if bounds is not None else near_far(cams)
    m = max(20 * n, 4000)
    k = rng.integers(len(cams), size=m)
    pts = np.empty((m, 3))
    disp = 1.0 / near + rng.random(m) * (1.0 / far - 1.0 / near)
    z = 1.0 / disp
    for j, c in enumerate(cams):
        s = k == j
        u = rng.random(s.sum()) * c.width
        v = rng.random(s.sum()) * c.height
        x = (u - c.K[0, 2]) / c.K[0, 0] * z[s]
        y = (v - c.K[1, 2]) / c.K[1, 1] * z[s]
        pts[s] = np.stack([x, y, z[s]], 1) @ c.c2w[:3, :3].T + c.c2w[:3, 3]
    vis = np.stack([_inside(pts, c) for c in cams])  # (V, m)
    keep = vis.sum(0) >= max(2, int(np.ceil(0.5 * len(cams))))
    if keep.sum() < n:  # frusta barely overlap (e.g. few views): any point two views see
        keep = vis.sum(0) >= min(2, len(cams))
    pts, vis = pts[keep], vis[:, keep]
    if len(pts) == 0:
        raise InputError("no point is seen by two training views: the cameras do not overlap")
    var = _colour_variance(pts, vis, cams, images)
    return pts[np.argsort(var, kind="stable")[:n]]


def _colour_variance(pts, vis, cams, images) -> np.ndarray:
    s1 = np.zeros((len(pts), 3))
    s2 = np.zeros((len(pts), 3))
    cnt = np.zeros(len(pts))
    for j, (c, im) in enumerate(zip(cams, images)):
        sel = vis[j]
        uv, _ = R.project(pts[sel], c)
        u = np.clip(uv[:, 0].astype(int), 0, c.width - 1)
        v = np.clip(uv[:, 1].astype(int), 0, c.height - 1)
        col = im[v, u].astype(np.float64)
        s1[sel] += col
        s2[sel] += col * col
        cnt[sel] += 1
    mean = s1 / cnt[:, None]
    return (s2 / cnt[:, None] - mean * mean).mean(1)
