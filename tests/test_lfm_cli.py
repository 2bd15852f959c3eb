"""train-lfm / sample-lfm through the CLI on real Fashion-MNIST (tiny recipes): record contracts,
resume, kept indices, bad paths -> exit 2, and DDP with 2 gloo processes under torchrun."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import ROOT, need_debian

TINY_TRAIN = str(ROOT / "recipes/train-lfm/tiny.yaml")
TINY_SAMPLE = str(ROOT / "recipes/sample-lfm/tiny.yaml")


def _invoke(args):
    from icml26.cli import main

    runner = CliRunner()
    import typer

    app = typer.Typer()

    @app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
    def _run(ctx: typer.Context):
        main(list(ctx.args))

    res = runner.invoke(app, list(args))
    out = res.stdout
    recs = []
    for ln in out.splitlines():
        if ln.strip():
            recs.append(json.loads(ln))
    return res.exit_code, recs


@pytest.fixture(scope="module")
def tiny_runs(tmp_path_factory):
    need_debian("dataset-fashion-mnist")
    d = tmp_path_factory.mktemp("lfm")
    code, recs = _invoke(["train-lfm", "-r", TINY_TRAIN, "-o", str(d / "small"), "-q"])
    assert code == 0, recs
    code2, recs2 = _invoke(
        [
            "train-lfm",
            "-r",
            TINY_TRAIN,
            "--stage",
            "fm",
            "--vae",
            str(d / "small"),
            "--model",
            "medium",
            "--keep-ratio",
            "0.5",
            "--scorer",
            "kcenter",
            "-o",
            str(d / "large"),
            "-q",
        ]
    )
    assert code2 == 0, recs2
    return d, recs, recs2


def test_help():
    for cmd in ("train-lfm", "sample-lfm"):
        r = subprocess.run([sys.executable, "-m", "icml26", cmd, "--help"], capture_output=True, text=True, cwd=ROOT)
        assert r.returncode == 0 and "--out" in r.stdout


def test_train_records_contract(tiny_runs):
    d, recs, recs2 = tiny_runs
    assert recs[0]["kind"] == "config" and recs[-1]["kind"] == "summary"
    steps = [r for r in recs if r["kind"] == "step"]
    assert steps and all({"step", "loss", "seconds"} <= set(r) for r in steps)
    assert {r["stage"] for r in steps} == {"vae", "features", "fm"}
    assert Path(recs[-1]["checkpoint"]).is_file() and recs[-1]["checkpoint"].endswith("checkpoint.safetensors")
    red = next(r for r in recs2 if r["kind"] == "reduction")
    assert red["scorer"] == "kcenter" and red["kept"] == 128 and red["of"] == 256
    kept = json.loads(Path(red["indices_file"]).read_text())
    assert len(kept["indices"]) == 128 and len(set(kept["indices"])) == 128 and kept["scorer"] == "kcenter"
    assert recs2[-1]["parameters"] > next(r for r in recs if r["kind"] == "model")["parameters"]
    # width/depth/heads 0 = the preset's: the config record names the architecture that ran (medium: 48/3/4)
    assert recs2[0]["width"] == 0 and recs2[0]["model_arch"] == {"width": 48, "depth": 3, "heads": 4}
    assert next(r for r in recs2 if r["kind"] == "model")["arch"]["width"] == 48


def test_sample_records_contract(tiny_runs, tmp_path):
    d, _, _ = tiny_runs
    code, recs = _invoke(
        [
            "sample-lfm",
            "-r",
            TINY_SAMPLE,
            "--fine",
            str(d / "large/checkpoint.safetensors"),
            "--coarse",
            str(d / "small/checkpoint.safetensors"),
            "-o",
            str(tmp_path / "s"),
            "-q",
        ]
    )
    assert code == 0
    res = [r for r in recs if r["kind"] == "result"]
    assert [r["mode"] for r in res] == ["large", "small", "coarse-to-fine"]
    for r in res:
        for k in ("nfe", "seconds_per_sample", "fid", "precision", "recall", "same_seed_similarity"):
            assert r[k] is not None, (r["mode"], k)
        assert 0 <= r["precision"] <= 1 and 0 <= r["recall"] <= 1 and r["fid"] >= 0
        assert r["fid_low"] < r["fid"] < r["fid_high"] and r["fid_ratio_low"] <= r["fid_ratio"] <= r["fid_ratio_high"]
    c2f = res[2]
    assert c2f["nfe_coarse"] == 7 and c2f["nfe_fine"] == 3 and c2f["nfe"] == 10
    assert res[0]["same_seed_similarity"] == pytest.approx(1.0)
    assert recs[-1]["kind"] == "summary" and (tmp_path / "s" / "same_seed.png").is_file()


def test_same_seed_determinism(tiny_runs):
    d, _, _ = tiny_runs
    args = ["sample-lfm", "-r", TINY_SAMPLE, "--fine", str(d / "large/checkpoint.safetensors"), "-n", "16", "-q"]
    runs = [_invoke(args + ["--seed", s])[1] for s in ("3", "3", "4")]
    fids = [[r["fid"] for r in recs if r["kind"] == "result"] for recs in runs]
    assert fids[0] == fids[1] and fids[0] != fids[2]


def test_resume_continues_exactly(tiny_runs, tmp_path):
    d, _, _ = tiny_runs
    base = ["train-lfm", "-r", TINY_TRAIN, "--stage", "fm", "--vae", str(d / "small"), "-q"]
    code, full = _invoke(base + ["--steps", "6", "-o", str(tmp_path / "a")])
    assert code == 0
    code, _ = _invoke(base + ["--steps", "3", "-o", str(tmp_path / "b")])
    assert code == 0
    code, rest = _invoke(base + ["--steps", "6", "-o", str(tmp_path / "b"), "--resume"])
    assert code == 0
    last_full = [r for r in full if r["kind"] == "step"][-1]
    last_rest = [r for r in rest if r["kind"] == "step"]
    assert [r["step"] for r in last_rest] == [6]
    assert last_rest[-1]["loss"] == pytest.approx(last_full["loss"], rel=1e-6)


def test_bad_inputs_exit_2(tiny_runs, tmp_path):
    d, _, _ = tiny_runs
    cases = [
        ["sample-lfm", "--fine", str(tmp_path / "nope.safetensors")],
        [
            "sample-lfm",
            "--fine",
            str(d / "small/checkpoint.safetensors"),
            "--coarse",
            str(d / "small/latents.safetensors"),
            "-n",
            "8",
        ],
        ["train-lfm", "--stage", "fm", "--vae", str(tmp_path / "nodir"), "-o", str(tmp_path / "o1")],
        ["train-lfm", "--dataset", str(tmp_path / "none.npz"), "-o", str(tmp_path / "o2")],
        ["train-lfm", "-r", TINY_TRAIN, "-s", "bogus=1", "-o", str(tmp_path / "o3")],
        ["train-lfm", "-r", TINY_TRAIN, "--scorer", "magic", "-o", str(tmp_path / "o4")],
        ["train-lfm", "-r", TINY_TRAIN, "-o", str(d / "small")],  # existing run, no --resume
    ]
    for args in cases:
        code, _ = _invoke(args)
        assert code == 2, args


def test_checkpoints_are_read_once(tiny_runs, tmp_path, monkeypatch):
    """--vae's run directory and the seam / score flow checkpoints: checked up front by
    validate() and then used as loaded (no second read)."""
    from icml26.methods.lfm import checks, subset, train

    d, _, _ = tiny_runs
    calls = []
    load_flow, load_vae_dir = train.load_flow, train.load_vae_dir
    for mod in (checks, subset, train):  # every module that reads them
        monkeypatch.setattr(mod, "load_flow", lambda p, **kw: calls.append(("flow", str(p))) or load_flow(p, **kw))
    for mod in (checks, train):
        monkeypatch.setattr(mod, "load_vae_dir", lambda p: calls.append(("vae", str(p))) or load_vae_dir(p))
    flow = str(d / "small" / "checkpoint.safetensors")
    code, recs = _invoke(
        [
            "train-lfm",
            "-r",
            TINY_TRAIN,
            "--stage",
            "fm",
            "--vae",
            str(d / "small"),
            "--steps",
            "2",
            "--keep-ratio",
            "0.5",
            "--scorer",
            "loss",
            "-s",
            f"score_checkpoint={flow}",
            "-s",
            f"seam_checkpoint={flow}",
            "-s",
            "t_max=0.7",
            "-s",
            "seam_steps=2",
            "-q",
            "-o",
            str(tmp_path / "seam"),
        ]
    )
    assert code == 0, recs
    assert sorted(calls) == [("flow", flow), ("flow", flow), ("vae", str(d / "small"))]
    red = next(r for r in recs if r["kind"] == "reduction")
    assert red["scoring_model"] == flow and red["kept"] == 128


def test_ddp_two_gloo_processes_match_one(tiny_runs, tmp_path):
    torchrun = shutil.which("torchrun") or str(Path(sys.executable).with_name("torchrun"))
    if not Path(torchrun).exists():
        pytest.skip("torchrun not found")
    d, _, _ = tiny_runs
    args = [
        "train-lfm",
        "-r",
        TINY_TRAIN,
        "--stage",
        "fm",
        "--vae",
        str(d / "small"),
        "--steps",
        "4",
        "-s",
        "log_every=1",
        "-q",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    r = subprocess.run(
        [torchrun, "--standalone", "--nproc_per_node", "2", "-m", "icml26", *args, "-o", str(tmp_path / "ddp")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    ddp = [json.loads(ln) for ln in r.stdout.splitlines() if ln.strip().startswith("{")]
    assert ddp[-1]["kind"] == "summary" and ddp[-1]["processes"] == 2
    code, one = _invoke(args + ["-o", str(tmp_path / "one")])
    assert code == 0
    l_ddp = [x["loss"] for x in ddp if x["kind"] == "step"]
    l_one = [x["loss"] for x in one if x["kind"] == "step"]
    assert len(l_ddp) == len(l_one) == 4
    assert l_ddp == pytest.approx(l_one, rel=1e-4)  # same global batch, gradients all-reduced


def test_every_recipe_resolves():
    from icml26.core.recipe import resolve
    from icml26.methods.lfm.sample import SampleConfig
    from icml26.methods.lfm.train import Config

    for cmd, cls in (("train-lfm", Config), ("sample-lfm", SampleConfig)):
        files = sorted((ROOT / "recipes" / cmd).glob("*.yaml"))
        assert any(f.name == "tiny.yaml" for f in files)
        for f in files:
            resolve(cls, cmd, f)


@pytest.mark.slow
def test_learns_fashion_mnist(tmp_path):
    """Quality threshold on real data: a short run beats chance on class accuracy and an
    untrained model on FID (feature space of the classifier trained here)."""
    need_debian("dataset-fashion-mnist")
    base = [
        "train-lfm",
        "--stage",
        "all",
        "--model",
        "small",
        "-s",
        "train_size=3000",
        "-s",
        "vae_steps=300",
        "-s",
        "feature_steps=200",
        "-s",
        "log_every=100",
        "-q",
    ]
    code, recs = _invoke(base + ["--steps", "600", "-o", str(tmp_path / "a")])
    assert code == 0
    vae = next(r for r in recs if r["kind"] == "vae")
    assert vae["reconstruction_mse"] < 0.03
    assert next(r for r in recs if r["kind"] == "feature_network")["test_accuracy"] > 0.6
    code, _ = _invoke(
        [
            "train-lfm",
            "--stage",
            "fm",
            "--vae",
            str(tmp_path / "a"),
            "--model",
            "small",
            "--steps",
            "1",
            "-q",
            "-o",
            str(tmp_path / "untrained"),
        ]
    )
    assert code == 0
    code, out = _invoke(
        [
            "sample-lfm",
            "--fine",
            str(tmp_path / "a/checkpoint.safetensors"),
            "--compare",
            str(tmp_path / "untrained/checkpoint.safetensors"),
            "-n",
            "300",
            "--steps",
            "30",
            "-q",
        ]
    )
    assert code == 0
    res = {r["mode"]: r for r in out if r["kind"] == "result"}
    trained, untrained = res["large"], res["compare:untrained"]
    assert trained["class_accuracy"] > 0.3  # chance: 0.1
    assert trained["fid"] < 0.7 * untrained["fid"]
