"""icml26.core.data.renders: the scene-folder layout round trip, Radiance HDR I/O, the camera
response, and a tiny POV-Ray render whose depth and instance passes are checked against the
exact geometry (skipped without povray; CI fails instead)."""

from __future__ import annotations

import numpy as np
import pytest

from icml26.core.data import renders as R
from icml26.core.errors import InputError, MissingDataError
from tests.conftest import need


def _need_povray():
    need(lambda: R.povray_path() is not None, f"needs POV-Ray: {R.POVRAY_INSTALL}")


def test_hdr_roundtrip_rgbe_precision(tmp_path):
    rng = np.random.default_rng(0)
    img = np.exp(rng.normal(0, 3, size=(9, 13, 3))).astype(np.float32)  # 1e-4 .. 1e4
    img[0, 0] = 0.0
    R.write_hdr(tmp_path / "a.hdr", img)
    back = R.read_hdr(tmp_path / "a.hdr")
    assert back.shape == img.shape and back.dtype == np.float32
    assert np.all(back[0, 0] == 0)
    mx = img.max(-1, keepdims=True)
    # RGBE keeps 8 mantissa bits of the largest channel: error <= 1/256 of it (plus half a step)
    assert np.all(np.abs(back - img) <= mx / 256 * 1.01)


def test_read_hdr_rle(tmp_path):
    """New-style run-length scanlines (what POV-Ray and Radiance write) decode to the same pixels."""
    w, h = 10, 2
    head = f"#?RADIANCE\nFORMAT=32-bit_rle_rgbe\n\n-Y {h} +X {w}\n".encode()
    body = b""
    for y in range(h):
        body += bytes([2, 2, 0, w])
        body += bytes([128 + w, 128])  # R: run of 128
        body += bytes([w]) + bytes(range(10, 10 + w))  # G: literal
        body += bytes([128 + w, 0])  # B: 0
        body += bytes([128 + w, 129])  # E: 2**1
    (tmp_path / "r.hdr").write_bytes(head + body)
    a = R.read_hdr(tmp_path / "r.hdr")
    np.testing.assert_allclose(a[1, :, 0], (128 + 0.5) * 2 / 256)
    np.testing.assert_allclose(a[0, :, 1], (np.arange(10, 20) + 0.5) * 2 / 256)
    np.testing.assert_allclose(a[..., 2], 0.5 * 2 / 256)
    (tmp_path / "bad.hdr").write_bytes(b"P6 nothing")
    with pytest.raises(InputError, match="not a Radiance file"):
        R.read_hdr(tmp_path / "bad.hdr")


def test_camera_response_and_inverse():
    e = np.array([0.0, 0.01, 0.1, 0.5, 1.0, 4.0])
    ldr = R.camera_response(e, 2.0)
    assert ldr.tolist() == [0, round(255 * 0.02 ** (1 / 2.2)), round(255 * 0.2 ** (1 / 2.2)), 255, 255, 255]
    inv = R.inverse_camera_response(ldr[1:3], 2.0)
    np.testing.assert_allclose(inv, e[1:3], rtol=0.03)
    ldrs = R.synthesize_ldr(np.full((2, 2, 3), 0.05), R.HDR_NERF_EXPOSURES_S)
    means = [ldrs[t].mean() for t in R.HDR_NERF_EXPOSURES_S]
    assert means == sorted(means) and means[0] > 0 and means[-1] == 255


