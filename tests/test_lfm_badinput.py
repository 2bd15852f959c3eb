"""``icml26 sample-lfm --fine``: a run directory resolves to its checkpoint.safetensors; a
directory without one is refused with exit 2 ("is a directory, expected a file").

``icml26 train-lfm``: bad checkpoints and --resume settings that do not fit the run are one
stderr line, exit 2, with the run folder byte-identical (or never created)."""

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import ROOT, need_debian

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
    r = CliRunner().invoke(
        app,
        [
            "train-lfm",
            "-r",
            "recipes/train-lfm/tiny.yaml",
            "--set",
            f"seam_checkpoint={junk}",
            "--set",
            "t_max=0.7",
            "-q",
            "--out",
            str(out),
        ],
    )
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


# ---------------------------------------------------------------------------- --resume / seam checks on a real tiny run
TINY = str(ROOT / "recipes/train-lfm/tiny.yaml")


def _snapshot(d: Path) -> dict:
    """Every path under ``d`` -> its bytes (None for a folder): compared before/after a refused command."""
    return {str(p.relative_to(d)): (None if p.is_dir() else p.read_bytes()) for p in sorted(d.rglob("*"))}


def _refused(args, *words):
    """Run ``train-lfm args``: exit 2, nothing on stdout, exactly one stderr line holding every word."""
    r = CliRunner().invoke(app, ["train-lfm", *args])
    assert r.exit_code == 2, (r.exit_code, r.stdout, r.stderr)
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


@pytest.fixture(scope="module")
def lfm_runs(tmp_path_factory):
    """A tiny stage-all run (D) and a vae-stage run with 2-channel latents (V2)."""
    need_debian("dataset-fashion-mnist")
    d = tmp_path_factory.mktemp("lfmbad")
    for args in (
        ["-r", TINY, "--out", str(d / "D"), "-q"],
        ["-r", TINY, "--set", "stage=vae", "--set", "latent_channels=2", "--out", str(d / "V2"), "-q"],
    ):
        r = CliRunner().invoke(app, ["train-lfm", *args])
        assert r.exit_code == 0, r.stderr
    return d


@pytest.mark.parametrize(
    "setting, words",
    [
        (
            "model=medium",
            ["checkpoint.safetensors", "different model", "model=medium", "width 32", "width 48", "start a new --out"],
        ),
        (
            "latent_channels=2",
            ["vae.safetensors", "different VAE", "latent_channels 4", "latent_channels 2", "start a new --out"],
        ),
        ("keep_ratio=0.5", ["checkpoint.safetensors", "keep_ratio 1.0", "keep_ratio 0.5"]),
    ],
)
def test_resume_with_other_settings_is_refused_before_writing(lfm_runs, setting, words):
    D = lfm_runs / "D"
    before = _snapshot(D)
    _refused(["-r", TINY, "--out", str(D), "--resume", "--steps", "12", "--set", setting, "-q"], "--resume", *words)
    assert _snapshot(D) == before


def test_seam_checkpoint_with_other_latent_shape(lfm_runs):
    S = lfm_runs / "S"
    flow = str(lfm_runs / "D" / "checkpoint.safetensors")
    _refused(
        [
            "--vae",
            str(lfm_runs / "V2"),
            "-r",
            TINY,
            "--set",
            "stage=fm",
            "--set",
            f"seam_checkpoint={flow}",
            "--set",
            "t_max=0.7",
            "--out",
            str(S),
            "-q",
        ],
        "seam_checkpoint",
        "[4, 7, 7]",
        "[2, 7, 7]",
    )
    # stage all: the latent channels come from the settings
    _refused(
        [
            "-r",
            TINY,
            "--set",
            "latent_channels=2",
            "--set",
            f"seam_checkpoint={flow}",
            "--set",
            "t_max=0.7",
            "--out",
            str(S),
            "-q",
        ],
        "seam_checkpoint",
        "[4, 7, 7]",
        "latent_channels=2",
    )
    assert not S.exists()


def test_seam_checkpoint_directory_names_the_file(lfm_runs):
    D = lfm_runs / "D"
    line = _refused(
        ["-r", TINY, "--set", f"seam_checkpoint={D}", "--set", "t_max=0.7", "--out", str(lfm_runs / "S2"), "-q"],
        "is a directory",
        str(D / "checkpoint.safetensors"),
    )
    assert "does not exist" not in line
    assert not (lfm_runs / "S2").exists()


def _copy_with(lfm_runs, name, make):
    """A copy of run D whose checkpoint.safetensors is replaced by make(path)."""
    E = lfm_runs / name
    shutil.copytree(lfm_runs / "D", E)
    (E / "checkpoint.safetensors").unlink()
    make(E / "checkpoint.safetensors")
    return E


