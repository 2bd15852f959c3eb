"""Rendered multi-view scenes: one folder per scene, written and read in one layout, and
the POV-Ray runner that makes them (Debian ``povray``; offline).

Layout of a scene folder (views numbered ``NNN`` from 000)::

    cameras.json        {"width", "height", "convention", "views": [{"index", "K", "c2w", "exposure_s"}]}
    scene.json          {"units", "up", "objects": [{"id", "class", "size", "position", ...}], ...}
    rgb/NNN.png         8-bit LDR image (the camera response below at exposure 1)
    hdr/NNN.hdr         linear radiance, Radiance RGBE (POV-Ray ``+FH``), when rendered in HDR
    ldr/<exposure>/NNN.png  LDR images synthesized from the HDR at exposure time <exposure> s
    depth/NNN.npy       float32 (H, W) z-depth along the optical axis (metres); inf = no hit
    instances/NNN.png   8-bit object ids (0 = room structure / background), when asked

Conventions: world right-handed, metres, y up; cameras in OpenCV axes (x right, y down, z
forward), pixel centre of column u at u + 0.5. POV-Ray is left-handed: points go to it as
(x, y, -z). LDR synthesis (RECON; HDR-NeRF's synthetic data use Blender's filmic response):
``ldr = round(255 * clip(E * t, 0, 1) ** (1 / 2.2))`` (:func:`camera_response`), at HDR-NeRF's
five exposure times :data:`HDR_NERF_EXPOSURES_S` (0.125, 0.5, 2, 8, 32 s). Depth and instance
ids come from a second, unlit 16-bit pass (exact within 1/65535 of ``depth_max_m``). HDR-NeRF's
own layouts are read by ``hdr_nerf.py`` / ``hdr_nerf_llff.py`` into the same interface.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from icml26.core.errors import InputError, MissingDataError

POVRAY_INSTALL = "apt-get install -y povray povray-examples"
HDR_NERF_EXPOSURES_S = (0.125, 0.5, 2.0, 8.0, 32.0)
CAMERA_GAMMA = 2.2
CONVENTION = "world right-handed y-up metres; camera OpenCV (x right, y down, z forward); c2w camera-to-world"


# --------------------------------------------------------------------------- POV-Ray runner


def povray_path() -> str | None:
    """The ``povray`` executable on PATH (``$ICML26_POVRAY`` overrides), or None."""
    exe = os.environ.get("ICML26_POVRAY")
    if exe is not None:
        return exe if exe and Path(exe).is_file() and os.access(exe, os.X_OK) else None
    return shutil.which("povray")


def povray_missing_message() -> str:
    return f"POV-Ray (povray) is not installed: run `make data` as root (or `{POVRAY_INSTALL}`)"


def require_povray() -> str:
    """The povray executable; MissingDataError (exit 2) naming the install command otherwise."""
    exe = povray_path()
    if exe is None:
        raise MissingDataError(povray_missing_message())
    return exe


def run_povray(
    pov_file: Path,
    out_base: Path,
    *,
    width: int,
    height: int,
    fmt: str,
    frames: int = 1,
    extra: Sequence[str] = (),
    timeout_s: float = 600.0,
) -> list[Path]:
    """Render ``pov_file`` with POV-Ray, one image per frame (``frame_number`` 0..frames-1).

    fmt: ``"hdr"`` (+FH Radiance), ``"ppm16"`` (+FP16, File_Gamma 1.0: exact 16-bit values), ``"png"``.
    Returns the output files in frame order. Raises MissingDataError without povray,
    RuntimeError (with POV-Ray's last lines) when it fails. One render thread (+WT1)."""
    exe = require_povray()
    flags = {"hdr": ["+FH"], "ppm16": ["+FP16", "File_Gamma=1.0"], "png": ["+FN8"]}[fmt]
    ext = {"hdr": ".hdr", "ppm16": ".ppm", "png": ".png"}[fmt]
    out_base.parent.mkdir(parents=True, exist_ok=True)
    cmd = [
        exe,
        "-D",
        "-V",
        "-GA",
        "+WT1",
        f"+W{width}",
        f"+H{height}",
        *flags,
        f"+I{pov_file}",
        f"+O{out_base}{ext}",
        f"+L{pov_file.parent}",
        *extra,
    ]
    if frames > 1:
        cmd += ["+KFI0", f"+KFF{frames - 1}"]
    env = dict(os.environ, HOME=str(pov_file.parent))  # POV-Ray looks for ~/.povray; keep it in the work folder
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
    if frames == 1:
        files = [out_base.with_name(out_base.name + ext)]
    else:
        files = sorted(
            out_base.parent.glob(out_base.name + "*" + ext), key=lambda q: int(q.stem[len(out_base.name) :] or 0)
        )
    if p.returncode != 0 or len(files) != frames or not all(f.is_file() for f in files):
        tail = " | ".join((p.stderr or p.stdout).strip().splitlines()[-4:])
        raise RuntimeError(f"povray failed (exit {p.returncode}) on {pov_file.name}: {tail}")
    return files


# --------------------------------------------------------------------------- cameras


@dataclass(frozen=True)
class Camera:
    """A pinhole view. K: (3, 3) pixels; c2w: (4, 4) camera-to-world (OpenCV axes)."""

    width: int
    height: int
    K: np.ndarray
    c2w: np.ndarray
    exposure_s: float | None = None

    def to_json(self, index: int) -> dict:
        d = {"index": index, "K": np.asarray(self.K, float).tolist(), "c2w": np.asarray(self.c2w, float).tolist()}
        if self.exposure_s is not None:
            d["exposure_s"] = float(self.exposure_s)
        return d


def intrinsics(width: int, height: int, hfov_deg: float) -> np.ndarray:
    """K (3, 3) of a centred pinhole with horizontal field of view ``hfov_deg`` and square pixels."""
    fx = 0.5 * width / np.tan(np.radians(hfov_deg) / 2)
    return np.array([[fx, 0.0, width / 2], [0.0, fx, height / 2], [0.0, 0.0, 1.0]])


def look_at(eye, target, up=(0.0, 1.0, 0.0)) -> np.ndarray:
    """Camera-to-world (4, 4), OpenCV axes, at ``eye`` looking at ``target`` (world, y up)."""
    eye, target, up = (np.asarray(v, float) for v in (eye, target, up))
    f = target - eye
    f /= np.linalg.norm(f)
    r = np.cross(f, up)  # right-handed world: forward x up = right
    if np.linalg.norm(r) < 1e-9:
        raise ValueError("look_at: view direction parallel to up")
    r /= np.linalg.norm(r)
    d = np.cross(f, r)  # image y (down)
    m = np.eye(4)
    m[:3, 0], m[:3, 1], m[:3, 2], m[:3, 3] = r, d, f, eye
    return m


def pov_vec(v) -> str:
    """A world point/vector as POV-Ray's left-handed <x, y, -z>."""
    x, y, z = (float(a) for a in v)
    return f"<{x:.9g}, {y:.9g}, {-z:.9g}>"


def pov_camera(cam: Camera) -> str:
    """The POV-Ray camera block that reproduces ``cam`` exactly (pinhole, principal point at centre)."""
    K, m = np.asarray(cam.K, float), np.asarray(cam.c2w, float)
    if abs(K[0, 2] - cam.width / 2) > 1e-6 or abs(K[1, 2] - cam.height / 2) > 1e-6 or abs(K[0, 1]) > 1e-12:
        raise ValueError("pov_camera: only a centred principal point without skew is supported")
    r, d, f, c = m[:3, 0], m[:3, 1], m[:3, 2], m[:3, 3]
    right = r * (cam.width / K[0, 0])
    up = -d * (cam.height / K[1, 1])
    return (
        f"camera {{ perspective location {pov_vec(c)} direction {pov_vec(f)} right {pov_vec(right)} up {pov_vec(up)} }}"
    )


# --------------------------------------------------------------------------- HDR / LDR


def write_hdr(path: str | Path, image: np.ndarray) -> Path:
    """Write a float (H, W, 3) linear image as Radiance RGBE (flat scanlines). Atomic."""
    from icml26.core.output import atomic_write_bytes

    a = np.asarray(image, dtype=np.float64)
    if a.ndim != 3 or a.shape[2] != 3:
        raise ValueError(f"write_hdr: expected (H, W, 3), got {a.shape}")
    a = np.clip(np.nan_to_num(a, nan=0.0, posinf=0.0), 0.0, None)
    h, w, _ = a.shape
    mx = a.max(axis=2)
    mant, ex = np.frexp(mx)  # mx = mant * 2**ex, mant in [0.5, 1)
    scale = np.where(mx > 1e-32, mant * 256.0 / np.where(mx > 1e-32, mx, 1.0), 0.0)
    rgbe = np.zeros((h, w, 4), np.uint8)
    rgbe[..., :3] = np.clip(np.floor(a * scale[..., None]), 0, 255).astype(np.uint8)
    rgbe[..., 3] = np.where(mx > 1e-32, ex + 128, 0).astype(np.uint8)
    head = f"#?RADIANCE\nFORMAT=32-bit_rle_rgbe\n\n-Y {h} +X {w}\n".encode()
    return atomic_write_bytes(path, head + rgbe.tobytes())


def read_hdr(path: str | Path) -> np.ndarray:
    """Read a Radiance .hdr (RGBE, flat or run-length encoded, ``-Y H +X W``) as float32 (H, W, 3).

    Raises InputError on a file that is not one."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as e:
        raise InputError(f"HDR image {str(path)!r}: cannot read ({e.strerror or e})") from None
    if not data.startswith(b"#?"):
        raise InputError(f"HDR image {str(path)!r}: not a Radiance file (no #? header)")
    end = data.find(b"\n\n")
    if end < 0:
        raise InputError(f"HDR image {str(path)!r}: header not terminated")
    pos = data.find(b"\n", end + 2)
    res = data[end + 2 : pos].split()
    if len(res) != 4 or res[0] != b"-Y" or res[2] != b"+X":
        raise InputError(f"HDR image {str(path)!r}: unsupported resolution line {data[end + 2 : pos]!r}")
    h, w = int(res[1]), int(res[3])
    buf = np.frombuffer(data, np.uint8, offset=pos + 1)
    out = np.empty((h, w, 4), np.uint8)
    i = 0
    try:
        for y in range(h):
            if 8 <= w < 32768 and buf[i] == 2 and buf[i + 1] == 2 and (int(buf[i + 2]) << 8 | int(buf[i + 3])) == w:
                i += 4
                for c in range(4):
                    x = 0
                    while x < w:
                        n = int(buf[i])
                        i += 1
                        if n > 128:
                            n -= 128
                            out[y, x : x + n, c] = buf[i]
                            i += 1
                        else:
                            out[y, x : x + n, c] = buf[i : i + n]
                            i += n
                        x += n
            else:
                out[y] = buf[i : i + 4 * w].reshape(w, 4)
                i += 4 * w
    except (IndexError, ValueError):
        raise InputError(f"HDR image {str(path)!r}: truncated or corrupt pixel data") from None
    e = out[..., 3].astype(np.int32)
    f = np.where(e > 0, np.ldexp(1.0, e - 136), 0.0)  # 2**(e-128) / 256
    return ((out[..., :3].astype(np.float64) + 0.5) * f[..., None] * (e[..., None] > 0)).astype(np.float32)


def read_ppm16(path: str | Path) -> np.ndarray:
    """A binary PPM (P6) with maxval 65535 (POV-Ray ``+FP16``) as float64 (H, W, 3) in [0, 65535]."""
    data = Path(path).read_bytes()
    toks, pos = [], 0
    while len(toks) < 4:  # magic, width, height, maxval (comments skipped)
        while data[pos : pos + 1].isspace():
            pos += 1
        if data[pos : pos + 1] == b"#":
            pos = data.index(b"\n", pos) + 1
            continue
        end = pos
        while not data[end : end + 1].isspace():
            end += 1
        toks.append(data[pos:end])
        pos = end
    pos += 1
    if toks[0] != b"P6":
        raise RuntimeError(f"{Path(path).name}: not a binary PPM")
    w, h, mx = int(toks[1]), int(toks[2]), int(toks[3])
    dt = ">u2" if mx > 255 else "u1"
    a = np.frombuffer(data, dt, count=w * h * 3, offset=pos).reshape(h, w, 3).astype(np.float64)
    return a * (65535.0 / mx)


def camera_response(irradiance: np.ndarray, exposure_s: float) -> np.ndarray:
    """LDR uint8 from linear irradiance and exposure time (module docstring): gamma 1/2.2 on clip(E t, 0, 1)."""
    x = np.clip(np.asarray(irradiance, np.float64) * float(exposure_s), 0.0, 1.0)
    return np.round(255.0 * x ** (1.0 / CAMERA_GAMMA)).astype(np.uint8)


def inverse_camera_response(ldr: np.ndarray, exposure_s: float) -> np.ndarray:
    """Irradiance (float32) from an LDR uint8 image; exact up to 8-bit rounding where 0 < ldr < 255."""
    return ((np.asarray(ldr, np.float64) / 255.0) ** CAMERA_GAMMA / float(exposure_s)).astype(np.float32)


def synthesize_ldr(hdr: np.ndarray, exposures_s: Sequence[float] = HDR_NERF_EXPOSURES_S) -> dict[float, np.ndarray]:
    """{exposure_s: uint8 (H, W, 3)} from one HDR image by :func:`camera_response`."""
    return {float(t): camera_response(hdr, t) for t in exposures_s}


def exposure_name(t: float) -> str:
    """Folder name of exposure ``t`` under ``ldr/`` (``0.125``, ``2``, ``32``)."""
    return f"{float(t):g}"


# --------------------------------------------------------------------------- POV-Ray scene rendering


@dataclass(frozen=True)
class PovObject:
    """One object of a scene: an SDL shape without texture (``box {...}``, ``union {...}``), its
    texture for the beauty pass and its instance id (0 = room structure)."""

    shape: str
    texture: str
    instance_id: int = 0


@dataclass
class RenderResult:
    rgb: list[np.ndarray]
    hdr: list[np.ndarray] | None
    depth: list[np.ndarray] | None
    instances: list[np.ndarray] | None
    ldr: dict[float, list[np.ndarray]] = field(default_factory=dict)


def _cam_arrays(cams: Sequence[Camera]) -> str:
    n = len(cams)
    parts = []
    for name, fn in (
        ("Loc", lambda c: c.c2w[:3, 3]),
        ("Dir", lambda c: c.c2w[:3, 2]),
        ("Rgt", lambda c: c.c2w[:3, 0] * (c.width / c.K[0, 0])),
        ("Up", lambda c: -c.c2w[:3, 1] * (c.height / c.K[1, 1])),
    ):
        parts.append(f"#declare Cam{name} = array[{n}] {{ " + ", ".join(pov_vec(fn(c)) for c in cams) + " }")
    return "\n".join(parts) + (
        "\ncamera { perspective location CamLoc[frame_number] direction CamDir[frame_number] "
        "right CamRgt[frame_number] up CamUp[frame_number] }\n"
    )


def render_scene(
    objects: Sequence[PovObject],
    cameras: Sequence[Camera],
    *,
    lights: str,
    depth_max_m: float = 32.0,
    hdr: bool = True,
    aux: bool = True,
    exposures_s: Sequence[float] = (),
    work_dir: str | Path | None = None,
    antialias: bool = False,
) -> RenderResult:
    """Render every camera of one scene with POV-Ray: a beauty pass (HDR ``+FH`` when ``hdr``,
    else 8-bit PNG) and, with ``aux``, the depth/instance pass (module docstring).

    cameras: same width/height, centred principal point. lights: SDL light sources (and any
    global settings). Returns images in camera order: rgb uint8 (H, W, 3) (the camera response
    at exposure 1 when HDR), hdr float32 (H, W, 3), depth float32 (H, W) metres, instances
    uint8 (H, W), and LDR images at ``exposures_s``. Raises MissingDataError without povray."""
    require_povray()
    if not cameras:
        raise ValueError("render_scene: no cameras")
    w, h = cameras[0].width, cameras[0].height
    if any(c.width != w or c.height != h for c in cameras):
        raise ValueError("render_scene: all cameras must share width and height")
    for c in cameras:
        pov_camera(c)  # validates the intrinsics
    ids = [o.instance_id for o in objects]
    if any(not 0 <= i <= 255 for i in ids):
        raise ValueError("render_scene: instance ids must be in [0, 255]")
    tmp = Path(tempfile.mkdtemp(prefix="icml26-pov-", dir=work_dir))
    try:
        head = "#version 3.7;\nglobal_settings { assumed_gamma 1.0 max_trace_level 5 }\n" + _cam_arrays(cameras)
        beauty = head + lights + "\n" + "\n".join(f"object {{ {o.shape} texture {{ {o.texture} }} }}" for o in objects)
        (tmp / "beauty.pov").write_text(beauty)
        aa = ["+A0.1", "+AM2", "+R2"] if antialias else ["-A"]
        files = run_povray(
            tmp / "beauty.pov", tmp / "b", width=w, height=h, fmt="hdr" if hdr else "png", frames=len(cameras), extra=aa
        )
        if hdr:
            hdrs = [read_hdr(f) for f in files]
            rgbs = [camera_response(x, 1.0) for x in hdrs]
        else:
            from PIL import Image

            hdrs = None
            rgbs = [np.asarray(Image.open(f).convert("RGB")) for f in files]
        depth = inst = None
        if aux:
            fwd = "\n".join(f"#declare CamFwd{i} = {pov_vec(c.c2w[:3, 2])};" for i, c in enumerate(cameras))
            lines = [
                head,
                "background { rgb <1, 0, 0> }",
                fwd,
                "#declare CF = array[%d] { %s }" % (len(cameras), ", ".join(f"CamFwd{i}" for i in range(len(cameras)))),
                "#declare CL = CamLoc[frame_number]; #declare F = CF[frame_number];",
                "#declare CLx = CL.x; #declare CLy = CL.y; #declare CLz = CL.z; "
                "#declare Fx = F.x; #declare Fy = F.y; #declare Fz = F.z;",
                f"#declare DepthFn = function {{ min(max(((x - CLx) * Fx + (y - CLy) * Fy + (z - CLz) * Fz) / "
                f"{depth_max_m:.9g}, 0), 1) }}",
            ]
            for o in objects:
                lines.append(
                    f"object {{ {o.shape} texture {{ pigment {{ average pigment_map {{ "
                    f"[1 function {{ DepthFn(x, y, z) }} color_map {{ [0 rgb 0] [1 rgb <1, 0, 0>] }}] "
                    f"[1 color rgb <0, {o.instance_id / 255.0:.9g}, 0>] }} }} finish {{ ambient 1 diffuse 0 "
                    f"specular 0 }} }} "
                    f"no_shadow }}"
                )
            (tmp / "aux.pov").write_text("\n".join(lines))
            afiles = run_povray(
                tmp / "aux.pov", tmp / "a", width=w, height=h, fmt="ppm16", frames=len(cameras), extra=["-A"]
            )
            depth, inst = [], []
            for f in afiles:
                a = read_ppm16(f) / 65535.0 * 2.0  # average of two pigments: each channel halved
                dm = np.where(
                    a[..., 0] > 1.0 - 1e-4, np.inf, a[..., 0] * depth_max_m
                )  # background or >= depth_max_m: no hit
                depth.append(dm.astype(np.float32))
                inst.append(np.clip(np.round(a[..., 1] * 255.0), 0, 255).astype(np.uint8))
        ldr = {float(t): [camera_response(x, t) for x in hdrs] for t in exposures_s} if hdrs is not None else {}
        return RenderResult(rgb=rgbs, hdr=hdrs, depth=depth, instances=inst, ldr=ldr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# --------------------------------------------------------------------------- layout writer / reader


def _png_bytes(a: np.ndarray) -> bytes:
    import io

    from PIL import Image

    b = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(a)).save(b, format="PNG")
    return b.getvalue()


def _npy_bytes(a: np.ndarray) -> bytes:
    import io

    b = io.BytesIO()
    np.save(b, np.ascontiguousarray(a, dtype=np.float32), allow_pickle=False)
    return b.getvalue()


def write_scene(folder: str | Path, cameras: Sequence[Camera], scene: dict, result: RenderResult) -> Path:
    """Write one scene folder in the layout of the module docstring (every file atomic)."""
    from icml26.core.output import atomic_write_bytes, atomic_write_text

    d = Path(folder)
    n = len(cameras)
    if len(result.rgb) != n:
        raise ValueError(f"write_scene: {len(result.rgb)} images for {n} cameras")
    for i in range(n):
        atomic_write_bytes(d / "rgb" / f"{i:03d}.png", _png_bytes(result.rgb[i]))
        if result.hdr is not None:
            write_hdr(d / "hdr" / f"{i:03d}.hdr", result.hdr[i])
        if result.depth is not None:
            atomic_write_bytes(d / "depth" / f"{i:03d}.npy", _npy_bytes(result.depth[i]))
        if result.instances is not None:
            atomic_write_bytes(d / "instances" / f"{i:03d}.png", _png_bytes(result.instances[i]))
        for t, imgs in result.ldr.items():
            atomic_write_bytes(d / "ldr" / exposure_name(t) / f"{i:03d}.png", _png_bytes(imgs[i]))
    cams = {
        "width": cameras[0].width,
        "height": cameras[0].height,
        "convention": CONVENTION,
        "ldr_exposures_s": sorted(result.ldr),
        "camera_response": f"round(255*clip(E*t,0,1)**(1/{CAMERA_GAMMA}))",
        "views": [c.to_json(i) for i, c in enumerate(cameras)],
    }
    atomic_write_text(d / "scene.json", json.dumps(scene, indent=1))
    atomic_write_text(d / "cameras.json", json.dumps(cams, indent=1))  # last: marks a complete folder
    return d


@dataclass(frozen=True)
class RenderedScene:
    """A scene folder (read lazily). ``cameras``: list of :class:`Camera`; ``scene``: scene.json."""

    folder: Path
    cameras: tuple
    scene: dict
    ldr_exposures_s: tuple

    def __len__(self) -> int:
        return len(self.cameras)

    def _file(self, sub: str, i: int, ext: str) -> Path:
        if not 0 <= i < len(self.cameras):
            raise IndexError(f"view {i} out of range 0..{len(self.cameras) - 1}")
        p = self.folder / sub / f"{i:03d}{ext}"
        if not p.is_file():
            raise InputError(f"scene {str(self.folder)!r}: missing {sub}/{i:03d}{ext}")
        return p

    def _png(self, sub: str, i: int, mode: str | None) -> np.ndarray:
        """One PNG of the folder as an array; InputError naming the file when it is not a readable PNG."""
        from PIL import Image

        p = self._file(sub, i, ".png")
        try:
            with Image.open(p) as im:
                return np.asarray(im.convert(mode) if mode else im.copy())
        except (OSError, ValueError, SyntaxError) as e:
            raise InputError(f"scene {str(self.folder)!r}: {sub}/{i:03d}.png is not a readable PNG ({e})") from None

    def rgb(self, i: int) -> np.ndarray:
        return self._png("rgb", i, "RGB")

    def hdr(self, i: int) -> np.ndarray:
        return read_hdr(self._file("hdr", i, ".hdr"))

    def ldr(self, exposure_s: float, i: int) -> np.ndarray:
        return self._png(f"ldr/{exposure_name(exposure_s)}", i, "RGB")

    def depth(self, i: int) -> np.ndarray:
        try:
            a = np.load(self._file("depth", i, ".npy"), allow_pickle=False)
        except (OSError, ValueError, EOFError) as e:
            raise InputError(
                f"scene {str(self.folder)!r}: depth/{i:03d}.npy is not a readable .npy file ({e})"
            ) from None
        if a.ndim != 2:
            raise InputError(f"scene {str(self.folder)!r}: depth/{i:03d}.npy is not (H, W)")
        return a.astype(np.float32)

    def instances(self, i: int) -> np.ndarray:
        return self._png("instances", i, None)

    def has(self, what: str) -> bool:
        return (
            (self.folder / what / "000")
            .with_suffix({"rgb": ".png", "hdr": ".hdr", "depth": ".npy", "instances": ".png"}[what])
            .is_file()
        )


def read_scene(folder: str | Path) -> RenderedScene:
    """Read a scene folder's cameras and scene description; InputError naming what is wrong."""
    d = Path(folder)
    if not d.is_dir():
        raise InputError(f"scene folder {str(folder)!r} does not exist or is not a folder")
    try:
        cams = json.loads((d / "cameras.json").read_text(encoding="utf-8"))
        scene = json.loads((d / "scene.json").read_text(encoding="utf-8"))
    except FileNotFoundError as e:
        raise InputError(f"scene folder {str(folder)!r}: missing {Path(e.filename).name}") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise InputError(f"scene folder {str(folder)!r}: cameras.json/scene.json is not valid JSON ({e})") from None
    try:
        w, h = int(cams["width"]), int(cams["height"])
        views = [
            Camera(
                w,
                h,
                np.asarray(v["K"], float).reshape(3, 3),
                np.asarray(v["c2w"], float).reshape(4, 4),
                float(v["exposure_s"]) if v.get("exposure_s") is not None else None,
            )
            for v in sorted(cams["views"], key=lambda v: int(v["index"]))
        ]
    except (KeyError, TypeError, ValueError) as e:
        raise InputError(f"scene folder {str(folder)!r}: cameras.json lacks or mangles a field ({e})") from None
    if not views:
        raise InputError(f"scene folder {str(folder)!r}: cameras.json has no views")
    return RenderedScene(d, tuple(views), scene, tuple(float(t) for t in cams.get("ldr_exposures_s", ())))


def backproject(depth: np.ndarray, cam: Camera, stride: int = 1) -> np.ndarray:
    """World points (H', W', 3) of a z-depth map seen by ``cam`` (pixel centres; every ``stride``-th pixel)."""
    h, w = depth.shape
    v, u = np.mgrid[0:h:stride, 0:w:stride].astype(np.float64) + 0.5
    z = depth[::stride, ::stride].astype(np.float64)
    K = cam.K
    x = (u - K[0, 2]) / K[0, 0] * z
    y = (v - K[1, 2]) / K[1, 1] * z
    pc = np.stack([x, y, z], -1)
    return pc @ cam.c2w[:3, :3].T + cam.c2w[:3, 3]


def project(points: np.ndarray, cam: Camera) -> tuple[np.ndarray, np.ndarray]:
    """Pixel coordinates (N, 2) (continuous, centre of column u at u + 0.5) and z-depth (N,) of world points."""
    w2c = np.linalg.inv(cam.c2w)
    pc = np.asarray(points, float) @ w2c[:3, :3].T + w2c[:3, 3]
    z = pc[:, 2]
    uv = (pc[:, :2] / z[:, None]) * np.array([cam.K[0, 0], cam.K[1, 1]]) + np.array([cam.K[0, 2], cam.K[1, 2]])
    return uv, z
