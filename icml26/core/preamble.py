"""The command preamble: recipe + ``--set`` + typed options -> a frozen Config, the seed, the
device and the run folder, checked in that order before any heavy import or output.

A command file keeps its options and calls::

    run = prepare("icml26.methods.x.config:Config", "x", recipe=recipe, sets=set_, seed=seed,
                  device=device, out=out, resume=resume, steps=steps)
    stream(m.run(run.cfg, seed=run.seed, device=run.device), run, columns=[...])

``prepare`` does, once for every command: ``--set help`` (help, unit, choices and the effective
default of each field); the strict Config (unknown keys, types, ranges, ``sized`` limits and the
Config's ``work()`` cost model: exit 2 naming the setting); the seed (command line, else the
recipe's, else ``default_seed``); the device (``devices`` lists what the command runs on: a
command that computes on the CPU only refuses ``--device cuda`` instead of ignoring it); the
``--out`` folder (refused when it holds a run without ``--resume``, or is a non-empty folder that
holds no run), and with ``--resume`` the records of the run to continue.
"""

from __future__ import annotations

import dataclasses
import importlib
from pathlib import Path
from typing import Any, Sequence

from icml26.core.errors import InputError


@dataclasses.dataclass(frozen=True)
class Run:
    """What the preamble settled for one run of a command, and what ``core.output.stream`` writes
    under: the command's name in records, its Config and seed (the config record), ``--out``.
    A command without settings (a report, a scorer) makes its own: ``Run("icr report", out=out)``."""

    command: str
    cfg: Any = None
    seed: int | None = None
    device: str | None = None
    out: str | None = None
    resume: bool = False  # --out may hold a run: the records continue it
    resumable: bool = False  # the command has --resume (named when --out holds an unfinished run)
    previous: list | None = None  # --resume: the records of the run to continue (else None)

    def replace(self, **changes: Any) -> Run:
        """This run with some parts changed (``run.replace(cfg=cfg, previous=records)``)."""
        return dataclasses.replace(self, **changes)


def config_class(spec: type | str) -> type:
    """A Config class, or ``"module:Class"`` imported now (a torch-free module: settings are
    checked before the method's heavy imports)."""
    if isinstance(spec, str):
        mod, _, name = spec.partition(":")
        return getattr(importlib.import_module(mod), name)
    return spec


def parse_names(value: str | None, valid: Sequence[str], flag: str) -> tuple[str, ...] | None:
    """An option of names, ``all`` or a comma list of ``valid`` (``--variant sgf,none``) -> a tuple
    (repeats dropped; None when absent); InputError naming the flag on an unknown or empty name."""
    if value is None:
        return None
    from icml26.core.recipe import parse_choices

    try:
        return tuple(parse_choices(value, valid, flag))
    except ValueError as e:
        raise InputError(str(e)) from None


def parse_numbers(values: Sequence[str] | str | None, flag: str, kind: type = float) -> tuple | None:
    """A repeatable option of comma-separated numbers (``--batch 64,256 --batch 1024``) -> a tuple
    of ``kind`` (None when absent); InputError naming the flag on a value that is not a number."""
    from icml26.core.options import split_csv

    if values is None:
        return None
    items = split_csv([values] if isinstance(values, str) else list(values))
    if items is None:
        return None
    out = []
    for v in items:
        try:
            out.append(kind(v))
        except ValueError:
            try:
                f = float(v)
            except ValueError:
                f = None
            if kind is int and f is not None and f.is_integer():
                out.append(int(f))
                continue
            what = "integers" if kind is int else "numbers"
            raise InputError(f"{flag}: expected {what} (comma-separated), got {','.join(items)!r}") from None
    return tuple(out)


def resolve_seed(seed: int | None, recipe: str | Path | None, command: str, default: int | None = 0) -> int | None:
    """The seed: the command line's, else the recipe's, else ``default``."""
    if seed is not None:
        return seed
    if recipe is not None:
        from icml26.core.recipe import load_recipe

        rs = load_recipe(recipe, command)[1]
        if rs is not None:
            return rs
    return default


