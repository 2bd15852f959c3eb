"""Every command: --help works; every tiny recipe runs and honours the output contract."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from icml26.cli import COMMANDS, app

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()
# tiny recipes that need inputs made by another command first, or a group subcommand (tested in their own files)
NEEDS_INPUTS = {
    "sample-lfm",
    "filter-data",
    "traffic",
    "muse",
    "icr",
    "geo-fusion",
    "bfq",
    "mamoe",
}  # groups: a subcommand runs tiny.yaml
# commands whose tiny run is itself a long test kept in their own test file
TINY = sorted(
    p
    for p in (ROOT / "recipes").glob("*/tiny.yaml")
    if p.parent.name in {c[0] for c in COMMANDS} and p.parent.name not in NEEDS_INPUTS
)


@pytest.mark.parametrize("name", [c[0] for c in COMMANDS])
def test_help(name):
    r = runner.invoke(app, [name, "--help"])
    assert r.exit_code == 0, r.output
    assert "Usage" in r.output


def test_root_help_lists_every_command():
    r = runner.invoke(app, ["--help"])
    assert r.exit_code == 0
    for name, _, panel in COMMANDS:
        assert name in r.output


@pytest.mark.parametrize("recipe", TINY, ids=lambda p: p.parent.name)
def test_tiny_recipe_contract(recipe, tmp_path):
    from conftest import skip_if_data_missing

    r = runner.invoke(app, [recipe.parent.name, "--recipe", str(recipe), "-q", "--out", str(tmp_path / "run")])
    skip_if_data_missing(r)  # a data package not installed here: skip with its install command (CI: fail)
    assert r.exit_code == 0, (r.output, r.exception)
    recs = [json.loads(line) for line in r.stdout.splitlines()]
    assert recs and recs[0]["kind"] == "config" and recs[-1]["kind"] == "summary"
    assert any(x["kind"] in ("result", "step") for x in recs)


@pytest.mark.parametrize("recipe", TINY, ids=lambda p: p.parent.name)
def test_bad_recipe_key_exits_2(recipe, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(recipe.read_text() + "\n" if "config:" in recipe.read_text() else "")
    text = recipe.read_text().replace("config:", "config:\n  no_such_key_xyz: 1", 1)
    bad.write_text(text)
    r = runner.invoke(app, [recipe.parent.name, "--recipe", str(bad), "-q"])
    assert r.exit_code == 2, r.output
    assert "no_such_key_xyz" in r.stderr and "valid keys" in r.stderr


def test_env_reports_backends():
    r = runner.invoke(app, ["env"])
    assert r.exit_code == 0, r.output
    info = json.loads(r.stdout.splitlines()[0])
    assert info["torch"] and info["device"] in ("cpu", "cuda")
    assert info["kernels"]["bai"].split()[0] in ("ext-cpu", "ref")
    import torch

    if not torch.cuda.is_available():  # the CUDA family says why it is not in use
        qc = info["kernels"]["quant_cuda"]
        assert qc.split()[0] in ("no-cuda", "ref") and "(" in qc and qc.endswith(")"), qc


def test_eof_in_a_command_is_bad_input_not_an_interrupt(tmp_path, capsys):
    """An empty or truncated input file (np.load raises EOFError) gives exit 2 and one line;
    click alone would report it as Ctrl-C (exit 130)."""
    import numpy as np
    import typer

    from icml26.cli import _guard

    empty = tmp_path / "audio.npz"
    empty.write_bytes(b"")

    def cmd():
        np.load(empty)

    with pytest.raises(typer.Exit) as ei:
        _guard(cmd)()
    assert ei.value.exit_code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "ended early" in err[0]
