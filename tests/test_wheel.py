"""The package as a user installs it: a wheel in a fresh venv, recipes found by name from any folder."""

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A fresh venv holding only the icml26 wheel; its dependencies (torch, ...) are this
    environment's, reached through a path file, so nothing is downloaded."""
    tmp = tmp_path_factory.mktemp("wheel")
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(tmp), str(ROOT)],
        capture_output=True,
        text=True,
    )
    assert build.returncode == 0, build.stderr[-2000:]
    wheel = next(tmp.glob("icml26-*.whl"))
    venv = tmp / "venv"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    # this environment's packages (torch, typer, ...) as a plain path: its editable icml26 finder is not loaded
    (site / "zz_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    inst = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", str(site), str(wheel)],
        capture_output=True,
        text=True,
    )
    assert inst.returncode == 0, inst.stderr[-2000:]
    return py


def _run(py, args, cwd):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([str(py), "-m", "icml26", *args], cwd=cwd, capture_output=True, text=True, env=env)


def test_wheel_runs_a_shipped_recipe_by_name_from_any_folder(installed, tmp_path):
    where = subprocess.run(
        [str(installed), "-c", "import icml26; print(icml26.__file__)"], cwd=tmp_path, capture_output=True, text=True
    )
    assert str(installed.parents[1]) in where.stdout, where.stdout + where.stderr  # the wheel, not the checkout
    r = _run(installed, ["bai", "-r", "tiny", "-q"], tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    recs = [json.loads(line) for line in r.stdout.splitlines()]
    assert recs[0]["kind"] == "config" and recs[-1]["kind"] == "summary"
    assert any(x["kind"] == "result" for x in recs)
    # a repository path keeps working outside the repository
    r2 = _run(installed, ["bai", "-r", "recipes/bai/tiny.yaml", "-q"], tmp_path)
    assert r2.returncode == 0, r2.stderr[-2000:]

    def results(out):
        return [
            (x["algo"], x["error_probability"], x["simple_regret"])
            for x in map(json.loads, out.splitlines())
            if x["kind"] == "result"
        ]

    assert results(r2.stdout) == results(r.stdout)


def test_wheel_unknown_recipe_name_lists_the_shipped_ones(installed, tmp_path):
    r = _run(installed, ["bai", "-r", "no-such-recipe"], tmp_path)
    assert r.returncode == 2
    assert "shipped:" in r.stderr and "tiny" in r.stderr
