"""``icml26 env``: versions, device and kernel backends."""

from __future__ import annotations

from typing import Annotated

import typer


def env(
    build: Annotated[
        bool,
        typer.Option(
            "--build/--no-build",
            help="Load (and JIT-build if needed, about a minute per kernel the first time) every kernel to report "
            "its backend.",
        ),
    ] = True,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Only the JSON line on stdout, no table.")] = False,
) -> None:
    """Print versions, the compute device and which kernel backend each op family uses."""
    import importlib
    import json
    import platform
    import sys

    import icml26
    from icml26.core import ext, progress
    from icml26.ops import KERNELS

    progress.set_quiet(quiet)  # (-q also silences the first-build notes)

    info: dict = {
        "kind": "env",
        "icml26": icml26.__version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
    }
    from importlib import metadata

    for mod, dist in (
        ("torch", "torch"),
        ("numpy", "numpy"),
        ("scipy", "scipy"),
        ("typer", "typer"),
        ("rich", "rich"),
        ("transformers", "transformers"),
        ("safetensors", "safetensors"),
        ("gymnasium", "gymnasium"),
        ("sklearn", "scikit-learn"),
    ):
        try:
            info[mod] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            info[mod] = None
    import torch

    info["device"] = "cuda" if torch.cuda.is_available() else "cpu"
    info["cuda"] = torch.version.cuda
    info["torch_threads"] = torch.get_num_threads()
    info["force_ref"] = ext.force_ref()
    kernels = {}
    for name, mod in KERNELS.items():
        m = importlib.import_module(mod) if build else sys.modules.get(mod)
        if build:
            kernels[name] = m.backend()
        else:
            kernels[name] = ext.backend(name) or "not loaded"
        # why a family fell back: the loader's reason, or the module's own (quant_cuda resolves
        # its routes itself)
        reason = ext.why(name) or (m.why() if m is not None and callable(getattr(m, "why", None)) else None)
        if reason:
            kernels[name] += f" ({reason})"
    info["kernels"] = kernels
    typer.echo(json.dumps(info))
    if quiet:
        return
    from rich.table import Table

    from icml26.core.output import stderr_console

    t = Table(title="icml26 env", show_header=False)
    for k, v in info.items():
        if k == "kind":
            continue
        t.add_row(k, json.dumps(v) if isinstance(v, dict) else str(v))
    stderr_console().print(t)
