import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("OMP_NUM_THREADS", "2")


def need(check, reason: str):
    """Skip with ``reason`` (an install command) when ``check()`` is false;
    under CI (ICML26_REQUIRE_DATA=1) fail instead, so CI always exercises real data."""
    ok = False
    try:
        ok = bool(check())
    except Exception:  # noqa: BLE001
        ok = False
    if not ok:
        if os.environ.get("ICML26_REQUIRE_DATA"):
            pytest.fail(f"required data missing under CI: {reason}")
        pytest.skip(reason)


def need_debian(package: str):
    from icml26.core.data import DEBIAN_DATA

    need(lambda: Path(DEBIAN_DATA[package]).exists(), f"needs Debian {package}: run `make data` (apt-get install -y {package})")


def need_module(name: str, install: str):
    import importlib.util

    need(lambda: importlib.util.find_spec(name) is not None, f"needs {name}: {install}")


@pytest.fixture
def repo_root() -> Path:
    return ROOT
