"""Checkpoints as safetensors (never pickle): tensors + one JSON metadata entry.

Training checkpoints hold ``model.*`` (and ``ema.*``) weights, ``optim.<param>.<key>`` AdamW
state, and metadata (step, elapsed seconds, architecture, data provenance, optimizer groups).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import Tensor

from icml26.core.errors import InputError

META_KEY = "icml26"


def save(path: str | Path, tensors: dict[str, Tensor], meta: dict) -> Path:
    """Atomically write ``tensors`` (made contiguous, on CPU) and ``meta`` (JSON) to ``path``."""
    from safetensors.torch import save_file

    from icml26.core.output import atomic_path

    flat = {k: v.detach().to("cpu").contiguous() for k, v in tensors.items()}
    with atomic_path(path) as tmp:
        save_file(flat, str(tmp), metadata={META_KEY: json.dumps(meta)})
    return Path(path)


def load(path: str | Path, what: str = "checkpoint") -> tuple[dict[str, Tensor], dict]:
    """Read a file written by :func:`save`. InputError for a missing or foreign file."""
    from icml26.core.safetensors_file import read

    p = Path(path)
    if not p.is_file():
        raise InputError(f"{what} {str(path)!r} does not exist")
    tensors, md = read(p, fix=f"point at a {what} written by icml26 (train-lfm)", framework="pt")
    return tensors, _meta(md, path, what)


def _meta(md: dict, path: str | Path, what: str) -> dict:
    """The icml26 metadata of a checkpoint's safetensors metadata map; InputError if absent or not JSON."""
    if not isinstance(md, dict) or META_KEY not in md:
        raise InputError(f"{what} {str(path)!r}: not an icml26 checkpoint (no metadata)")
    try:
        return json.loads(md[META_KEY])
    except (TypeError, json.JSONDecodeError):
        raise InputError(f"{what} {str(path)!r}: its icml26 metadata is not JSON") from None


def sub(tensors: dict[str, Tensor], prefix: str) -> dict[str, Tensor]:
    """Entries under ``prefix.`` with the prefix removed."""
    n = len(prefix) + 1
    return {k[n:]: v for k, v in tensors.items() if k.startswith(prefix + ".")}


def prefixed(sd: dict[str, Tensor], prefix: str) -> dict[str, Tensor]:
    return {f"{prefix}.{k}": v for k, v in sd.items()}


def optim_to_flat(opt: torch.optim.Optimizer) -> tuple[dict[str, Tensor], list]:
    """AdamW state -> ({"optim.<i>.<key>": tensor}, param_groups JSON)."""
    sd = opt.state_dict()
    flat = {}
    for i, st in sd["state"].items():
        for k, v in st.items():
            flat[f"optim.{i}.{k}"] = v if torch.is_tensor(v) else torch.tensor(v)
    return flat, sd["param_groups"]


def optim_from_flat(opt: torch.optim.Optimizer, tensors: dict[str, Tensor], groups: list) -> None:
    state: dict = {}
    for k, v in sub(tensors, "optim").items():
        i, key = k.split(".", 1)
        state.setdefault(int(i), {})[key] = v
    opt.load_state_dict({"state": state, "param_groups": groups})


def existing_file(path: str | Path, what: str) -> Path:
    """``path`` as a Path when it is a file; InputError naming ``what`` when it is a folder (pointing
    at the checkpoint inside a run folder) or does not exist."""
    p = Path(path)
    if p.is_dir():
        inner = p / "checkpoint.safetensors"
        where = f"point at {str(inner)!r}" if inner.is_file() else "point at a checkpoint file"
        raise InputError(f"{what} {str(path)!r} is a directory; {where}")
    if not p.is_file():
        raise InputError(f"{what} {str(path)!r} does not exist")
    return p


def header(path: str | Path, what: str = "checkpoint", fix: str = "") -> tuple[dict[str, list[int]], dict]:
    """(tensor name -> shape, metadata) of a file written by :func:`save`, from its header only
    (no tensor data read). InputError for a missing, corrupt or foreign file."""
    from icml26.core.safetensors_file import check

    p = existing_file(path, what)
    fix = fix or f"point at a {what} written by icml26 (train-lfm)"
    head = check(p, fix)
    shapes = {k: v.get("shape") for k, v in head.items() if k != "__metadata__"}
    if not all(isinstance(v, list) for v in shapes.values()):
        raise InputError(f"{str(path)!r} is not a valid safetensors file (corrupt: a tensor has no shape): {fix}")
    return shapes, _meta(head.get("__metadata__") or {}, path, what)
