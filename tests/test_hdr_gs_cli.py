"""icml26 hdr-gs: the tiny recipe end to end (POV-Ray scene, train, eval, render, resume), the
record contract, povray missing -> exit 2 with the install command, bad data -> exit 2."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from icml26.cli import app

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "recipes" / "hdr-gs" / "tiny.yaml"
runner = CliRunner()
RESULT_KEYS = {
    "kind",
    "method",
    "scene",
    "psnr_ldr_oe",
    "psnr_ldr_ne",
    "psnr_hdr",
    "psnr_hdr_predmax",
    "ssim_ldr_oe",
    "ssim_ldr_ne",
    "ssim_hdr",
    "gaussians",
    "train_s",
}


def _recs(r):
    return [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]


def test_povray_missing_exits_2_with_install_command(tmp_path, monkeypatch):
    monkeypatch.setenv("ICML26_POVRAY", str(tmp_path / "no-povray"))
    r = runner.invoke(app, ["hdr-gs", "train", "--recipe", str(TINY), "-q", "--out", str(tmp_path / "run")])
    assert r.exit_code == 2, r.output
    assert "apt-get install -y povray" in r.stderr
    assert not (tmp_path / "run").exists()


def test_bad_data_folder_exits_2(tmp_path):
    r = runner.invoke(app, ["hdr-gs", "train", "--data", str(tmp_path / "nope"), "-q"])
    assert r.exit_code == 2 and "does not exist" in r.stderr
    (tmp_path / "empty").mkdir()
    r = runner.invoke(app, ["hdr-gs", "train", "--data", str(tmp_path / "empty"), "-q", "--out", str(tmp_path / "run")])
    assert r.exit_code == 2 and "no scene folder" in r.stderr
    assert not (tmp_path / "run").exists()
    r = runner.invoke(app, ["hdr-gs", "train", "--method", "nerf", "-q"])
    assert r.exit_code == 2 and "expo-gs" in r.stderr


def test_huge_render_size_exits_2_before_writing(tmp_path):
    r = runner.invoke(
        app, ["hdr-gs", "train", "--recipe", str(TINY), "--set", "size=100000", "--out", str(tmp_path / "run")]
    )
    assert r.exit_code == 2 and "size <= 2048" in r.stderr
    assert not r.stdout.strip() and not (tmp_path / "run").exists()


def test_scene_without_exposure_exits_2(tmp_path):
    import numpy as np

    from icml26.core.data import renders as R

    cams = [R.Camera(16, 16, R.intrinsics(16, 16, 60), R.look_at((0, 0, 3 + i), (0, 0, 0))) for i in range(2)]
    hdr = [np.full((16, 16, 3), 0.3, np.float32)] * 2
    res = R.RenderResult(
        rgb=[R.camera_response(h, 1) for h in hdr],
        hdr=hdr,
        depth=None,
        instances=None,
        ldr={2.0: [R.camera_response(h, 2.0) for h in hdr]},
    )
    R.write_scene(tmp_path / "s", cams, {"objects": []}, res)
    r = runner.invoke(app, ["hdr-gs", "train", "--data", str(tmp_path / "s"), "-q"])
    assert r.exit_code == 2 and "exposure 0.125" in r.stderr, r.output


@pytest.mark.slow
def test_tiny_recipe_train_eval_render_resume(tmp_path):
    from conftest import need

    from icml26.core.data.renders import povray_missing_message, povray_path

    need(lambda: povray_path() is not None, povray_missing_message())
    out = tmp_path / "run"
    r = runner.invoke(app, ["hdr-gs", "--recipe", str(TINY), "-q", "--out", str(out)])
    assert r.exit_code == 0, (r.output, r.exception)
    recs = _recs(r)
    assert recs[0]["kind"] == "config" and recs[-1]["kind"] == "summary"
    res = [x for x in recs if x["kind"] == "result"]
    assert {x["method"] for x in res} == {"expo-gs", "hdr-gs"}
    for x in res:
        assert RESULT_KEYS <= set(x) and not any(k.startswith("lpips") for k in x)
        assert 8 < x["psnr_ldr_oe"] < 60 and x["gaussians"] > 0 and x["train_s"] > 0
    assert "lpips" in recs[-1]["lpips"]
    assert any(x["kind"] == "step" for x in recs)
    ck = out / "ckpt" / "scene000-expo-gs.safetensors"
    assert ck.is_file() and (out / "scenes" / "scene000" / "hdr" / "000.hdr").is_file()
    # eval of the checkpoint reproduces the train record's metrics
    r = runner.invoke(app, ["hdr-gs", "eval", "--ckpt", str(ck), "--data", str(out / "scenes" / "scene000"), "-q"])
    assert r.exit_code == 0, r.output
    ev = [x for x in _recs(r) if x["kind"] == "result"][0]
    exp = [x for x in res if x["method"] == "expo-gs"][0]
    assert ev["psnr_hdr"] == pytest.approx(exp["psnr_hdr"], rel=1e-6) and ev["gaussians"] == exp["gaussians"]
    # render: PNG + .hdr + .exr per view
    r = runner.invoke(
        app,
        [
            "hdr-gs",
            "render",
            "--ckpt",
            str(ck),
            "--data",
            str(out / "scenes" / "scene000"),
            "--exposure",
            "2",
            "--views",
            "1,3",
            "--out",
            str(tmp_path / "img"),
            "-q",
        ],
    )
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in (tmp_path / "img").iterdir()) == [
        "hdr_001.exr",
        "hdr_001.hdr",
        "hdr_003.exr",
        "hdr_003.hdr",
        "ldr_001.png",
        "ldr_003.png",
    ]
    # --resume of a finished run replays its results
    r = runner.invoke(app, ["hdr-gs", "train", "--recipe", str(TINY), "-q", "--out", str(out), "--resume"])
    assert r.exit_code == 0, r.output
    again = [x for x in _recs(r) if x["kind"] == "result"]
    assert [x["psnr_hdr"] for x in again] == [x["psnr_hdr"] for x in res]


@pytest.mark.slow
def test_resume_continues_from_checkpoint(tmp_path):
    """A run stopped part-way continues from its safetensors checkpoint to the same result."""
    from conftest import need

    from icml26.core.data.renders import povray_missing_message, povray_path
    from icml26.methods.splatting import hdr_gs as H
    from icml26.methods.splatting.scenes import make_scene

    need(lambda: povray_path() is not None, povray_missing_message())
    d = make_scene(tmp_path / "s", 1, views=4, size=24)
    cfg = H.Config(
        methods=("hdr-gs",),
        iters=20,
        init_points=100,
        max_gaussians=400,
        densify_from=10,
        densify_every=10,
        ckpt_every=10,
        log_every=10,
        views=4,
        size=24,
    )
    sd = H.load_scene(d, cfg)
    full = [
        r
        for r in H.train_one(sd, cfg, "hdr-gs", seed=0, ckpt=tmp_path / "a.safetensors", resume=False)
        if r["kind"] == "result"
    ][0]
    list(H.train_one(sd, cfg, "hdr-gs", seed=0, ckpt=tmp_path / "b.safetensors", resume=False, stop_after_iters=10))
    part = [
        r
        for r in H.train_one(sd, cfg, "hdr-gs", seed=0, ckpt=tmp_path / "b.safetensors", resume=True)
        if r["kind"] == "result"
    ][0]
    assert part["psnr_hdr"] == pytest.approx(full["psnr_hdr"], abs=1e-4) and part["gaussians"] == full["gaussians"]
