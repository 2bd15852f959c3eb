"""A user's text that is too short for the requested tokens is refused before any output."""

from typer.testing import CliRunner

from icml26.cli import app


def test_short_eval_text_refused_before_config_record(tmp_path):
    t = tmp_path / "t.txt"
    t.write_text("hello world this is text\n")
    out = tmp_path / "run"
    r = CliRunner().invoke(app, ["quantize", "--eval-text", str(t), "-q", "--out", str(out)])
    assert r.exit_code == 2, r.output
    assert r.stdout == "", r.stdout
    assert "--eval-text" in r.stderr and "needed (eval_tokens)" in r.stderr, r.stderr
    assert len([ln for ln in r.stderr.splitlines() if ln.strip()]) == 1
    assert not out.exists()
