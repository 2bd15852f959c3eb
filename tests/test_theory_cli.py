"""CLI of jacobian-spectrum and equivariance: record contract, a user's model, bad input -> exit 2."""

import json

import pytest
import torch
from safetensors.torch import save_file
from typer.testing import CliRunner

from icml26.cli import app

runner = CliRunner()


def _records(r):
    return [json.loads(x) for x in r.stdout.splitlines()]


JS_FIELDS = {"depth", "lyapunov", "lyapunov_pred", "gap_ratio", "alignment", "phase", "gates"}


def test_jacobian_spectrum_user_model_records(tmp_path):
    g = torch.Generator().manual_seed(0)
    ws = {f"layers.{i}.weight": torch.randn(16, 16 if i else 10, generator=g) * (2 / 16) ** 0.5 for i in range(6)}
    ws["layers.0.bias"] = torch.zeros(16)
    f = tmp_path / "m.safetensors"
    save_file(ws, str(f))
    r = runner.invoke(
        app,
        ["jacobian-spectrum", "--model", str(f), "--top-k", "3", "--set", "data=noise", "--set", "n_samples=2", "-q"],
    )
    assert r.exit_code == 0, r.output
    recs = _records(r)
    res = [x for x in recs if x["kind"] == "result"]
    assert recs[-1]["kind"] == "summary" and len(res) == 2
    for x in res:
        assert JS_FIELDS <= set(x) and x["depth"] == 6 and x["phase"] == "trained" and x["lyapunov_pred"] is None
        assert len(x["lyapunov"]) == 3 and x["gates"] in ("fixed", "free")


def test_jacobian_spectrum_record_contract_at_init():
    r = runner.invoke(
        app,
        [
            "jacobian-spectrum",
            "--width",
            "16",
            "--depth",
            "3,6",
            "--top-k",
            "3",
            "--gates",
            "free",
            "--set",
            "data=noise",
            "--set",
            "n_samples=2",
            "-q",
        ],
    )
    assert r.exit_code == 0, r.output
    res = [x for x in _records(r) if x["kind"] == "result"]
    assert [x["depth"] for x in res] == [3, 6]
    for x in res:
        assert JS_FIELDS <= set(x) and x["phase"] == "init" and x["gates"] == "free"
        assert len(x["lyapunov_pred"]) == 3 and len(x["gap_ratio"]) == 2 and 0 < x["alignment"] <= 1


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--arch", "transformer"], "arch"),
        (["--depth", "4,x"], "--depth"),
        (["--top-k", "300", "--width", "16"], "top_k"),
        (["--model", "nope.safetensors"], "nope.safetensors"),
        (["--set", "data=/no/such/images"], "/no/such/images"),
        (["--width", "4096", "--depth", "2000"], "this run would"),
    ],
)
def test_jacobian_spectrum_bad_input_exits_2(args, needle, tmp_path):
    r = runner.invoke(app, ["jacobian-spectrum", *args, "-q", "--out", str(tmp_path / "run")])
    assert r.exit_code == 2, r.output
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and needle in err[0], r.stderr
    assert not (tmp_path / "run").exists()


def test_jacobian_spectrum_corrupt_and_non_chain_model_exit_2(tmp_path):
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json")
    r = runner.invoke(app, ["jacobian-spectrum", "--model", str(bad), "-q"])
    assert r.exit_code == 2 and "not a valid safetensors" in r.stderr
    f = tmp_path / "gap.safetensors"
    save_file({"a.0.weight": torch.zeros(8, 4), "a.1.weight": torch.zeros(8, 5)}, str(f))
    r = runner.invoke(app, ["jacobian-spectrum", "--model", str(f), "--top-k", "2", "-q"])
    assert r.exit_code == 2 and "not a chain" in r.stderr


EQ_FIELDS = {"layer", "rel_equivariance_error", "perm_projection_error", "end_to_end_error"}


