"""Reading ``.safetensors`` files a user points at (models, checkpoints, classifiers), with one
set of checks and messages: a truncated, corrupt or foreign file is an ``InputError`` (exit 2)
naming the file and how to fix it, raised before any tensor data is read.

Format: https://github.com/huggingface/safetensors (8-byte little-endian header length, a
JSON header with each tensor's ``data_offsets``, then the data).
"""

from __future__ import annotations

from pathlib import Path

from icml26.core.errors import InputError

MAX_HEADER = 100 << 20  # the safetensors library refuses larger headers


def check(f: Path, fix: str) -> dict:
    """Cheap structural check of a .safetensors file (header only, no tensor data read):
    8-byte little-endian header length, a JSON header, and a file long enough for every
    tensor's data_offsets. Returns the parsed header (tensor name -> dtype/shape/data_offsets,
    and ``__metadata__``); InputError naming ``f`` and ``fix`` otherwise."""
    import json
    import struct

    def bad(why: str):
        return InputError(f"{str(f)!r} is not a valid safetensors file ({why}): {fix}")

    try:
        size = f.stat().st_size
        with open(f, "rb") as fh:
            head = fh.read(8)
            if len(head) < 8:
                raise bad("truncated or corrupt: shorter than its 8-byte header length")
            (n,) = struct.unpack("<Q", head)
            if n > MAX_HEADER or 8 + n > size:
                raise bad(
                    "truncated or corrupt: header length past the end of the file"
                    if n <= MAX_HEADER
                    else "corrupt: header length too large"
                )
            header = json.loads(fh.read(n).decode("utf-8"))
    except OSError as e:
        raise InputError(f"cannot read {str(f)!r}: {e.strerror or e}") from None
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise bad("corrupt: its header is not JSON") from None
    if not isinstance(header, dict):
        raise bad("corrupt: its header is not a JSON object")
    end = 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            b, e = info["data_offsets"]
            end = max(end, int(e))
        except (TypeError, KeyError, ValueError):
            raise bad(f"corrupt: tensor {name!r} has no data_offsets") from None
    if 8 + n + end > size:
        raise bad(f"truncated or corrupt: {size} bytes, its tensors need {8 + n + end}")
    return header


def read(path: str | Path, *, fix: str, framework: str = "pt") -> tuple[dict, dict]:
    """(tensors, metadata) of the safetensors file ``path``: torch tensors (framework "pt") or
    numpy arrays ("np"); metadata the header's string map ({} if none). InputError (naming
    ``path`` and ``fix``) for a missing, truncated, corrupt or unreadable file."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{str(path)!r} does not exist or is not a file: {fix}")
    check(p, fix)
    from safetensors import SafetensorError, safe_open

    if framework == "np":
        from safetensors.numpy import load_file
    else:
        from safetensors.torch import load_file
    try:
        with safe_open(str(p), framework=framework) as f:
            meta = f.metadata() or {}
        return load_file(str(p)), meta
    except (SafetensorError, OSError, ValueError, TypeError) as e:
        why = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise InputError(f"{str(path)!r} is not a valid safetensors file ({why}): {fix}") from None