def test_resume_checkpoint_that_is_a_directory(lfm_runs):
    E = _copy_with(lfm_runs, "Edir", lambda p: p.mkdir())
    before = _snapshot(E)
    _refused(["-r", TINY, "--out", str(E), "--resume", "-q"], "--resume", "checkpoint.safetensors", "is a directory")
    assert _snapshot(E) == before


def test_resume_with_a_vae_checkpoint_in_place_of_the_flow_one(lfm_runs):
    E = _copy_with(lfm_runs, "Evae", lambda p: shutil.copy(lfm_runs / "D" / "vae.safetensors", p))
    before = _snapshot(E)
    _refused(
        ["-r", TINY, "--out", str(E), "--resume", "-q"],
        "--resume",
        "checkpoint.safetensors",
        "'vae' checkpoint",
        "'fm'",
    )
    assert _snapshot(E) == before


def test_resume_keeps_the_original_reduction_record(lfm_runs):
    """keep_ratio 1.0 records scorer "none"; a resumed run says the same (record and kept_indices.json)."""
    F = lfm_runs / "F"
    shutil.copytree(lfm_runs / "D", F)
    kept = (F / "kept_indices.json").read_bytes()
    r = CliRunner().invoke(app, ["train-lfm", "-r", TINY, "--out", str(F), "--resume", "--steps", "9", "-q"])
    assert r.exit_code == 0, r.stderr
    recs = [json.loads(ln) for ln in r.stdout.splitlines() if ln.strip()]
    red = next(x for x in recs if x["kind"] == "reduction")
    first = next(
        json.loads(ln) for ln in (lfm_runs / "D" / "records.jsonl").read_text().splitlines() if '"reduction"' in ln
    )
    assert red["resumed"] and red["scorer"] == first["scorer"] == "none"
    assert (
        red["keep_ratio"] == 1.0
        and red["kept"] == red["of"] == 256
        and red["kept_per_class"] == first["kept_per_class"]
    )
    assert (F / "kept_indices.json").read_bytes() == kept
    assert [x["step"] for x in recs if x["kind"] == "step" and x["stage"] == "fm"] == [9]


def test_unfinished_train_lfm_folder_names_resume(tmp_path):
    """A train-lfm folder left by an interrupted run: the refusal names --resume (the command has it)."""
    from typer.testing import CliRunner

    from icml26.cli import app

    out = tmp_path / "run"
    out.mkdir()
    (out / "records.jsonl").write_text('{"kind": "config", "command": "train-lfm"}\n{"kind": "step", "step": 1}\n')
    r = CliRunner().invoke(app, ["train-lfm", "--recipe", "recipes/train-lfm/tiny.yaml", "-q", "--out", str(out)])
    assert r.exit_code == 2, r.output
    assert "did not finish" in r.stderr and "--resume" in r.stderr, r.stderr


# ---------------------------------------------------------------------------- limits up front (work() models)
@pytest.mark.parametrize(
    "args, needle",
    [
        (["train-lfm", "--set", "steps=10000000", "--set", "batch_size=1024"], "~1.0e+10 training examples"),
        (["train-lfm", "--stage", "vae", "--set", "vae_steps=9000000", "--set", "vae_batch_size=200"], "vae_steps"),
        (["sample-lfm", "--set", "num_samples=10000000", "--set", "steps=1000"], "~1.0e+10 sample evaluations"),
        (["sample-lfm", "--set", "num_samples=1e12", "--fine", "x"], "num_samples=1.0e+12 is over its limit"),
        (["train-lfm", "--set", "width=-4"], "width must be >= 0"),
        (["train-lfm", "--set", "depth=-1"], "depth must be >= 0"),
        (["train-lfm", "--set", "heads=-2"], "heads must be >= 0"),
        (["train-lfm", "--set", "image_size=-8"], "image_size must be"),
        (["train-lfm", "--set", "width=30", "--set", "heads=4"], "width 30 must be a multiple of 4 and of heads (4)"),
        (["train-lfm", "--model", "small", "--set", "width=34"], "width 34 must be a multiple of 4 and of heads (2)"),
    ],
)
def test_work_over_the_limit_exits_2_before_torch(args, needle, tmp_path):
    """The cost model (steps x batch over every stage; samples x solver steps) and the ranges (negative
    width/depth/heads/image_size, a width heads do not divide) refuse a run of
    days before torch loads and before --out exists (and before the missing --fine is named)."""
    import subprocess
    import sys

    code = (
        "import sys; from icml26.cli import main\n"
        "try:\n    main(sys.argv[1:])\nexcept SystemExit as e:\n"
        "    print('torch' in sys.modules, e.code)"
    )
    out = tmp_path / "o"
    r = subprocess.run(
        [sys.executable, "-c", code, *args, "--out", str(out)], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert r.stdout.split() == ["False", "2"], (r.stdout, r.stderr)
    assert needle in r.stderr and r.stderr.startswith("icml26: error:"), r.stderr
    assert not out.exists()
