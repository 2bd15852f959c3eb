"""train-lfm / sample-lfm on a user's own image folder, through the CLI: images keep their size
(a resize is asked for and warned about), a held-out split is made and stated, no training image
is ever evaluated as test, a run samples from another working folder, and the device is recorded
from where the networks actually ran."""

import hashlib
import json
import os
import subprocess
import sys

import numpy as np
from conftest import ROOT

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
TINY = [
    "--set",
    "vae_steps=2",
    "--set",
    "feature_steps=2",
    "--set",
    "steps=2",
    "--set",
    "vae_batch_size=8",
    "--set",
    "batch_size=8",
    "--set",
    "log_every=1",
    "--model",
    "small",
]


def _folder(root, side=64, per_class=10):
    from PIL import Image

    rng = np.random.default_rng(0)
    for c, cls in enumerate(("circle", "square")):
        (root / cls).mkdir(parents=True)
        for i in range(per_class):
            a = rng.integers(0, 256, (side, side, 3), dtype=np.uint8)
            a[..., c] = 255 - i  # every image distinct
            Image.fromarray(a).save(root / cls / f"{i}.png")


def _cli(args, cwd):
    p = subprocess.run(
        [sys.executable, "-m", "icml26", *args], cwd=cwd, env=ENV, capture_output=True, text=True, timeout=300
    )
    recs = [json.loads(ln) for ln in p.stdout.splitlines() if ln.strip().startswith("{")]
    return p.returncode, recs, p.stderr


def _hashes(images):
    return {hashlib.sha1(a.tobytes()).hexdigest() for a in images}


def test_held_out_split_never_overlaps_train(tmp_path):
    from icml26.core.data.images import load_images

    _folder(tmp_path / "imgs", side=16)
    tr, te = load_images(tmp_path / "imgs", "train"), load_images(tmp_path / "imgs", "test")
    assert len(tr) == 18 and len(te) == 2 and sorted(te.labels.tolist()) == [0, 1]  # 10% of each class
    assert not (_hashes(tr.images) & _hashes(te.images))
    assert te.split_source.startswith("held-out: 2 of 20")
    again = load_images(tmp_path / "imgs", "test")
    assert np.array_equal(again.images, te.images)  # the same split on every call
    np.savez(tmp_path / "a.npz", images=tr.images, labels=tr.labels)  # one array pair: split here too
    ntr, nte = load_images(tmp_path / "a.npz", "train"), load_images(tmp_path / "a.npz", "test")
    assert len(ntr) + len(nte) == 18 and not (_hashes(ntr.images) & _hashes(nte.images))


def test_image_size_is_kept_or_resized_with_a_warning(tmp_path, capsys):
    from icml26.core.data.images import load_images

    _folder(tmp_path / "imgs", side=64)
    native = load_images(tmp_path / "imgs", "train")
    assert native.images.shape[1:] == (3, 64, 64)
    assert "resiz" not in capsys.readouterr().err
    small = load_images(tmp_path / "imgs", "train", size=32)
    assert small.images.shape[1:] == (3, 32, 32)
    assert "resizing 20 images from 64x64 to 32x32" in capsys.readouterr().err


def test_user_folder_train_then_sample_from_another_folder(tmp_path):
    _folder(tmp_path / "data" / "imgs", side=16, per_class=20)
    code, recs, err = _cli(
        ["train-lfm", "--dataset", "imgs", "-o", str(tmp_path / "run"), "-q", *TINY], cwd=tmp_path / "data"
    )
    assert code == 0, err
    data = next(r for r in recs if r.get("kind") == "data")
    assert data["image_shape"] == [3, 16, 16] and data["train_images"] == 36
    assert data["test_split"].startswith("held-out: 4 of 40")
    fn = next(r for r in recs if r.get("kind") == "feature_network")
    assert fn["test_images"] == 4 and fn["test_split"] == data["test_split"]
    summary = recs[-1]
    assert summary["device"] == "cpu" and summary["diverged"] is False
    (tmp_path / "elsewhere").mkdir()
    code, recs, err = _cli(
        [
            "sample-lfm",
            "--fine",
            str(tmp_path / "run"),
            "-n",
            "8",
            "--steps",
            "2",
            "--set",
            "bootstrap=0",
            "--set",
            "judge=none",
            "-q",
        ],
        cwd=tmp_path / "elsewhere",
    )
    assert code == 0, err
    ref = next(r for r in recs if r.get("kind") == "reference")
    assert ref["split"] == "test" and ref["images"] == 4 and ref["split_source"].startswith("held-out")
    assert recs[-1]["device"] == "cpu"
