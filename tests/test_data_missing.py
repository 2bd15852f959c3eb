"""A machine without the Debian data: commands refuse before their config record, tests skip
with the install command, and CI (ICML26_REQUIRE_DATA=1) turns those skips into failures.

The data is located under ``ICML26_DATA_ROOT`` (default ``/``), so an empty folder stands in
for a machine where ``make data`` never ran, without uninstalling anything."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from icml26.cli import app

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()
QUICK = ("-p", "no:cacheprovider", "-p", "no:hypothesispytest", "--assert=plain")  # an inner pytest run in seconds


def test_data_root_locates_every_debian_package(tmp_path, monkeypatch):
    from icml26.core.data import DEBIAN_DATA, data_root, debian_path, missing_debian, require_debian
    from icml26.core.errors import MissingDataError

    monkeypatch.setenv("ICML26_DATA_ROOT", str(tmp_path))
    assert data_root() == tmp_path
    assert missing_debian() == list(DEBIAN_DATA)
    with pytest.raises(
        MissingDataError,
        match=r"dict-gcide is not installed: run `make data` as root \(or `apt-get install -y dict-gcide`\)",
    ):
        require_debian("dict-gcide")
    marker = debian_path(DEBIAN_DATA["dict-gcide"])
    assert marker == tmp_path / "usr/share/dictd/gcide.dict.dz"
    marker.parent.mkdir(parents=True)
    marker.write_bytes(b"")
    assert "dict-gcide" not in missing_debian() and require_debian("dict-gcide") == marker
    monkeypatch.delenv("ICML26_DATA_ROOT")
    assert data_root() == Path("/")


@pytest.fixture(autouse=True)
def _fresh_data_caches():
    """The loaders memoise what they read (one data root per process); these tests change the
    root mid-process, so each starts and ends with empty caches, whatever ran before."""
    from icml26.core.data import text
    from icml26.methods.probing import sentences

    caches = [text._load, sentences.wordnet_vocabulary]
    for c in caches:
        c.cache_clear()
    yield
    for c in caches:
        c.cache_clear()


@pytest.mark.parametrize(
    "command, package",
    [
        ("train-lfm", "dataset-fashion-mnist"),
        ("evict-kv", "python3.11-doc"),
        ("quantize", "python3.11-doc"),
        ("probe-syntax", "wordnet-base"),
        ("filter-data make-corpus", "python3.11-doc"),
    ],
)
def test_missing_data_is_refused_before_the_config_record(command, package, tmp_path, monkeypatch):
    monkeypatch.setenv("ICML26_DATA_ROOT", str(tmp_path / "empty"))
    out = tmp_path / "run"
    recipe = ROOT / "recipes" / command.split()[0] / "tiny.yaml"
    r = runner.invoke(app, [*command.split(), "--recipe", str(recipe), "-q", "--out", str(out)])
    assert r.exit_code == 2, r.output
    assert r.stdout == ""  # no config record (nor anything else) on stdout
    assert (
        r.stderr.strip()
        == f"icml26: error: Debian package {package} is not installed: run `make data` as root (or `apt-get "
        f"install -y {package}`)"
    )
    assert not out.exists()


def test_tiny_recipe_contract_skips_without_data_and_fails_under_ci(tmp_path, monkeypatch):
    from test_cli import test_tiny_recipe_contract

    recipe = ROOT / "recipes" / "train-lfm" / "tiny.yaml"
    monkeypatch.setenv("ICML26_DATA_ROOT", str(tmp_path / "empty"))
    monkeypatch.delenv("ICML26_REQUIRE_DATA", raising=False)
    with pytest.raises(pytest.skip.Exception) as e:
        test_tiny_recipe_contract(recipe, tmp_path / "a")
    assert (
        str(e.value)
        == "needs Debian dataset-fashion-mnist: run `make data` as root (or `apt-get install -y dataset-fashion-mnist`)"
    )
    monkeypatch.setenv("ICML26_REQUIRE_DATA", "1")
    with pytest.raises(pytest.fail.Exception) as e:
        test_tiny_recipe_contract(recipe, tmp_path / "b")
    assert str(e.value).startswith(
        "required data missing under CI: needs Debian dataset-fashion-mnist: run `make data`"
    )


def test_a_missing_data_error_in_a_test_becomes_a_skip(tmp_path, monkeypatch, pytester):
    """The conftest hook: a test that reaches a MissingDataError of data missing here is skipped
    with the install command; one for data that is installed, or under CI, stays a failure."""
    pytester.makeconftest((ROOT / "tests" / "conftest.py").read_text())
    pytester.makepyfile(
        test_x="""
        from icml26.core.data.text import load_corpus

        def test_reads_gcide():
            load_corpus("gcide")
    """
    )
    monkeypatch.setenv("ICML26_DATA_ROOT", str(tmp_path / "empty"))
    monkeypatch.delenv("ICML26_REQUIRE_DATA", raising=False)
    r = pytester.runpytest_inprocess("-rs", *QUICK)
    r.assert_outcomes(skipped=1)
    assert "needs Debian dict-gcide: run `make data` as root" in r.stdout.str()
    monkeypatch.setenv("ICML26_REQUIRE_DATA", "1")
    pytester.runpytest_inprocess(*QUICK).assert_outcomes(failed=1)


def test_make_data_installs_every_package_the_code_looks_for():
    from icml26.core.data import DEBIAN_DATA

    make = (ROOT / "Makefile").read_text()
    line = next(x for x in make.splitlines() if "apt-get install" in x)
    assert set(DEBIAN_DATA) <= set(line.split()), line
    # make demo / make test run it themselves where the user can (root with apt-get)
    assert "demo: setup data-if-missing" in make and "test: setup data-if-missing" in make