def test_layout_roundtrip(tmp_path):
    K = R.intrinsics(8, 6, 60)
    cams = [
        R.Camera(8, 6, K, R.look_at([0, 1, 3], [0, 0.5, 0])),
        R.Camera(8, 6, K, R.look_at([1, 1, 3], [0, 0.5, 0]), exposure_s=0.5),
    ]
    rng = np.random.default_rng(1)
    hdr = [rng.uniform(0, 2, (6, 8, 3)).astype(np.float32) for _ in cams]
    res = R.RenderResult(
        rgb=[R.camera_response(x, 1.0) for x in hdr],
        hdr=hdr,
        depth=[rng.uniform(1, 5, (6, 8)).astype(np.float32) for _ in cams],
        instances=[rng.integers(0, 5, (6, 8)).astype(np.uint8) for _ in cams],
        ldr={t: [R.camera_response(x, t) for x in hdr] for t in (0.125, 2.0)},
    )
    scene = {"units": "m", "objects": [{"id": 1, "class": "chair", "size": [0.5, 0.9, 0.5], "position": [0, 0.45, 0]}]}
    R.write_scene(tmp_path / "s", cams, scene, res)
    for sub in (
        "rgb/000.png",
        "hdr/001.hdr",
        "ldr/0.125/001.png",
        "ldr/2/000.png",
        "depth/001.npy",
        "instances/000.png",
    ):
        assert (tmp_path / "s" / sub).is_file(), sub
    rs = R.read_scene(tmp_path / "s")
    assert len(rs) == 2 and rs.scene == scene and rs.ldr_exposures_s == (0.125, 2.0)
    assert rs.cameras[0].exposure_s is None and rs.cameras[1].exposure_s == 0.5
    for i, c in enumerate(cams):
        np.testing.assert_allclose(rs.cameras[i].K, c.K)
        np.testing.assert_allclose(rs.cameras[i].c2w, c.c2w)
        np.testing.assert_array_equal(rs.rgb(i), res.rgb[i])
        np.testing.assert_array_equal(rs.depth(i), res.depth[i])
        np.testing.assert_array_equal(rs.instances(i), res.instances[i])
        np.testing.assert_array_equal(rs.ldr(2.0, i), res.ldr[2.0][i])
        assert np.all(np.abs(rs.hdr(i) - hdr[i]) <= hdr[i].max(-1, keepdims=True) / 256 * 1.01)
    with pytest.raises(IndexError):
        rs.rgb(2)
    (tmp_path / "s" / "depth" / "001.npy").unlink()
    with pytest.raises(InputError, match="depth/001.npy"):
        rs.depth(1)
    (tmp_path / "s" / "depth" / "000.npy").write_bytes(b"not an array")
    with pytest.raises(InputError, match="depth/000.npy is not a readable"):
        rs.depth(0)
    for sub, read in (
        ("rgb/001.png", lambda: rs.rgb(1)),
        ("ldr/2/000.png", lambda: rs.ldr(2.0, 0)),
        ("instances/001.png", lambda: rs.instances(1)),
    ):
        (tmp_path / "s" / sub).write_bytes(b"\x89PNG truncated")
        with pytest.raises(InputError, match=f"{sub} is not a readable PNG"):
            read()
    with pytest.raises(InputError, match="does not exist"):
        R.read_scene(tmp_path / "nope")
    with pytest.raises(InputError, match="cameras.json"):
        R.read_scene(tmp_path)


def test_look_at_and_projection_inverse():
    cam = R.Camera(40, 30, R.intrinsics(40, 30, 70), R.look_at([1, 2, 3], [0, 0.5, -1]))
    depth = np.random.default_rng(2).uniform(1, 4, (30, 40)).astype(np.float32)
    P = R.backproject(depth, cam).reshape(-1, 3)
    uv, z = R.project(P, cam)
    v, u = np.mgrid[0:30, 0:40]
    np.testing.assert_allclose(uv, np.stack([u.ravel() + 0.5, v.ravel() + 0.5], 1), atol=1e-6)
    np.testing.assert_allclose(z, depth.ravel(), rtol=1e-6)
    np.testing.assert_allclose(cam.c2w[:3, :3] @ cam.c2w[:3, :3].T, np.eye(3), atol=1e-12)


def test_povray_missing_names_install(monkeypatch):
    monkeypatch.setenv("ICML26_POVRAY", "")
    with pytest.raises(MissingDataError, match="apt-get install -y povray povray-examples"):
        R.require_povray()


def test_tiny_render_depth_and_instances_exact():
    """A 40x30 render (two views, ~2 s): floor pixels back-project to y = 0 within 1 mm, the box's
    pixels to the box, and the projected box corners bound its instance mask within a pixel."""
    _need_povray()
    objs = [
        R.PovObject("plane { y, 0 }", "pigment { rgb 0.7 }", 0),
        R.PovObject(
            f"box {{ {R.pov_vec([-0.5, 0, -1.5])}, {R.pov_vec([0.5, 1, -0.5])} }}", "pigment { rgb <0.9, 0.2, 0.1> }", 7
        ),
    ]
    K = R.intrinsics(40, 30, 70)
    cams = [R.Camera(40, 30, K, R.look_at([x, 1.5, 3], [0, 0.5, -1])) for x in (0.0, 1.5)]
    res = R.render_scene(objs, cams, lights="light_source { <2, 4, 3> color rgb 3 }", exposures_s=(0.5, 2.0))
    assert res.hdr[0].shape == (30, 40, 3) and res.hdr[0].max() > 1.0
    assert res.ldr[2.0][0].mean() > res.ldr[0.5][0].mean()
    corners = np.array([[x, y, z] for x in (-0.5, 0.5) for y in (0, 1) for z in (-1.5, -0.5)])
    for cam, d, ins in zip(cams, res.depth, res.instances):
        P = R.backproject(np.where(np.isfinite(d), d, 1.0), cam)
        floor = (ins == 0) & np.isfinite(d)
        assert floor.sum() > 200 and np.abs(P[floor][:, 1]).max() < 1e-3
        box = P[ins == 7]
        assert len(box) > 30
        assert box.min(0)[0] > -0.5 - 1e-3 and box.max(0)[0] < 0.5 + 1e-3 and box.max(0)[1] < 1 + 1e-3
        uv, _ = R.project(corners, cam)
        vs, us = np.nonzero(ins == 7)
        assert abs(us.min() + 0.5 - uv[:, 0].min()) <= 1.0 and abs(us.max() + 0.5 - uv[:, 0].max()) <= 1.0
        assert abs(vs.min() + 0.5 - uv[:, 1].min()) <= 1.0
