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


def test_train_lfm_checks_checkpoints_before_writing(tmp_path):
    # a garbage seam checkpoint: exit 2, nothing printed or written (parents included)
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"abc")
    out = tmp_path / "o" / "a"
    r = CliRunner().invoke(app, ["train-lfm", "-r", "recipes/train-lfm/tiny.yaml", "--set", f"seam_checkpoint={junk}",
                                 "--set", "t_max=0.7", "-q", "--out", str(out)])
    assert r.exit_code == 2, r.output
    assert "not a valid safetensors file" in r.output and r.stdout == ""
    assert not (tmp_path / "o").exists()
    # --resume over a run whose checkpoint is corrupt: refused before the VAE stage runs
    run = tmp_path / "run"
    run.mkdir()
    (run / "checkpoint.safetensors").write_bytes(b"abc")
    r = CliRunner().invoke(app, ["train-lfm", "-r", "recipes/train-lfm/tiny.yaml", "--resume", "-q", "--out", str(run)])
    assert r.exit_code == 2 and "--resume reads it" in r.output and r.stdout == ""
    assert sorted(p.name for p in run.iterdir()) == ["checkpoint.safetensors"]


def test_sample_lfm_checks_checkpoints_before_the_first_record(tmp_path):
    junk = tmp_path / "checkpoint.safetensors"
    junk.write_bytes(b"abc")
    r = CliRunner().invoke(app, ["sample-lfm", "--fine", str(junk), "-q", "--out", str(tmp_path / "s" / "t")])
    assert r.exit_code == 2 and "not a valid safetensors file" in r.output
    assert r.stdout == ""  # not even the config record
    assert not (tmp_path / "s").exists()