def resolve_device(device: str | None, command: str, devices: Sequence[str] = ("cpu", "cuda")) -> str | None:
    """``auto`` / ``cpu`` / ``cuda`` / ``cuda:N`` -> a device string; None when the command offers
    no ``--device``. A command that computes on the CPU only (``devices=("cpu",)``) takes ``auto``
    and ``cpu`` and refuses a GPU by name, rather than ignoring it."""
    if device is None:
        return None
    if "cuda" not in devices:
        if device in ("auto", "cpu"):
            return "cpu"
        if device == "cuda" or device.startswith("cuda:"):
            raise InputError(f"--device {device}: {command} computes on the CPU only; use --device cpu")
        raise InputError(f"--device {device!r}: expected auto or cpu ({command} computes on the CPU only)")
    if device == "cpu":
        return "cpu"  # no torch import for the common case
    from icml26.core.device import resolve_device as _resolve

    return _resolve(device)


def _visible(p: Path) -> list[str]:
    try:
        return sorted(n for n in (q.name for q in p.iterdir()) if not n.startswith("."))
    except OSError:
        return []


def check_out(out: str | None, *, resume: bool = False, resumable: bool = False, allow_files: bool = False) -> None:
    """Refuse, before anything runs, an ``--out`` that cannot take this run: not a folder, a
    folder that holds a run (unless ``resume``), or a non-empty folder that holds no run (its
    files are not ours to mix a run into; ``allow_files``: the command writes into an existing
    folder by design). Creates nothing."""
    if out is None:
        return
    from icml26.core.output import accept_out_dir, holds_run_message

    if not str(out).strip():
        raise InputError("--out is empty; give a directory path")
    p = Path(out)
    if p.exists() and not p.is_dir():
        raise InputError(f"--out {str(out)!r} exists and is not a directory")
    if not p.is_dir():
        accept_out_dir(p)
        return
    msg = holds_run_message(p, str(out), resumable) if not resume else None
    if msg:
        raise InputError(msg)
    mine = any((p / n).exists() for n in ("records.jsonl", "config.yaml"))
    if not mine and not allow_files:
        names = _visible(p)
        if names:
            shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
            raise InputError(
                f"--out {str(out)!r} is a folder that holds other files ({shown}) and no run; "
                "give a new or empty folder for the run"
            )
    accept_out_dir(p)


def prepare(
    config: type | str,
    command: str,
    *,
    recipe: str | Path | None = None,
    sets: Sequence[str] | None = None,
    seed: int | None = None,
    default_seed: int | None = 0,
    device: str | None = None,
    devices: Sequence[str] = ("cpu", "cuda"),
    out: str | None = None,
    resume: bool = False,
    resumable: bool = False,
    out_files_ok: bool = False,
    recipe_command: str | None = None,
    section: str | None = None,
    sections: Sequence[str] = (),
    load_previous: bool = True,
    **typed: Any,
) -> Run:
    """The preamble of a command (see the module docstring); every refusal is an InputError
    (exit 2, one line) raised before the method's heavy imports and before any output.

    config: the Config class or ``"module:Class"``; command: the name in records
    (``"icr train"``); recipe_command: the recipe's ``method:`` (default: the first word of
    ``command``); section / sections: a recipe with one config mapping per subcommand
    (``config: {make-bench: {...}, train: {...}}``); load_previous: False where the command
    completes its Config from its inputs first and calls ``resume_records`` itself; typed: the
    command's own options (None = not given) over the recipe and --set."""
    from icml26.core.recipe import resolve

    cls = config_class(config)
    rc = recipe_command or command.split()[0]
    cfg = resolve(cls, rc, recipe, sets, section=section, sections=sections, **typed)
    s = resolve_seed(seed, recipe, rc, default_seed)
    dev = resolve_device(device, command, devices)
    if resume and out is None:
        raise InputError("--resume needs --out DIR: the folder of the run to continue")
    check_out(out, resume=resume, resumable=resumable, allow_files=out_files_ok)
    previous = None
    if resume and load_previous:
        from icml26.core.output import resume_records

        previous = resume_records(out, command=command, config=cfg, seed=s)
    return Run(command, cfg, s, dev, out, resume=resume, resumable=resumable, previous=previous)
