"""The HDR-NeRF layout reader (icml26.core.data.hdr_nerf) on a small folder written here, OpenEXR
I/O, `icml26 hdr-gs train/render --data` on it, and bad folders -> exit 2 before anything is written."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from icml26.cli import app
from icml26.core.data import hdr_nerf as HN
from icml26.core.data import renders as R
from icml26.core.errors import InputError

pytest.importorskip("OpenEXR", reason="pip install 'icml26[splatting]' (PyPI openexr)")
runner = CliRunner()
EXPS = (0.125, 0.5, 2.0, 8.0, 32.0)
W, H = 20, 14


def _blender(c2w_cv: np.ndarray) -> np.ndarray:
    m = np.array(c2w_cv, float)
    m[:3, 1:3] *= -1.0  # OpenCV camera axes -> Blender's
    return m


def _hdr(i: int) -> np.ndarray:
    v, u = np.mgrid[0:H, 0:W].astype(np.float32)
    base = 0.01 * np.exp2(12.0 * u / (W - 1))[..., None]  # 12 stops across the image
    return (base * np.array([1.0, 0.8, 0.6], np.float32) * (1 + 0.05 * i) + 0.001 * v[..., None]).astype(np.float32)


def write_scene(d: Path, n_train: int = 3, n_test: int = 2, *, hdr_in: str = "test_hdr", rgba: bool = False) -> dict:
    """A small HDR-NeRF folder: cameras on an arc looking at the origin; returns what was written."""
    from PIL import Image

    d.mkdir(parents=True, exist_ok=True)
    K = R.intrinsics(W, H, 60.0)
    fov = 2 * math.atan(0.5 * W / K[0, 0])
    written = {"c2w": {}, "hdr": {}, "ldr": {}}
    for s, n in (("train", n_train), ("test", n_test)):
        frames, exps = [], {}
        for j in range(n):
            a = 0.3 * j + (0.15 if s == "test" else 0.0)
            c2w = R.look_at((3 * math.sin(a), 0.5, 3 * math.cos(a)), (0, 0, 0))
            # exr/<name>.exr is keyed by the file name: distinct names across the splits there
            fp = f"./{s}/{j + (100 if hdr_in == 'exr' else 0):03d}" if s == "test" else f"{s}/{j:03d}"
            frames.append({"file_path": fp, "transform_matrix": _blender(c2w).tolist()})
            h = _hdr(j + (10 if s == "test" else 0))
            written["c2w"][(s, j)] = c2w
            written["hdr"][(s, j)] = h
            for k, t in enumerate(EXPS):
                img = R.camera_response(h, t)
                written["ldr"][(s, j, t)] = img
                (d / s).mkdir(exist_ok=True)
                if rgba:
                    img = np.concatenate([img, np.full((H, W, 1), 255, np.uint8)], 2)
                Image.fromarray(img).save(d / f"{fp}_{k}.png")
                exps[f"{fp}_{k}.png"] = t
            if hdr_in == "exr":
                HN.write_exr(d / "exr" / f"{Path(fp).name}.exr", h) if s == "test" else None
            elif s == "test":
                HN.write_exr(d / "test_hdr" / f"hdr_{j:03d}.exr", h)
        (d / f"transforms_{s}.json").write_text(json.dumps({"camera_angle_x": fov, "frames": frames}))
        (d / f"exposure_{s}.json").write_text(json.dumps(exps))
    return written


def test_exr_round_trip(tmp_path):
    a = _hdr(0) * 50
    HN.write_exr(tmp_path / "a.exr", a)
    np.testing.assert_array_equal(HN.read_exr(tmp_path / "a.exr"), a)  # float32: exact
    HN.write_exr(tmp_path / "h.exr", a, half=True)
    np.testing.assert_allclose(HN.read_exr(tmp_path / "h.exr"), a, rtol=1e-3)  # half: 11-bit mantissa
    (tmp_path / "bad.exr").write_bytes(b"not an exr")
    with pytest.raises(InputError, match="not a readable OpenEXR"):
        HN.read_exr(tmp_path / "bad.exr")
    with pytest.raises(ValueError):
        HN.write_exr(tmp_path / "x.exr", np.zeros((4, 4)))


@pytest.mark.parametrize("hdr_in,rgba", [("test_hdr", False), ("exr", True)])
def test_reader_returns_what_was_written(tmp_path, hdr_in, rgba):
    w = write_scene(tmp_path / "s", hdr_in=hdr_in, rgba=rgba)
    assert HN.is_hdr_nerf(tmp_path / "s") and not HN.is_hdr_nerf(tmp_path)
    sc = HN.read_hdr_nerf(tmp_path / "s")
    # interleaved: train 0, test 0, train 1, test 1, train 2
    assert sc.train_views == (0, 2, 4) and sc.test_views == (1, 3) and len(sc) == 5
    assert sc.ldr_exposures_s == EXPS and sc.has("hdr") and not sc.has("depth")
    order = [("train", 0), ("test", 0), ("train", 1), ("test", 1), ("train", 2)]
    for i, key in enumerate(order):
        np.testing.assert_allclose(sc.cameras[i].c2w, w["c2w"][key], atol=1e-12)
        np.testing.assert_allclose(sc.cameras[i].K, R.intrinsics(W, H, 60.0), atol=1e-9)
        for t in EXPS:
            np.testing.assert_array_equal(sc.ldr(t, i), w["ldr"][key + (t,)])
        if key[0] == "test":
            np.testing.assert_array_equal(sc.hdr(i), w["hdr"][key])
        else:
            assert not sc.has_hdr(i)


def test_blender_camera_axes_become_opencv(tmp_path):
    """A Blender camera at (0, 0, 3) with identity rotation looks down -z at the origin: after the
    conversion the origin is in front (z = 3) at the image centre, world +x projects to the right
    and world +y (the camera's up in Blender) to the top of the image."""
    write_scene(tmp_path / "s", n_train=1, n_test=1)
    tr = json.loads((tmp_path / "s" / "transforms_train.json").read_text())
    m = np.eye(4)
    m[2, 3] = 3.0
    tr["frames"][0]["transform_matrix"] = m.tolist()
    (tmp_path / "s" / "transforms_train.json").write_text(json.dumps(tr))
    cam = HN.read_hdr_nerf(tmp_path / "s").cameras[0]
    uv, z = R.project(np.array([[0.0, 0, 0], [0.5, 0, 0], [0, 0.5, 0]]), cam)
    np.testing.assert_allclose(z, 3.0)
    np.testing.assert_allclose(uv[0], [W / 2, H / 2])
    assert uv[1, 0] > W / 2 and abs(uv[1, 1] - H / 2) < 1e-9
    assert uv[2, 1] < H / 2 and abs(uv[2, 0] - W / 2) < 1e-9


def _break(d: Path, how: str):
    if how == "no-exposure-json":
        (d / "exposure_train.json").unlink()
    elif how == "bad-json":
        (d / "transforms_test.json").write_text("{not json")
    elif how == "missing-png":
        (d / "train" / "001_3.png").unlink()
    elif how == "corrupt-png":
        (d / "test" / "000_1.png").write_bytes(b"\x89PNG garbage")
    elif how == "no-hdr":
        (d / "test_hdr" / "hdr_001.exr").unlink()
    elif how == "bad-matrix":
        tr = json.loads((d / "transforms_train.json").read_text())
        tr["frames"][1]["transform_matrix"] = [[1, 0, 0], [0, 1, 0]]
        (d / "transforms_train.json").write_text(json.dumps(tr))
    elif how == "bad-exposure":
        ex = json.loads((d / "exposure_test.json").read_text())
        ex["./test/000_2.png"] = -1
        (d / "exposure_test.json").write_text(json.dumps(ex))
    elif how == "other-size":
        from PIL import Image

        Image.fromarray(np.zeros((H + 2, W, 3), np.uint8)).save(d / "train" / "000_0.png")
    elif how == "outside":
        ex = json.loads((d / "exposure_train.json").read_text())
        ex["../x_0.png"] = 1.0
        tr = json.loads((d / "transforms_train.json").read_text())
        tr["frames"].append({"file_path": "../x", "transform_matrix": np.eye(4).tolist()})
        (d / "exposure_train.json").write_text(json.dumps(ex))
        (d / "transforms_train.json").write_text(json.dumps(tr))
    elif how == "corrupt-exr":
        (d / "test_hdr" / "hdr_000.exr").write_bytes(b"v/1\x01 broken")


BAD = {
    "no-exposure-json": "missing exposure_train.json",
    "bad-json": "not valid JSON",
    "missing-png": "missing image",
    "corrupt-png": "not a readable PNG",
    "no-hdr": "no HDR ground truth for test frame 1",
    "bad-matrix": "finite 4x4",
    "bad-exposure": "exposure time > 0",
    "other-size": "the scene's other images",
    "outside": "outside the folder",
    "corrupt-exr": "not a readable OpenEXR",
}


@pytest.mark.parametrize("how", sorted(BAD))
def test_bad_folder_exits_2_before_writing(tmp_path, how):
    d = tmp_path / "s"
    write_scene(d)
    _break(d, how)
    out = tmp_path / "run"
    r = runner.invoke(
        app, ["hdr-gs", "train", "--data", str(d), "--method", "hdr-gs", "--iters", "5", "-q", "--out", str(out)]
    )
    assert r.exit_code == 2, (r.output, r.exception)
    assert BAD[how] in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not out.exists() and not r.stdout.strip()


def test_train_and_render_on_hdr_nerf_folder(tmp_path):
    """`icml26 hdr-gs train --data` on the HDR-NeRF folder, then `render` writes PNG, .hdr and .exr
    that read back as the same linear image."""
    d = tmp_path / "scenes" / "tiny"
    write_scene(d)
    out = tmp_path / "run"
    r = runner.invoke(
        app,
        [
            "hdr-gs",
            "train",
            "--data",
            str(tmp_path / "scenes"),
            "--method",
            "hdr-gs",
            "--iters",
            "10",
            "-q",
            "--out",
            str(out),
            "--set",
            "init_points=60",
            "--set",
            "max_gaussians=200",
            "--set",
            "densify_from=10",
            "--set",
            "densify_every=10",
        ],
    )
    assert r.exit_code == 0, (r.output, r.exception)
    recs = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
    res = [x for x in recs if x["kind"] == "result"]
    assert len(res) == 1 and res[0]["scene"] == "tiny" and res[0]["test_views"] == 2
    assert (
        3 < res[0]["psnr_ldr_oe"] < 60 and 3 < res[0]["psnr_hdr"] < 80 and "floaters" not in res[0]
    )  # no depth in this layout
    ck = res[0]["ckpt"]
    r = runner.invoke(
        app,
        [
            "hdr-gs",
            "render",
            "--ckpt",
            ck,
            "--data",
            str(d),
            "--exposure",
            "2",
            "--views",
            "1,2",
            "-q",
            "--out",
            str(tmp_path / "img"),
        ],
    )
    assert r.exit_code == 0, (r.output, r.exception)
    for i in (1, 2):
        e = HN.read_exr(tmp_path / "img" / f"hdr_{i:03d}.exr")
        h = R.read_hdr(tmp_path / "img" / f"hdr_{i:03d}.hdr")
        assert e.shape == (H, W, 3) and (tmp_path / "img" / f"ldr_{i:03d}.png").is_file()
        np.testing.assert_allclose(h, e, rtol=2**-7, atol=1e-6)  # RGBE keeps 8 bits of mantissa
