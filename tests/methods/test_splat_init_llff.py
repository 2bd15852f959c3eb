"""hdr-gs on folders without depth: HDR-NeRF's real (LLFF-style) layout read from files written as
the dataset ships them, SfM point files (COLMAP txt / bin, PLY), initial points in the region the
cameras see, the trained Gaussians as an INRIA 3DGS .ply read back, divergence reported."""

import json
import math
import struct

import numpy as np
import pytest
from typer.testing import CliRunner

from icml26.cli import app
from icml26.core.data import hdr_nerf as HN
from icml26.core.data import renders as R
from icml26.methods.splatting import hdr_gs as H
from icml26.methods.splatting import initial as I
from icml26.methods.splatting.ply import read_vertices

pytest.importorskip("OpenEXR", reason="pip install 'icml26[splatting]' (PyPI openexr)")
EXPS = (0.125, 0.5, 2.0, 8.0, 32.0)
W, H_ = 20, 14


def _ring(n=6, r=3.0):
    return [
        R.look_at((r * math.sin(2 * math.pi * j / n), 0.6, r * math.cos(2 * math.pi * j / n)), (0, 0, 0))
        for j in range(n)
    ]


def write_llff(d, c2ws, *, near=1.0, far=6.0, focal=None):
    """A real-scene folder as HDR-NeRF ships it: input_images/<view>_<k>.png and a (views x 5, 18)
    poses_bounds_exps.npy whose 3x5 matrices are LLFF's [down, right, back | hwf]."""
    from PIL import Image

    (d / "input_images").mkdir(parents=True, exist_ok=True)
    K = R.intrinsics(W, H_, 60.0)
    f = K[0, 0] if focal is None else focal
    rows, imgs = [], {}
    for v, c in enumerate(c2ws):
        P = np.zeros((3, 5))
        P[:, 0], P[:, 1], P[:, 2], P[:, 3] = c[:3, 1], c[:3, 0], -c[:3, 2], c[:3, 3]
        P[:, 4] = [H_ * 2, W * 2, 2 * f]  # hwf of the full-resolution images; stored at half size
        u = np.linspace(0, 1, W)[None, :, None] * np.ones((H_, 1, 3))
        for k, t in enumerate(EXPS):
            img = R.camera_response((0.02 + u * (1 + 0.1 * v)).astype(np.float32), t)
            imgs[(v, t)] = img
            Image.fromarray(img).save(d / "input_images" / f"{v:03d}_{k}.png")
            rows.append(np.concatenate([P.reshape(-1), [near + 0.1 * v, far, t]]))
    np.save(d / "poses_bounds_exps.npy", np.asarray(rows))
    return imgs, f


def test_llff_reader_axes_focal_exposures_and_split(tmp_path):
    c2ws = _ring()
    imgs, f = write_llff(tmp_path / "flower", c2ws)
    s = HN.read_hdr_nerf(tmp_path / "flower")
    assert len(s) == 6 and s.ldr_exposures_s == EXPS and s.train_views == (0, 2, 4) and s.test_views == (1, 3, 5)
    for c, want in zip(s.cameras, c2ws):
        np.testing.assert_allclose(c.c2w, want, atol=1e-12)  # LLFF [down, right, back] -> OpenCV
        assert c.K[0, 0] == pytest.approx(f) and (c.width, c.height) == (W, H_)  # focal x 20 / 40
    np.testing.assert_array_equal(s.ldr(8.0, 3), imgs[(3, 8.0)])
    assert s.bounds == (1.0, 6.0) and not s.has("hdr_any")
    sd = H.load_scene(tmp_path / "flower", H.Config(init_points=200))
    assert sd.hdr == {} and sd.bounds == (1.0, 6.0)


def test_llff_bad_files_are_input_errors(tmp_path):
    from icml26.core.errors import InputError

    write_llff(tmp_path / "a", _ring(4))
    np.save(tmp_path / "a" / "poses_bounds_exps.npy", np.zeros((20, 17)))
    with pytest.raises(InputError, match=r"\(images, 18\)"):
        HN.read_hdr_nerf(tmp_path / "a")
    write_llff(tmp_path / "b", _ring(4))
    (tmp_path / "b" / "input_images" / "003_4.png").unlink()
    with pytest.raises(InputError, match="19 images"):
        HN.read_hdr_nerf(tmp_path / "b")


def test_frusta_init_inward_and_forward_facing():
    rng = np.random.default_rng(0)
    K = R.intrinsics(W, H_, 60.0)
    # inward-facing ring: the axes meet at the origin
    cams = [R.Camera(W, H_, K, c) for c in _ring(8)]
    np.testing.assert_allclose(I.focus_point(cams), [0, 0, 0], atol=1e-9)
    imgs = [np.zeros((H_, W, 3), np.float32) for _ in cams]
    p = I.frustum_points(cams, imgs, 300, rng)
    seen = np.stack([I._inside(p, c) for c in cams]).sum(0)
    assert len(p) == 300 and (seen >= 4).all()  # in at least half of the frusta
    assert np.linalg.norm(p, axis=1).max() < 3.0  # none behind the ring
    # forward-facing (LLFF-style): parallel axes, depths between the folder's bounds
    fw = [R.Camera(W, H_, K, R.look_at((0.1 * j, 0, 0), (0.1 * j, 0, -5))) for j in range(5)]
    p = I.frustum_points(fw, [np.zeros((H_, W, 3), np.float32)] * 5, 200, rng, bounds=(2.0, 8.0))
    z = -p[:, 2]
    assert len(p) == 200 and z.min() >= 2.0 - 1e-9 and z.max() <= 8.0 + 1e-9


