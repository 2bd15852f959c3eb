"""The HDR-NeRF dataset's scene folders (Huang et al., CVPR 2022), read into the interface of
:class:`icml26.core.data.renders.RenderedScene`, and OpenEXR I/O. Synthetic layout (what the
official ``load_syn_llff.py`` and ``eval_hdr.py`` and HDR-GS read)::

    transforms_{train,test}.json  {"camera_angle_x", "frames": [{"file_path", "transform_matrix"}]}
    exposure_{train,test}.json    {"<file_path>_<k>.png": exposure time (s)}, k = 0..4
    <file_path>_<k>.png           8-bit LDR view at exposure k (RGBA: alpha dropped)
    exr/<name>.exr or test_hdr/hdr_NNN.exr   HDR ground truth (every test view needs one)

Cameras: Blender camera axes -> OpenCV by negating the matrix's 2nd and 3rd columns (as HDR-GS);
fx = fy = W / (2 tan(camera_angle_x / 2)), centred principal point; poses in the file's units.
Views are interleaved train 0, test 0, train 1, ... so HDR-NeRF's 18 / 17 split is the even /
odd split (:attr:`HdrNerfScene.train_views` / ``test_views`` hold it in any case). The real,
LLFF-style scenes (``poses_bounds_exps.npy`` + ``input_images/``) are read by hdr_nerf_llff.py.

Every file is checked by :func:`read_hdr_nerf` before anything is loaded; a problem raises
:class:`~icml26.core.errors.InputError` naming the file. EXR needs PyPI ``openexr`` 3.x (the
``splatting`` extra), else :class:`~icml26.core.errors.MissingDataError` with the install line.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from icml26.core.errors import InputError, MissingDataError

LLFF_POSES = "poses_bounds_exps.npy"
OPENEXR_INSTALL = "pip install 'icml26[splatting]'  (PyPI openexr 3.x)"
SPLITS = ("train", "test")


def is_hdr_nerf(folder: str | Path) -> bool:
    """True when ``folder`` holds an HDR-NeRF scene: synthetic (``transforms_train.json`` or
    ``transforms_test.json``) or real, LLFF-style (``poses_bounds_exps.npy``)."""
    d = Path(folder)
    return any((d / f"transforms_{s}.json").is_file() for s in SPLITS) or (d / LLFF_POSES).is_file()


# --------------------------------------------------------------------------- OpenEXR


def _openexr():
    try:
        import OpenEXR
    except ImportError:
        raise MissingDataError(f"OpenEXR images need the openexr package: {OPENEXR_INSTALL}") from None
    return OpenEXR


def read_exr(path: str | Path) -> np.ndarray:
    """An OpenEXR image's R, G, B channels (half or float, any compression) as float32 (H, W, 3).

    A single-channel (Y or one named channel) image is repeated over the 3 channels. Raises
    InputError on a file that is not a readable EXR or has no colour channels; MissingDataError
    without the openexr package."""
    OpenEXR = _openexr()
    p = Path(path)
    if not p.is_file():
        raise InputError(f"EXR image {str(path)!r} does not exist")
    try:
        with OpenEXR.File(str(p), separate_channels=True) as f:
            ch = {k: np.asarray(v.pixels) for k, v in f.channels().items()}
    except Exception as e:  # noqa: BLE001 (the binding raises RuntimeError and others)
        raise InputError(f"EXR image {str(path)!r}: not a readable OpenEXR file ({type(e).__name__})") from None
    names = {k.split(".")[-1].upper(): k for k in ch}  # "R" or "<layer>.R"
    if all(c in names for c in "RGB"):
        a = np.stack([ch[names[c]] for c in "RGB"], -1)
    elif "Y" in names or len(ch) == 1:
        y = ch[names["Y"]] if "Y" in names else next(iter(ch.values()))
        a = np.repeat(y[..., None], 3, -1)
    else:
        raise InputError(f"EXR image {str(path)!r}: no R, G, B (or Y) channels (has {sorted(ch)})")
    if a.ndim != 3 or a.shape[0] < 1 or a.shape[1] < 1:
        raise InputError(f"EXR image {str(path)!r}: unexpected pixel array shape {a.shape}")
    return a.astype(np.float32)


def write_exr(path: str | Path, image: np.ndarray, *, half: bool = False) -> Path:
    """Write a float (H, W, 3) linear image as a scanline OpenEXR file (R, G, B channels, ZIP
    compression; float32, or half with ``half``). NaN and negative values become 0. Atomic.
    Raises ValueError on a wrong shape; MissingDataError without the openexr package."""
    OpenEXR = _openexr()
    from icml26.core.output import atomic_path

    a = np.asarray(image, dtype=np.float64)
    if a.ndim != 3 or a.shape[2] != 3:
        raise ValueError(f"write_exr: expected (H, W, 3), got {a.shape}")
    a = np.clip(np.nan_to_num(a, nan=0.0, posinf=np.finfo(np.float32).max), 0.0, None)
    a = np.ascontiguousarray(a.astype(np.float16 if half else np.float32))
    header = {"compression": OpenEXR.ZIP_COMPRESSION, "type": OpenEXR.scanlineimage}
    with atomic_path(path) as tmp:
        with OpenEXR.File(header, {"RGB": a}) as f:
            f.write(str(tmp))
    return Path(path)


# --------------------------------------------------------------------------- scene reader


@dataclass(frozen=True)
class HdrNerfScene:
    """An HDR-NeRF scene folder (images read lazily), with the interface of
    :class:`icml26.core.data.renders.RenderedScene`: ``cameras`` (renders.Camera, OpenCV axes),
    ``ldr(t, i)`` uint8 (H, W, 3), ``hdr(i)`` float32 (H, W, 3), ``has(what)``, ``ldr_exposures_s``
    (the exposure times every view has), plus the split (:attr:`train_views`, :attr:`test_views`)."""

    folder: Path
    cameras: tuple
    scene: dict
    ldr_exposures_s: tuple
    train_views: tuple
    test_views: tuple
    ldr_files: dict = field(repr=False)  # (view, exposure_s) -> Path
    hdr_files: dict = field(repr=False)  # view -> Path (views with HDR ground truth)
    names: tuple = field(repr=False, default=())  # view -> "<split>:<file_path>"
    bounds: tuple | None = None  # (near, far) over the views (LLFF layout), else None

    def __len__(self) -> int:
        return len(self.cameras)

    def _check(self, i: int) -> None:
        if not 0 <= i < len(self.cameras):
            raise IndexError(f"view {i} out of range 0..{len(self.cameras) - 1}")

    def ldr(self, exposure_s: float, i: int) -> np.ndarray:
        self._check(i)
        p = self.ldr_files.get((i, float(exposure_s)))
        if p is None:
            raise InputError(
                f"HDR-NeRF scene {str(self.folder)!r}: view {self.names[i]} has no image at exposure {exposure_s:g} s"
            )
        return _read_png(p, self.cameras[i])

    def rgb(self, i: int) -> np.ndarray:
        """The LDR image at the middle exposure time (the renders layout's rgb/)."""
        ts = self.ldr_exposures_s
        return self.ldr(ts[len(ts) // 2], i)

    def hdr(self, i: int) -> np.ndarray:
        self._check(i)
        p = self.hdr_files.get(i)
        if p is None:
            raise InputError(
                f"HDR-NeRF scene {str(self.folder)!r}: view {self.names[i]} has no HDR ground truth (exr/ or test_hdr/)"
            )
        a = read_exr(p)
        c = self.cameras[i]
        if a.shape[:2] != (c.height, c.width):
            raise InputError(
                f"HDR-NeRF scene {str(self.folder)!r}: {p.relative_to(self.folder)} is {a.shape[1]}x{a.shape[0]}, "
                f"its LDR images {c.width}x{c.height}"
            )
        return a

    def has_hdr(self, i: int) -> bool:
        return i in self.hdr_files

    def depth(self, i: int) -> np.ndarray:
        raise InputError(f"HDR-NeRF scene {str(self.folder)!r} has no depth maps")

    def has(self, what: str) -> bool:
        """ "hdr": every test view has HDR ground truth; "rgb": LDR images exist; depth / instances: never."""
        if what == "hdr_any":
            return bool(self.hdr_files)
        if what == "hdr":
            return bool(self.test_views) and all(i in self.hdr_files for i in self.test_views)
        return what == "rgb"


def _read_png(p: Path, cam) -> np.ndarray:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(p) as im:
            a = np.asarray(im.convert("RGB"))
    except (OSError, UnidentifiedImageError, ValueError) as e:
        raise InputError(f"image {str(p)!r}: not a readable PNG ({type(e).__name__})") from None
    if a.shape[:2] != (cam.height, cam.width):
        raise InputError(
            f"image {str(p)!r} is {a.shape[1]}x{a.shape[0]}, the scene's other images {cam.width}x{cam.height}"
        )
    return a


def _json(d: Path, name: str):
    p = d / name
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"HDR-NeRF scene {str(d)!r}: missing {name}") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise InputError(f"HDR-NeRF scene {str(d)!r}: {name} is not valid JSON ({e})") from None


def _png_size(p: Path) -> tuple[int, int]:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(p) as im:
            fmt, wh = im.format, im.size
    except (OSError, UnidentifiedImageError, ValueError) as e:
        raise InputError(f"image {str(p)!r}: not a readable PNG ({type(e).__name__})") from None
    if fmt != "PNG":
        raise InputError(f"image {str(p)!r} is {fmt}, not PNG")
    return wh


def _inside(d: Path, rel: str, what: str) -> Path:
    """``d / rel`` resolved, refused when it leaves the scene folder (a file_path with ../)."""
    p = (d / rel).resolve()
    if d.resolve() not in p.parents and p != d.resolve():
        raise InputError(f"HDR-NeRF scene {str(d)!r}: {what} {rel!r} points outside the folder")
    return p


def _split_files(d: Path, s: str) -> tuple[dict, dict, float]:
    """transforms_<s>.json, exposure_<s>.json and the split's horizontal field of view (rad), checked."""
    tr = _json(d, f"transforms_{s}.json")
    ex = _json(d, f"exposure_{s}.json")
    if not isinstance(tr, dict) or not isinstance(tr.get("frames"), list) or not tr["frames"]:
        raise InputError(f"HDR-NeRF scene {str(d)!r}: transforms_{s}.json has no frames list")
    if not isinstance(ex, dict):
        raise InputError(f"HDR-NeRF scene {str(d)!r}: exposure_{s}.json must map image names to exposure times")
    try:
        fov = float(tr["camera_angle_x"])
    except (KeyError, TypeError, ValueError):
        raise InputError(f"HDR-NeRF scene {str(d)!r}: transforms_{s}.json lacks a numeric camera_angle_x") from None
    if not 0 < fov < math.pi:
        raise InputError(f"HDR-NeRF scene {str(d)!r}: transforms_{s}.json camera_angle_x {fov} is not in (0, pi) rad")
    return tr, ex, fov


def _frame_pose(d: Path, s: str, j: int, fr) -> tuple[str, np.ndarray]:
    """A frame's file_path and its finite, rigid 4x4 camera-to-world transform_matrix (Blender axes)."""
    try:
        fp = str(fr["file_path"])
        m = np.asarray(fr["transform_matrix"], dtype=float)
    except (KeyError, TypeError, ValueError):
        raise InputError(
            f"HDR-NeRF scene {str(d)!r}: transforms_{s}.json frame {j} lacks file_path or a numeric transform_matrix"
        ) from None
    if m.shape != (4, 4) or not np.isfinite(m).all():
        raise InputError(
            f"HDR-NeRF scene {str(d)!r}: transforms_{s}.json frame {j} transform_matrix is not a finite 4x4"
        )
    R = m[:3, :3]
    if np.abs(R.T @ R - np.eye(3)).max() > 1e-3 or np.abs(m[3] - [0, 0, 0, 1]).max() > 1e-6:
        raise InputError(
            f"HDR-NeRF scene {str(d)!r}: transforms_{s}.json frame {j} transform_matrix is not a rigid "
            "camera-to-world matrix"
        )
    return fp, m


def _frame_exposures(d: Path, s: str, j: int, fp: str, ex: dict) -> dict[float, Path]:
    """``{exposure time (s): image path}`` of frame ``fp``: the ``<fp>_<k>.png`` entries of exposure_<s>.json."""
    pat = re.compile(re.escape(fp) + r"_(\d+)\.png$")
    exps = {}
    for key, val in ex.items():
        mm = pat.fullmatch(str(key))
        if mm is None:
            continue
        try:
            t = float(val)
        except (TypeError, ValueError):
            raise InputError(f"HDR-NeRF scene {str(d)!r}: exposure_{s}.json {key!r} is not a number") from None
        if not (t > 0 and math.isfinite(t)):
            raise InputError(
                f"HDR-NeRF scene {str(d)!r}: exposure_{s}.json {key!r} = {val} is not an exposure time > 0 s"
            )
        exps[t] = _inside(d, str(key), "image")
    if not exps:
        raise InputError(f"HDR-NeRF scene {str(d)!r}: exposure_{s}.json has no entry {fp}_<k>.png for frame {j}")
    return exps


def _check_images(d: Path, s: str, exps: dict[float, Path], size: tuple[int, int] | None) -> tuple[int, int] | None:
    """Every listed image exists and has the scene's size (``size``, None before the first); returns the size."""
    for p in exps.values():
        if not p.is_file():
            raise InputError(
                f"HDR-NeRF scene {str(d)!r}: missing image {p.relative_to(d.resolve())} (listed in exposure_{s}.json)"
            )
        wh = _png_size(p)
        if size is None:
            size = wh
        elif wh != size:
            raise InputError(f"image {str(p)!r} is {wh[0]}x{wh[1]}, the scene's other images {size[0]}x{size[1]}")
    return size


def _frame_hdr(d: Path, s: str, j: int, fp: str) -> Path | None:
    """The HDR file of a frame (exr/<name>.exr, or test_hdr/hdr_<j>.exr for test frames); required for test frames."""
    name = Path(fp).name
    hdr = None
    for cand in [d / "exr" / f"{name}.exr"] + ([d / "test_hdr" / f"hdr_{j:03d}.exr"] if s == "test" else []):
        if cand.is_file():
            hdr = cand
            break
    if s == "test" and hdr is None:
        raise InputError(
            f"HDR-NeRF scene {str(d)!r}: no HDR ground truth for test frame {j} ({fp}): "
            f"expected exr/{name}.exr or test_hdr/hdr_{j:03d}.exr"
        )
    return hdr


def read_hdr_nerf(folder: str | Path) -> HdrNerfScene:
    """Read and check an HDR-NeRF scene folder (module docstring); InputError naming what is wrong.

    Checks, before any pixel is read: both transforms and exposure files (valid JSON, the fields
    used), a finite 4x4 rigid ``transform_matrix`` per frame, camera_angle_x in (0, pi), every
    frame's images (PNG headers, one size for the scene), its exposure times (> 0 s), an HDR file
    for every test view. EXR contents are read (and checked) when used."""
    d = Path(folder)
    if not d.is_dir():
        raise InputError(f"HDR-NeRF scene folder {str(folder)!r} does not exist or is not a folder")
    if (d / LLFF_POSES).is_file() and not any((d / f"transforms_{s}.json").is_file() for s in SPLITS):
        from icml26.core.data.hdr_nerf_llff import read_llff

        return read_llff(d)
    frames: dict[str, list] = {}
    size = None
    views: dict[str, list] = {s: [] for s in SPLITS}
    for s in SPLITS:
        tr, ex, fov = _split_files(d, s)
        frames[s] = tr["frames"]
        for j, fr in enumerate(tr["frames"]):
            fp, m = _frame_pose(d, s, j, fr)
            exps = _frame_exposures(d, s, j, fp, ex)
            size = _check_images(d, s, exps, size)
            c2w = m.copy()
            c2w[:3, 1:3] *= -1.0  # Blender camera axes (y up, z backward) -> OpenCV (y down, z forward)
            hdr = _frame_hdr(d, s, j, fp)
            views[s].append((fov, c2w, exps, hdr, f"{s}:{fp}"))
    from icml26.core.data.renders import Camera

    seen: dict[str, int] = {}
    for s in SPLITS:
        for v in views[s]:
            seen[Path(v[4].split(":", 1)[1]).name] = seen.get(Path(v[4].split(":", 1)[1]).name, 0) + 1
    dup = [n for n, c in seen.items() if c > 1 and (d / "exr" / f"{n}.exr").is_file()]
    if dup:
        raise InputError(
            f"HDR-NeRF scene {str(d)!r}: exr/{dup[0]}.exr is ambiguous: {seen[dup[0]]} frames are named {dup[0]!r}"
        )
    w, h = size
    order = []
    for k in range(max(len(views["train"]), len(views["test"]))):
        for s in SPLITS:
            if k < len(views[s]):
                order.append((s, views[s][k]))
    cams, ldr_files, hdr_files, names, train, test = [], {}, {}, [], [], []
    for i, (s, (fov, c2w, exps, hdr, name)) in enumerate(order):
        fx = 0.5 * w / math.tan(0.5 * fov)
        K = np.array([[fx, 0.0, w / 2.0], [0.0, fx, h / 2.0], [0.0, 0.0, 1.0]])
        cams.append(Camera(w, h, K, c2w))
        for t, p in exps.items():
            ldr_files[(i, float(t))] = p
        if hdr is not None:
            hdr_files[i] = hdr
        names.append(name)
        (train if s == "train" else test).append(i)
    common = set.intersection(*[{t for (v, t) in ldr_files if v == i} for i in range(len(cams))])
    return HdrNerfScene(
        d,
        tuple(cams),
        {"source": "HDR-NeRF layout", "objects": []},
        tuple(sorted(common)),
        tuple(train),
        tuple(test),
        ldr_files,
        hdr_files,
        tuple(names),
    )
