"""Loader for the C++/CUDA kernels in ``icml26/csrc``.

Each kernel family is one extension that registers its ops in the ``icml26`` torch library
namespace (``TORCH_LIBRARY_FRAGMENT(icml26, m)``), so they are called as
``torch.ops.icml26.<op>``. Resolution happens lazily, on first use:

1. ``ICML26_FORCE_REF=1`` -> the pure ``_ref`` twin (no warning);
2. a prebuilt shared library ``icml26/_ext/<name>.so`` if present;
3. a JIT build with ``torch.utils.cpp_extension.load`` into a cache directory
   (``$ICML26_EXT_DIR`` or ``~/.cache/icml26/ext``), keyed by source hash, torch version and CPU;
4. otherwise the ``_ref`` twin, with ONE warning naming why.
"""

from __future__ import annotations

import hashlib
import os
import platform
import sys
import threading
import warnings
from contextlib import contextmanager
from pathlib import Path

CSRC = Path(__file__).resolve().parent.parent / "csrc"
_lock = threading.Lock()
_state: dict[str, str] = {}  # name -> "ext-cpu" | "ext-cuda" | "ref"
_why: dict[str, str] = {}
_lib: dict[str, Path] = {}  # name -> the shared library loaded for it


def force_ref() -> bool:
    return os.environ.get("ICML26_FORCE_REF", "") not in ("", "0", "false", "False")


def cache_dir() -> Path:
    base = os.environ.get("ICML26_EXT_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "icml26", "ext")
    return Path(base)


def _key(name: str, sources: list[Path], flags: list[str]) -> str:
    import torch

    h = hashlib.sha256()
    for s in sources:
        h.update(s.read_bytes())
    for d in sorted({p.parent for p in sources}):  # headers beside the sources
        for hdr in sorted(d.glob("*.h")):
            h.update(hdr.read_bytes())
    h.update(" ".join(flags).encode())
    h.update(str(CSRC).encode())  # one build folder per checkout: torch's build files name the source paths
    h.update(torch.__version__.encode())
    h.update(platform.machine().encode())
    try:
        h.update(Path("/proc/cpuinfo").read_text().split("flags", 1)[1].split("\n", 1)[0].encode())
    except (OSError, IndexError):
        pass
    return f"{name}-{h.hexdigest()[:16]}"


def load(name: str, sources: list[str], *, extra_cflags: list[str] | None = None, cuda: bool = False) -> str:
    """Make the ops of kernel family ``name`` available; return the backend in use.

    sources: paths relative to ``icml26/csrc``. Returns "ext-cpu"/"ext-cuda" when
    ``torch.ops.icml26`` has them, "ref" otherwise (callers then use their ``_ref`` twin)."""
    with _lock:
        if name in _state:
            return _state[name]
        if force_ref():
            _state[name] = "ref"
            _why[name] = "ICML26_FORCE_REF=1"
            return "ref"
        import torch

        prebuilt = Path(__file__).resolve().parent.parent / "_ext" / f"{name}.so"
        try:
            if prebuilt.is_file():
                torch.ops.load_library(str(prebuilt))
                _lib[name] = prebuilt
            else:
                from torch.utils import cpp_extension

                srcs = [CSRC / s for s in sources]
                flags = ["-O3", "-std=c++17", "-march=native", "-fopenmp"] + list(extra_cflags or [])
                key = _key(name, srcs, flags)
                build = cache_dir() / key
                build.mkdir(parents=True, exist_ok=True)
                lib = build / f"{key.replace('-', '_')}.so"
                with _build_lock(build):
                    from icml26.core import progress

                    if not lib.is_file() and not progress.quiet():
                        print(
                            f"icml26: building the '{name}' C++ kernel (first use; about a minute, cached in "
                            f"{build.parent})",
                            file=sys.stderr,
                            flush=True,
                        )
                    cpp_extension.load(
                        name=key.replace("-", "_"),
                        sources=[str(s) for s in srcs],
                        extra_cflags=flags,
                        extra_ldflags=["-fopenmp"],
                        build_directory=str(build),
                        is_python_module=False,
                        verbose=False,
                    )
                _lib[name] = lib
            _state[name] = "ext-cuda" if cuda else "ext-cpu"
        except Exception as e:  # compiler missing, build error, ...
            _state[name] = "ref"
            _why[name] = f"{type(e).__name__}: {str(e).strip().splitlines()[-1] if str(e).strip() else ''}"
            warnings.warn(
                f"icml26: the '{name}' C++ kernel is unavailable ({_why[name]}); using the slower pure-Python "
                "reference",
                RuntimeWarning,
                stacklevel=2,
            )
        return _state[name]


@contextmanager
def _build_lock(build: Path):
    """Hold an exclusive lock on ``build`` while torch builds or loads the extension there.

    torch's own lock (``build/lock``, a file whose presence means "a build is running") is left
    behind when a build is killed (Ctrl-C, a timeout), and every later load then waits for it
    forever. This lock is an flock, released by the kernel when its holder dies: whoever holds
    it knows no other icml26 process is building there, so a leftover ``build/lock`` is stale
    and is removed."""
    try:
        import fcntl
    except ImportError:  # (not POSIX: torch's lock alone)
        yield
        return
    with open(build / ".icml26-build.lock", "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            stale = build / "lock"
            if stale.exists():
                stale.unlink(missing_ok=True)
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def backend(name: str) -> str | None:
    """The backend already resolved for ``name`` (None if not yet loaded)."""
    return _state.get(name)


def library_path(name: str) -> Path | None:
    """The shared library loaded for ``name`` (for C entry points called through ctypes), or
    None if it was not loaded (not yet, or the ``_ref`` twin is in use)."""
    p = _lib.get(name)
    return p if p is not None and p.is_file() else None


def why(name: str) -> str | None:
    return _why.get(name)


def reset(name: str | None = None) -> None:
    """Forget a resolution (tests use this with ICML26_FORCE_REF)."""
    with _lock:
        if name is None:
            _state.clear()
            _why.clear()
            _lib.clear()
        else:
            _state.pop(name, None)
            _why.pop(name, None)
            _lib.pop(name, None)
