"""``icml26 sample-lfm --fine``: a run directory resolves to its checkpoint.safetensors; a
directory without one is refused with exit 2 ("is a directory, expected a file")."""

from typer.testing import CliRunner

from icml26.cli import app
from icml26.methods.lfm.sample import checkpoint_file


def test_directory_without_checkpoint_is_refused(tmp_path):
    r = CliRunner().invoke(app, ["sample-lfm", "--fine", str(tmp_path), "-q"])
    assert r.exit_code == 2, r.output
    assert "is a directory, expected a file" in r.output


def test_run_directory_resolves_to_its_checkpoint(tmp_path):
    (tmp_path / "checkpoint.safetensors").write_bytes(b"x")
    assert checkpoint_file(tmp_path) == str(tmp_path / "checkpoint.safetensors")
    assert checkpoint_file("a/file.safetensors") == "a/file.safetensors"