def _user_net(tmp_path, acts_n=2):
    g = torch.Generator().manual_seed(0)
    t = {
        "l.0.weight": torch.randn(8, 16, generator=g),
        "l.0.bias": torch.zeros(8),
        "l.1.weight": torch.randn(6, 8, generator=g),
        "l.2.weight": torch.randn(3, 6, generator=g),
    }
    f = tmp_path / "net.safetensors"
    save_file(t, str(f))
    return f


def test_equivariance_user_model_records(tmp_path):
    f = _user_net(tmp_path)
    r = runner.invoke(
        app,
        [
            "equivariance",
            "--model",
            str(f),
            "--group",
            "hflip,rot90",
            "--set",
            "layer_acts=[tanh,gelu]",
            "--set",
            "n_noise=400",
            "-q",
        ],
    )
    assert r.exit_code == 0, r.output
    recs = _records(r)
    res = [x for x in recs if x["kind"] == "result"]
    assert recs[-1]["kind"] == "summary" and len(res) == 4  # 2 groups x 2 hidden layers
    for x in res:
        assert EQ_FIELDS <= set(x) and x["layer"] in (1, 2) and x["rel_equivariance_error"] > 0.05


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--group", "shear"], "shear"),
        (["--task", "segmentation"], "task"),
        (["--act", "swish"], "act"),
        (["--group", "perm:/no/such.npy"], "/no/such.npy"),
        (["--data", "/no/such/dir"], "/no/such/dir"),
        (["--seeds", "100000"], "this run would"),
    ],
)
def test_equivariance_bad_input_exits_2(args, needle, tmp_path):
    r = runner.invoke(app, ["equivariance", *args, "-q", "--out", str(tmp_path / "run")])
    assert r.exit_code == 2, r.output
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and needle in err[0], r.stderr
    assert not (tmp_path / "run").exists()


def test_equivariance_bad_model_and_spec_exit_2(tmp_path):
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"garbage")
    r = runner.invoke(app, ["equivariance", "--model", str(bad), "-q"])
    assert r.exit_code == 2 and "not a valid safetensors" in r.stderr
    f = _user_net(tmp_path)
    r = runner.invoke(app, ["equivariance", "--model", str(f), "--set", "layer_acts=[tanh]", "-q"])
    assert r.exit_code == 2 and "layer_acts" in r.stderr
    r = runner.invoke(
        app,
        [
            "equivariance",
            "--model",
            str(f),
            "--set",
            "layer_acts=[tanh,gelu]",
            "--group",
            "hflip",
            "--set",
            "out_action=same",
            "-q",
        ],
    )
    assert r.exit_code == 2 and "out_action" in r.stderr


def test_jacobian_spectrum_trains_on_a_users_npz_of_another_size(tmp_path):
    import numpy as np

    rng = np.random.default_rng(0)
    f = tmp_path / "imgs.npz"
    np.savez(
        f,
        x_train=rng.integers(0, 255, (64, 10, 10), dtype=np.uint8),
        y_train=rng.integers(0, 3, 64),
        x_test=rng.integers(0, 255, (16, 10, 10), dtype=np.uint8),
        y_test=rng.integers(0, 3, 16),
    )
    r = runner.invoke(
        app,
        [
            "jacobian-spectrum",
            "--width",
            "8",
            "--depth",
            "2",
            "--top-k",
            "2",
            "--gates",
            "fixed",
            "--train",
            str(f),
            "--set",
            "train_steps=4",
            "--set",
            "log_every=2",
            "--set",
            "n_samples=2",
            "--set",
            "batch_size=8",
            "-q",
        ],
    )
    assert r.exit_code == 0, r.output
    recs = _records(r)
    assert [x["step"] for x in recs if x["kind"] == "step"] == [0, 2, 4]
    assert {x["phase"] for x in recs if x["kind"] == "result"} == {"init", "trained"}
