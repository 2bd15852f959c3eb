"""The one reader of user-given .safetensors files: valid files load, broken ones are one-line
InputErrors naming the file and the fix (before any tensor data is read)."""

import numpy as np
import pytest
import torch
from safetensors.numpy import save_file as save_np
from safetensors.torch import save_file

from icml26.core.errors import InputError
from icml26.core.safetensors_file import check, read


def test_read_valid_file_both_frameworks(tmp_path):
    f = tmp_path / "m.safetensors"
    save_file({"w": torch.arange(6, dtype=torch.float32).reshape(2, 3)}, str(f), metadata={"k": "v"})
    t, md = read(f, fix="x")
    assert md == {"k": "v"} and t["w"].tolist() == [[0, 1, 2], [3, 4, 5]]
    g = tmp_path / "n.safetensors"
    save_np({"b": np.array([1, 2], np.int64)}, str(g))
    t, md = read(g, fix="x", framework="np")
    assert md == {} and t["b"].tolist() == [1, 2]


def test_broken_files_are_input_errors(tmp_path):
    f = tmp_path / "m.safetensors"
    save_file({"w": torch.zeros(64)}, str(f))
    raw = f.read_bytes()
    f.write_bytes(raw[:-10])  # truncated tensor data
    with pytest.raises(
        InputError,
        match=r"m\.safetensors' is not a valid safetensors file \(truncated or corrupt: .* need .*\): retrain",
    ):
        read(f, fix="retrain")
    f.write_bytes(b"abc")
    with pytest.raises(InputError, match="shorter than its 8-byte header length"):
        check(f, "fix")
    f.write_bytes((5).to_bytes(8, "little") + b"{oops")
    with pytest.raises(InputError, match="header is not JSON"):
        read(f, fix="fix")
    with pytest.raises(InputError, match="does not exist"):
        read(tmp_path / "missing.safetensors", fix="fix")


def test_lfm_checkpoint_and_filter_model_use_it(tmp_path):
    from icml26.methods.filtering import classifiers as C
    from icml26.methods.lfm import ckpt

    f = tmp_path / "checkpoint.safetensors"
    f.write_bytes(b"\x10" + b"\x00" * 7 + b"{}")
    with pytest.raises(InputError, match="is not a valid safetensors file .*written by icml26"):
        ckpt.load(f)
    (tmp_path / "model.safetensors").write_bytes(b"\x10" + b"\x00" * 7 + b"{}")
    with pytest.raises(InputError, match="not a safetensors model: train one"):
        C.load_model(tmp_path)
