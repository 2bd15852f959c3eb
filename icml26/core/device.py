"""Device choice: ``auto`` picks CUDA when present, else CPU."""

from __future__ import annotations

from icml26.core.errors import InputError

_CHOICES = ("auto", "cpu", "cuda")


def resolve_device(device: str = "auto") -> str:
    """Return a torch device string for ``auto``/``cpu``/``cuda``/``cuda:N``.

    Raises InputError when CUDA is asked for but not available, or the name is unknown."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        return "cpu"
    if device == "cuda" or device.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise InputError(f"--device {device}: CUDA is not available on this machine; use --device cpu")
        return device
    raise InputError(f"--device {device!r}: expected one of {', '.join(_CHOICES)} or cuda:N")
