"""``icml26 quantize`` bad input, all refused with exit 2 before the model load: corrupt model
files, a group size that does not divide the model's dimensions, an unknown corpus, CUDA,
a directory as a text file. Tiny folders (config.json + a few bytes), no weights loaded."""

import json
import struct

import pytest
from typer.testing import CliRunner

from icml26.cli import app

runner = CliRunner()


def _q(*args):
    return runner.invoke(app, ["quantize", *args, "-q"])


@pytest.fixture
def cfg_only(tmp_path):
    """An HF folder whose config says SmolLM2-135M's dimensions; no weights needed for the checks."""
    d = tmp_path / "cfg"
    d.mkdir()
    (d / "config.json").write_text(
        json.dumps(
            {
                "model_type": "llama",
                "hidden_size": 576,
                "intermediate_size": 1536,
                "num_attention_heads": 9,
                "head_dim": 64,
            }
        )
    )
    return d


def test_group_size_not_dividing_names_the_dims(cfg_only):
    r = _q("--model", str(cfg_only), "--set", "group_size=7")
    assert r.exit_code == 2, r.output
    assert (
        "group_size 7 does not divide" in r.output
        and "hidden_size=576" in r.output
        and "intermediate_size=1536" in r.output
    )
    r = _q("--model", str(cfg_only), "--set", "group_size=1000")  # >= 576 is per channel there, 1536 % 1000 != 0
    assert r.exit_code == 2 and "intermediate_size=1536" in r.output and "hidden_size" not in r.output


def test_check_group_size_accepts_divisors():
    from icml26.core.errors import InputError
    from icml26.methods.quantization.fptquant import check_group_size

    check_group_size(64, {"a": 576, "b": 1536})
    check_group_size(0, {"a": 576})
    check_group_size(4096, {"a": 576})  # larger than every dimension: per channel
    with pytest.raises(InputError, match="a=576"):
        check_group_size(7, {"a": 576})


def test_unknown_corpus_is_refused_before_loading(cfg_only):
    r = _q("--model", str(cfg_only), "--set", "corpus=nosuch")
    assert r.exit_code == 2 and "corpus 'nosuch'" in r.output and "python-docs" in r.output


def test_cuda_device_is_refused_and_help_says_cpu(cfg_only):
    r = _q("--model", str(cfg_only), "--device", "cuda")
    assert r.exit_code == 2 and "computes on the CPU only" in r.output
    h = runner.invoke(app, ["quantize", "--help"], env={"COLUMNS": "200"})
    assert h.exit_code == 0
    line = next(ln for ln in h.output.splitlines() if "--device" in ln)
    assert "cuda:N" not in line and "cpu" in line


def test_directory_as_calib_text(cfg_only, tmp_path):
    ev = tmp_path / "eval.txt"
    ev.write_text("some text\n")
    r = _q("--model", str(cfg_only), "--calib-text", str(tmp_path), "--eval-text", str(ev))
    assert r.exit_code == 2 and "is a directory, expected a file" in r.output


def test_truncated_and_garbage_safetensors(cfg_only):
    header = json.dumps({"w": {"dtype": "F32", "shape": [1000], "data_offsets": [0, 4000]}}).encode()
    (cfg_only / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 100)
    r = _q("--model", str(cfg_only))
    assert r.exit_code == 2 and "is not a valid safetensors file (truncated or corrupt" in r.output
    (cfg_only / "model.safetensors").write_bytes(b"\xff" * 5000)
    r = _q("--model", str(cfg_only))
    assert r.exit_code == 2 and "is not a valid safetensors file" in r.output


def test_fake_gguf(tmp_path):
    f = tmp_path / "fake.gguf"
    f.write_bytes(b"hello world, not a model\n" * 4)
    r = _q("--model", str(f))
    assert r.exit_code == 2 and "is not a GGUF file" in r.output


def test_a_sized_limit_is_named_before_the_cross_field_checks():
    """seq_len over its limit also breaks calib_tokens >= seq_len: the limit is what the user reads."""
    r = _q("--set", "seq_len=100000000")
    assert r.exit_code == 2
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and "seq_len=1.0e+08 is over its limit 32768" in err[0] and "calib_tokens" not in err[0]


def test_an_unread_setting_names_every_method_that_reads_it(cfg_only):
    """local_steps with RTN only: refused, naming each stage name that runs the local stage."""
    r = _q("--model", str(cfg_only), "--method", "rtn", "--set", "local_steps=5")
    assert r.exit_code == 2, r.output
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and "quantize config: local_steps is read by " in err[0]
    assert "fptquant, fptquant-local, fptquant-merged, fptquant-merged-local only" in err[0]
    assert "-e2e-only" not in err[0]  # the end-to-end-only names skip the local stage