def _colmap_bin(path, xyz):
    b = struct.pack("<Q", len(xyz))
    for k, p in enumerate(xyz):
        b += struct.pack("<Q3d3Bd", k + 1, *p, 10, 20, 30, 0.5)
        b += struct.pack("<Q", 2) + struct.pack("<2i", 1, 7) + struct.pack("<2i", 2, 9)
    path.write_bytes(b)


def test_sfm_point_files(tmp_path):
    xyz = np.random.default_rng(1).normal(size=(7, 3))
    (tmp_path / "points3D.txt").write_text(
        "# 3D point list\n" + "".join(f"{k + 1} {x} {y} {z} 1 2 3 0.1 1 2\n" for k, (x, y, z) in enumerate(xyz))
    )
    _colmap_bin(tmp_path / "points3D.bin", xyz)
    (tmp_path / "a.ply").write_text(
        "ply\nformat ascii 1.0\nelement vertex 7\nproperty float x\nproperty float y\nproperty float z\n"
        "property uchar red\nproperty uchar green\nproperty uchar blue\nend_header\n"
        + "".join(f"{x} {y} {z} 1 2 3\n" for x, y, z in xyz)
    )
    for name in ("points3D.txt", "points3D.bin"):
        np.testing.assert_allclose(I.read_points(tmp_path / name), xyz, atol=1e-12)
    np.testing.assert_allclose(I.read_points(tmp_path / "a.ply"), xyz, atol=1e-6)


def test_sfm_points_initialise_an_llff_folder(tmp_path):
    d = tmp_path / "room"
    write_llff(d, _ring())
    pts = np.random.default_rng(2).uniform(-0.5, 0.5, (300, 3))
    (d / "sparse" / "0").mkdir(parents=True)
    _colmap_bin(d / "sparse" / "0" / "points3D.bin", pts)
    cfg = H.Config(init_points=100)
    sd = H.load_scene(d, cfg)
    p = H.init_points(sd, cfg, np.random.default_rng(0))
    assert sd.init_source == "sfm" and len(p) == 100
    assert (np.abs(p[:, None] - pts[None]).sum(2).min(1) < 1e-12).all()  # points of the file
    sd.points = pts + 100.0  # another world frame: not used
    H.init_points(sd, cfg, np.random.default_rng(0))
    assert sd.init_source == "frusta"


def test_train_on_llff_exports_a_3dgs_ply(tmp_path):
    """Training on the real-scene layout reports LDR metrics only and writes the Gaussians as an
    INRIA 3DGS .ply beside the checkpoint; read back, it holds the checkpoint's Gaussians."""
    write_llff(tmp_path / "scenes" / "flower", _ring())
    out = tmp_path / "run"
    args = ["hdr-gs", "train", "--data", str(tmp_path / "scenes"), "--method", "hdr-gs", "--iters", "8", "-q"]
    args += ["--out", str(out), "--set", "init_points=60", "--set", "max_gaussians=200"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, (r.output, r.exception)
    res = [json.loads(x) for x in r.stdout.splitlines() if x.startswith('{"kind": "result"')][0]
    assert res["psnr_hdr"] is None and 3 < res["psnr_ldr_oe"] < 60 and res["init"] == "frusta"
    assert res["diverged"] is False
    v = read_vertices(res["ply"])
    names = ["x", "y", "z", "nx", "ny", "nz", "f_dc_0", "f_dc_1", "f_dc_2"] + [f"f_rest_{i}" for i in range(45)]
    names += ["opacity", "scale_0", "scale_1", "scale_2", "rot_0", "rot_1", "rot_2", "rot_3"]
    assert list(v) == names
    m, _ = H.load_ckpt(res["ckpt"])
    np.testing.assert_allclose(np.stack([v["x"], v["y"], v["z"]], 1), m.p["means"].detach().numpy(), rtol=1e-6)
    np.testing.assert_allclose(v["opacity"], m.p["logit_opacity"].detach().numpy(), rtol=1e-6)
    q = np.stack([v[f"rot_{i}"] for i in range(4)], 1)
    np.testing.assert_allclose(np.linalg.norm(q, axis=1), 1.0, atol=1e-6)
    rgb = 0.5 + 0.28209479177387814 * np.stack([v[f"f_dc_{i}"] for i in range(3)], 1)
    assert rgb.min() >= -1e-6 and rgb.max() <= 1 + 1e-6


def test_exploding_learning_rates_are_reported_as_diverged(tmp_path):
    write_llff(tmp_path / "scenes" / "flower", _ring())
    args = ["hdr-gs", "train", "--data", str(tmp_path / "scenes"), "--method", "hdr-gs", "--iters", "30", "-q"]
    args += ["--set", "init_points=60", "--set", "lr_means=1e6", "--set", "lr_scales=1e6"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, (r.output, r.exception)
    res = [json.loads(x) for x in r.stdout.splitlines() if x.startswith('{"kind": "result"')][0]
    assert res["diverged"] is True and res["psnr_ldr_oe"] is None and res["diverged_step"] <= 30
    assert "diverged" in r.stderr
