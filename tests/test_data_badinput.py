"""Bad files given to the shared loaders: a directory as a text file, corrupt safetensors /
GGUF model files -> InputError (exit 2) naming the file, before any model load."""

import json
import struct

import pytest

from icml26.core.data import lm
from icml26.core.data.text import read_text_file
from icml26.core.errors import InputError


def test_read_text_file_directory(tmp_path):
    with pytest.raises(InputError, match="is a directory, expected a file"):
        read_text_file(tmp_path)
    with pytest.raises(InputError, match="does not exist"):
        read_text_file(tmp_path / "nope.txt")


def _safetensors(path, n_bytes_data=64, cut=None):
    header = json.dumps(
        {"w": {"dtype": "F32", "shape": [n_bytes_data // 4], "data_offsets": [0, n_bytes_data]}}
    ).encode()
    blob = struct.pack("<Q", len(header)) + header + b"\0" * n_bytes_data
    path.write_bytes(blob[:cut] if cut else blob)


def _folder(tmp_path, **kw):
    d = tmp_path / "m"
    d.mkdir()
    (d / "config.json").write_text('{"model_type": "llama", "hidden_size": 64}')
    _safetensors(d / "model.safetensors", **kw)
    return d


def test_valid_safetensors_folder_passes(tmp_path):
    d = _folder(tmp_path)
    assert lm.model_path(str(d)) == d


@pytest.mark.parametrize("cut", [4, 20, -10])
def test_truncated_safetensors_is_input_error(tmp_path, cut):
    d = _folder(tmp_path, cut=cut)
    with pytest.raises(InputError, match=r"model\.safetensors' is not a valid safetensors file \(truncated or corrupt"):
        lm.model_path(str(d))


def test_random_bytes_safetensors_is_input_error(tmp_path):
    d = _folder(tmp_path)
    (d / "model.safetensors").write_bytes(bytes(range(256)) * 20)
    with pytest.raises(InputError, match="not a valid safetensors file .*point --model at another folder"):
        lm.model_path(str(d))


def test_fake_gguf_is_input_error(tmp_path):
    f = tmp_path / "fake.gguf"
    f.write_bytes(b"not a gguf at all" * 10)
    with pytest.raises(InputError, match="is not a GGUF file"):
        lm.model_path(str(f))


def test_gguf_magic_but_garbage_is_input_error(tmp_path, monkeypatch):
    monkeypatch.setenv("ICML26_CACHE", str(tmp_path / "cache"))
    f = tmp_path / "bad.gguf"
    f.write_bytes(b"GGUF" + b"\xff" * 60)
    with pytest.raises(InputError, match="GGUF"):
        lm.model_path(str(f))


def test_corrupt_gguf_past_its_magic_is_an_input_error(tmp_path):
    from icml26.core.data.lm import model_path

    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF")  # the magic bytes, then nothing
    with pytest.raises(
        InputError, match=r"m\.gguf' is not a valid GGUF model \(.*truncated or corrupt\?\): re-download"
    ):
        model_path(str(f))
