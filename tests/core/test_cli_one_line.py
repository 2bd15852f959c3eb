"""Every bad input is one line on stderr, whatever the parser's message holds."""

import pytest
import typer
from typer.testing import CliRunner

from icml26.cli import _guard
from icml26.core.errors import InputError

runner = CliRunner()


@pytest.mark.parametrize("msg", ["env file 'a\nb.yaml' is empty", "bad value:\n  - 1\n  - 2\n"])
def test_input_error_with_newlines_is_one_line(msg):
    def cmd() -> None:
        raise InputError(msg)

    app = typer.Typer()
    app.command()(_guard(cmd))
    r = runner.invoke(app, [])
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert lines == ["icml26: error: " + " ".join(msg.split())], r.stderr


@pytest.mark.parametrize("rank, printed", [("0", True), ("1", False), ("3", False)])
def test_under_torchrun_only_rank_0_prints_the_error(monkeypatch, rank, printed):
    """Every torchrun rank validates its input and exits 2; the message appears once (rank 0)."""

    def cmd() -> None:
        raise InputError("steps must be >= 1, got -1")

    monkeypatch.setenv("RANK", rank)
    app = typer.Typer()
    app.command()(_guard(cmd))
    r = runner.invoke(app, [])
    assert r.exit_code == 2
    assert r.stderr.strip().splitlines() == (["icml26: error: steps must be >= 1, got -1"] if printed else [])
